"""Dataflow jobs (``@worker.dataflow``) against a real standalone sidecar, on the sync and the
asyncio worker alike (the asyncio one runs its own event loop in a thread, so every test is the
same code for both).

Jobs are one-off (no cron) and triggered once through the Admin API, so each test knows its one
execution; what the worker answered is read from the sidecar's record of it
(``AdminService.ListExecutions``). Every wait is for a condition, with a deadline; the only
timed pauses are the handlers' own pacing (``ctx.wait``), which no assertion depends on.

One-off and streaming loops, failures of ``fetch`` and ``process``, the stored
``streaming.process`` prop winning over the worker's, and every way a streaming loop stops: a
revoke, a lease lost with the sidecar frozen, an execution timeout, a sidecar restart, a
handover to a second worker or ``DisableJob``, a sidecar drain.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import grpc
import pytest

import shardcar
import shardcar.aio
from shardcar import (
    STREAMING_PROCESS_KEY,
    Assignment,
    InstanceSuffix,
    JobConfig,
    ShardingContext,
    Worker,
    WorkerOptions,
)
from shardcar._proto import shardcar_pb2 as pb
from shardcar._proto import shardcar_pb2_grpc as pb_grpc
from shardcar.dataflow import is_streaming, with_streaming

from conftest import wait_until

APIS = ["sync", "asyncio"]
HOLD = 30.0  # how long a held process() waits to be cancelled (it never takes that long)
ENDLESS = object()  # a feed that never runs dry


# -- what the job does, and what it saw ----------------------------------------------------------


@dataclasses.dataclass
class Call:
    kind: str  # "fetch", "process", "hold" (a held process() ended)
    item: int
    execution: str
    at: float  # time.monotonic()
    data: Any = None
    cancelled: Any = None
    reason: str = ""


class Script:
    """What each item's fetch() returns and process() does, and a record of every call.

    ``feeds[item]`` lists the batches fetch() returns in turn; after them it returns ``tail``:
    ``[]``, ``None`` or ``ENDLESS`` (a fresh one-element batch every time). ``fail_fetch`` /
    ``fail_process`` make the n-th call of an item raise; ``hold`` makes the n-th process() of
    an item wait until the item is cancelled (and return, so that the loop's own check is what
    stops it); ``pace`` makes every process() wait that long (or until cancelled).
    """

    def __init__(
        self,
        feeds: Dict[int, Sequence[Any]],
        tail: Any = (),
        *,
        fail_fetch: Optional[Dict[int, int]] = None,
        fail_process: Optional[Dict[int, int]] = None,
        hold: Optional[Dict[int, int]] = None,
        pace: float = 0.0,
    ) -> None:
        self.feeds = {item: list(batches) for item, batches in feeds.items()}
        self.tail = tail
        self.fail_fetch = fail_fetch or {}
        self.fail_process = fail_process or {}
        self.hold = hold or {}
        self.pace = pace
        self.calls: List[Call] = []
        self.contexts: List[ShardingContext] = []
        self._cond = threading.Condition()

    # -- the job's side --
    def fetch(self, ctx: ShardingContext) -> Any:
        n = self._add(ctx, "fetch")
        if self.fail_fetch.get(ctx.sharding_item) == n:
            raise RuntimeError(f"source of item {ctx.sharding_item} is down")
        batches = self.feeds.get(ctx.sharding_item, [])
        if n <= len(batches):
            return list(batches[n - 1])
        if self.tail is ENDLESS:
            return [n]
        return None if self.tail is None else list(self.tail)

    def process(self, ctx: ShardingContext, data: Any) -> Tuple[bool, float]:
        """Records the call; raises if told to. Returns (hold it?, pace)."""
        n = self._add(ctx, "process", data)
        if self.fail_process.get(ctx.sharding_item) == n:
            raise ValueError(f"bad batch {n} of item {ctx.sharding_item}")
        return self.hold.get(ctx.sharding_item) == n, self.pace

    def held(self, ctx: ShardingContext, cancelled: Any) -> None:
        with self._cond:
            self.calls.append(Call("hold", ctx.sharding_item, ctx.execution_id, time.monotonic(),
                                   cancelled=cancelled, reason=ctx.cancel_reason))
            self._cond.notify_all()

    def _add(self, ctx: ShardingContext, kind: str, data: Any = None) -> int:
        with self._cond:
            if not any(c is ctx for c in self.contexts):
                self.contexts.append(ctx)
            self.calls.append(Call(kind, ctx.sharding_item, ctx.execution_id, time.monotonic(),
                                   data=data, cancelled=ctx.cancel_event.is_set()))
            self._cond.notify_all()
            return sum(1 for c in self.calls if c.kind == kind and c.item == ctx.sharding_item
                       and c.execution == ctx.execution_id)

    # -- the test's side --
    def of(self, kind: str, item: Optional[int] = None, after: float = 0.0) -> List[Call]:
        with self._cond:
            return [c for c in self.calls if c.kind == kind
                    and (item is None or c.item == item) and c.at > after]

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate()
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out after {timeout}s waiting for {what}: "
                                         f"{self.calls[-20:]}")
                self._cond.wait(min(remaining, 0.1))

    def execution(self) -> str:
        executions = {c.execution for c in self.calls}
        assert len(executions) == 1, f"expected one execution, saw {executions}"
        return executions.pop()


class SyncJob:
    def __init__(self, script: Script) -> None:
        self.script = script

    def fetch(self, ctx: ShardingContext) -> Optional[List[Any]]:
        return self.script.fetch(ctx)

    def process(self, ctx: ShardingContext, data: List[Any]) -> None:
        hold, pace = self.script.process(ctx, data)
        if hold:
            self.script.held(ctx, ctx.wait(HOLD))
        elif pace:
            ctx.wait(pace)


class AsyncJob:
    def __init__(self, script: Script) -> None:
        self.script = script

    async def fetch(self, ctx: ShardingContext) -> Optional[List[Any]]:
        await asyncio.sleep(0)
        return self.script.fetch(ctx)

    async def process(self, ctx: ShardingContext, data: List[Any]) -> None:
        hold, pace = self.script.process(ctx, data)
        if hold:
            try:
                cancelled: Any = await ctx.wait_async(HOLD)
            except asyncio.CancelledError:
                # The worker cancelled the task (the asyncio form of "cancelled"). Returned
                # instead of raised, so that the dataflow loop's own check has to stop the item.
                cancelled = "CancelledError"
            self.script.held(ctx, cancelled)
        elif pace:
            try:
                await ctx.wait_async(pace)
            except asyncio.CancelledError:
                pass  # as above: the loop must see the cancellation itself


# -- a worker of either kind, run in a thread ----------------------------------------------------


class Running:
    """A sync or asyncio worker with one dataflow job, run in a thread until :meth:`stop`.

    ``register(worker, job)`` registers the job (``worker.dataflow(...)(job)``). The asyncio
    worker is created inside the thread's own event loop, as grpc.aio requires.
    """

    def __init__(self, api: str, target: str, script: Script,
                 register: Callable[[Any, Any], Any], **options: Any) -> None:
        self.api = api
        self.target = target
        self.script = script
        self.register = register
        self.options = WorkerOptions(**{"connect_timeout": 5, **options})
        self.assignments: List[Tuple[float, Assignment]] = []
        self.error: Optional[BaseException] = None
        self.worker: Any = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _assigned(self, assignment: Assignment) -> None:
        self.assignments.append((time.monotonic(), assignment))

    def _main(self) -> None:
        try:
            if self.api == "sync":
                worker = Worker(self.target, options=self.options)
                worker.on_assignment(self._assigned)
                self.register(worker, SyncJob(self.script))
                self.worker = worker
                self._ready.set()
                worker.run(handle_signals=False)
            else:
                asyncio.run(self._amain())
        except BaseException as exc:  # handed to the test thread
            self.error = exc
        finally:
            self._ready.set()

    async def _amain(self) -> None:
        worker = shardcar.aio.Worker(self.target, options=self.options)
        worker.on_assignment(self._assigned)
        self.register(worker, AsyncJob(self.script))
        self.worker = worker
        self._loop = asyncio.get_running_loop()
        self._ready.set()
        try:
            await worker.run(handle_signals=False)
        finally:
            await worker.close()

    def start(self) -> "Running":
        self.thread.start()
        assert self._ready.wait(10), "the worker did not start"
        if self.error is not None:
            raise self.error
        return self

    def items(self) -> Set[int]:
        """The items of the latest assignment."""
        return set(self.assignments[-1][1].item_numbers) if self.assignments else set()

    def stop(self, force: bool = False, timeout: float = 30) -> None:
        """Stops the worker (a drain unless ``force``) and waits for run() to return."""
        worker = self.worker
        if worker is not None and self.thread.is_alive():
            if self.api == "sync":
                worker.stop(force=force)
            elif self._loop is not None:
                try:
                    self._loop.call_soon_threadsafe(lambda: worker.stop(force=force))
                except RuntimeError:  # the loop has already ended
                    pass
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "run() did not return after stop()"
        if self.api == "sync" and worker is not None:
            worker.close()

    def idle(self) -> bool:
        """No handler of the worker is running (asked of its protocol core)."""
        return self.worker is not None and all(r.core.running() == 0 for r in self.worker._jobs)

    def wait_stopped(self, timeout: float) -> None:
        """Waits for run() to return by itself (after a sidecar's Shutdown)."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "run() did not return by itself"


@pytest.fixture
def running():
    """Factory: ``running(api, target, script, register, **options)`` → a started
    :class:`Running`; every one is stopped (forced) when the test ends, also when it failed."""
    started: List[Running] = []

    def start(*args: Any, **kwargs: Any) -> Running:
        r = Running(*args, **kwargs)
        started.append(r)
        return r.start()

    try:
        yield start
    finally:
        for r in started:
            if r.thread.is_alive():
                r.stop(force=True)


# -- the sidecar's side --------------------------------------------------------------------------


def admin(sidecar, method: str, request: Any) -> Any:
    with grpc.insecure_channel(sidecar.target) as channel:
        return getattr(pb_grpc.AdminServiceStub(channel), method)(request, timeout=10)


def trigger_once(sidecar, job: str, worker: Running, items: Set[int]) -> None:
    """Triggers the one-off job once, after the worker holds ``items``."""
    wait_until(lambda: worker.items() == items, 20, what=f"the worker to be assigned {items}")
    reply = admin(sidecar, "TriggerJob", pb.TriggerJobRequest(job_name=job))
    assert len(reply.instance_ids) == 1, reply


def recorded(sidecar, job: str, execution: str, timeout: float = 20) -> pb.ExecutionInfo:
    """The sidecar's record of the finished execution."""

    def find() -> Optional[pb.ExecutionInfo]:
        reply = admin(sidecar, "ListExecutions", pb.ListExecutionsRequest(job_name=job))
        return next((e for e in reply.executions if e.execution_id == execution), None)

    return wait_until(find, timeout, interval=0.1, what=f"execution {execution} to be recorded")


def results(record: pb.ExecutionInfo) -> Dict[int, Tuple[int, str]]:
    return {r.item: (r.outcome, r.error) for r in record.item_results}


def one_off(name: str, count: int = 1, **kwargs: Any) -> JobConfig:
    return JobConfig(job_name=name, cron="", sharding_total_count=count, **kwargs)


def dataflow(config: Any, **kwargs: Any) -> Callable[[Any, Any], Any]:
    return lambda worker, job: worker.dataflow(config, **kwargs)(job)


# -- one-off -------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_one_off_fetches_once_and_processes_what_it_got(sidecar, running, api):
    """Without ``streaming.process``: each item fetches once; an item with data processes it
    once (although its feed never runs dry) and one without data processes nothing; both are
    answered Complete."""
    job = f"oneoff-{api}"
    script = Script({0: [[1, 2, 3]], 1: [[]]}, tail=ENDLESS)  # item 1: an empty list at once
    worker = running(api, sidecar.target, script, dataflow(one_off(job, 2)))
    trigger_once(sidecar, job, worker, {0, 1})
    record = recorded(sidecar, job, script.wait(lambda: script.calls, 20, "a fetch")[0].execution)

    assert record.outcome == pb.EXECUTION_OUTCOME_COMPLETED, record
    assert results(record) == {0: (pb.EXECUTION_OUTCOME_COMPLETED, ""),
                               1: (pb.EXECUTION_OUTCOME_COMPLETED, "")}
    assert len(script.of("fetch", 0)) == 1 and len(script.of("fetch", 1)) == 1
    assert [c.data for c in script.of("process", 0)] == [[1, 2, 3]]
    assert script.of("process", 1) == []
    detail = admin(sidecar, "GetJob", pb.GetJobRequest(job_name=job)).job
    assert STREAMING_PROCESS_KEY not in detail.config.props
    worker.stop()
    assert worker.error is None


# -- streaming -----------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_streaming_processes_batches_until_a_fetch_returns_nothing(sidecar, running, api):
    """``streaming=True`` writes ``streaming.process: "true"`` into the job's stored config;
    each item then fetches and processes until a fetch returns no data (an empty list or
    ``None``), and is answered Complete."""
    job = f"stream-{api}"
    script = Script({0: [[1], [2, 3], [4]], 1: []}, tail=None)
    worker = running(api, sidecar.target, script, dataflow(one_off(job, 2), streaming=True))
    trigger_once(sidecar, job, worker, {0, 1})
    detail = admin(sidecar, "GetJob", pb.GetJobRequest(job_name=job)).job
    assert detail.config.props[STREAMING_PROCESS_KEY] == "true"
    record = recorded(sidecar, job, script.wait(lambda: script.calls, 20, "a fetch")[0].execution)

    assert record.outcome == pb.EXECUTION_OUTCOME_COMPLETED, record
    assert [c.data for c in script.of("process", 0)] == [[1], [2, 3], [4]]
    assert len(script.of("fetch", 0)) == 4  # three batches, then the fetch that found nothing
    assert len(script.of("fetch", 1)) == 1 and script.of("process", 1) == []
    worker.stop()
    assert worker.error is None


@pytest.mark.parametrize("api", APIS)
def test_streaming_reports_failure_when_process_or_fetch_raises(sidecar, running, api):
    """A raise ends the loop at once (no further fetch) and the item is answered ReportFailure
    with the exception: process() raising on the second batch of item 0, fetch() raising on
    the first call of item 1."""
    job = f"stream-fail-{api}"
    script = Script({}, tail=ENDLESS, fail_process={0: 2}, fail_fetch={1: 1})
    worker = running(api, sidecar.target, script, dataflow(one_off(job, 2), streaming=True))
    trigger_once(sidecar, job, worker, {0, 1})
    record = recorded(sidecar, job, script.wait(lambda: script.calls, 20, "a fetch")[0].execution)

    assert record.outcome == pb.EXECUTION_OUTCOME_FAILED, record
    outcome = results(record)
    assert outcome[0][0] == pb.EXECUTION_OUTCOME_FAILED
    assert "ValueError: bad batch 2 of item 0" in outcome[0][1]
    assert outcome[1][0] == pb.EXECUTION_OUTCOME_FAILED
    assert "RuntimeError: source of item 1 is down" in outcome[1][1]
    assert len(script.of("fetch", 0)) == 2 and len(script.of("process", 0)) == 2
    assert len(script.of("fetch", 1)) == 1 and script.of("process", 1) == []
    worker.stop()
    assert worker.error is None


@pytest.mark.parametrize("api", APIS)
def test_streaming_follows_the_prop_of_the_stored_config(sidecar, running, api, caplog):
    """A job stored with ``streaming.process: "TRUE"`` (created here through the Admin API, as
    the console would) streams for a worker that joins it by name, and for one whose
    ``streaming=False`` is not written (no overwrite): the stored config decides, as in
    ElasticJob, and the difference is logged."""
    caplog.set_level(logging.WARNING, logger="shardcar")
    job = f"stored-{api}"
    config = one_off(job, 1, props={STREAMING_PROCESS_KEY: "TRUE"})
    assert admin(sidecar, "PutJob", pb.PutJobRequest(config=config.to_proto())).created
    script = Script({0: [[1], [2]]}, tail=[])
    register = dataflow(job) if api == "sync" else dataflow(one_off(job, 1), streaming=False)
    worker = running(api, sidecar.target, script, register)
    trigger_once(sidecar, job, worker, {0})
    record = recorded(sidecar, job, script.wait(lambda: script.calls, 20, "a fetch")[0].execution)

    assert record.outcome == pb.EXECUTION_OUTCOME_COMPLETED, record
    assert [c.data for c in script.of("process", 0)] == [[1], [2]]
    assert len(script.of("fetch", 0)) == 3
    detail = admin(sidecar, "GetJob", pb.GetJobRequest(job_name=job)).job
    assert detail.config.props[STREAMING_PROCESS_KEY] == "TRUE"  # not overwritten
    if api == "asyncio":
        assert any("stored one is followed" in r.getMessage() for r in caplog.records)
    worker.stop()
    assert worker.error is None


# -- streaming: what stops the loop --------------------------------------------------------------


def _held(script: Script, item: int) -> Call:
    """Waits for the held process() of ``item`` to end, cancelled."""
    held = script.wait(lambda: script.of("hold", item), 30, "the held batch to be cancelled")[0]
    assert held.cancelled in (True, "CancelledError"), held
    return held


def _no_fetch_after(worker: Running, script: Script, item: int, hold_at: int) -> None:
    """Once the handler has returned: the loop fetched no more after the held batch (as many
    fetches as processes), and no fetch ever saw the item cancelled."""
    wait_until(worker.idle, 20, what="the item's handler to return")
    assert len(script.of("process", item)) == hold_at
    assert len(script.of("fetch", item)) == hold_at, "the loop fetched again after a cancel"
    assert all(c.cancelled is False for c in script.of("fetch"))


@pytest.mark.parametrize("api", APIS)
def test_streaming_stops_on_revoke(sidecar, running, api):
    """A remote shutdown of the instance (``AdminService.ShutdownInstance``) revokes the
    running item: the held third batch sees it cancelled, the loop fetches no more, and the
    item is declined (the sidecar records it revoked), never answered."""
    job = f"revoke-{api}"
    script = Script({}, tail=ENDLESS, hold={0: 3})
    worker = running(api, sidecar.target, script, dataflow(one_off(job), streaming=True))
    trigger_once(sidecar, job, worker, {0})
    script.wait(lambda: len(script.of("process", 0)) == 3, 20, "the third batch")
    instance = script.contexts[0].instance_id
    reply = admin(sidecar, "ShutdownInstance",
                  pb.ShutdownInstanceRequest(job_name=job, instance_id=instance))
    assert list(reply.job_names) == [job]

    held = _held(script, 0)
    assert "remote shutdown" in held.reason, held
    _no_fetch_after(worker, script, 0, 3)
    worker.wait_stopped(20)  # a remote shutdown stops the worker
    assert worker.error is None
    record = recorded(sidecar, job, script.execution())
    assert record.outcome == pb.EXECUTION_OUTCOME_REVOKED, record


@pytest.mark.parametrize("api", APIS)
def test_streaming_stops_on_lease_loss(make_sidecar, running, api):
    """The sidecar frozen (SIGSTOP) while the second batch is processed: the lease runs out,
    the batch sees the item cancelled, the loop fetches no more; once the sidecar runs again
    the item is declined (recorded revoked)."""
    sidecar = make_sidecar(session_timeout="4s")  # lease: 2 s
    job = f"lease-{api}"
    script = Script({}, tail=ENDLESS, hold={0: 2})
    worker = running(api, sidecar.target, script, dataflow(one_off(job), streaming=True))
    trigger_once(sidecar, job, worker, {0})
    script.wait(lambda: len(script.of("process", 0)) == 2, 20, "the second batch")
    sidecar.pause()
    try:
        held = _held(script, 0)
        assert "lease expired" in held.reason, held
        _no_fetch_after(worker, script, 0, 2)
    finally:
        sidecar.resume()
    record = recorded(sidecar, job, script.execution())
    assert record.outcome == pb.EXECUTION_OUTCOME_REVOKED, record
    assert "lease" in record.error, record
    worker.stop()
    assert worker.error is None


@pytest.mark.parametrize("api", APIS)
def test_streaming_stops_when_the_execution_is_superseded(sidecar, running, api):
    """The sidecar takes an execution back once its ``execution_timeout_seconds`` has passed
    (its items are handed to the next run): the held second batch sees the item cancelled
    with that reason, and the loop fetches no more."""
    job = f"timeout-{api}"
    script = Script({}, tail=ENDLESS, hold={0: 2})
    worker = running(api, sidecar.target, script,
                     dataflow(one_off(job, execution_timeout_seconds=1), streaming=True))
    trigger_once(sidecar, job, worker, {0})
    held = _held(script, 0)
    assert "execution timeout" in held.reason, held
    _no_fetch_after(worker, script, 0, 2)
    record = recorded(sidecar, job, script.execution())
    assert "execution timeout" in record.error, record
    worker.stop()
    assert worker.error is None


@pytest.mark.parametrize("api", APIS)
def test_streaming_stops_when_a_new_stream_replaces_the_old_one(make_sidecar, running, api):
    """The sidecar restarts while the second batch is processed: the stream that delivered the
    trigger ends, its executions are void (the worker subscribes again and the new stream's
    work supersedes them); the batch sees the item cancelled and the loop fetches no more."""
    sidecar = make_sidecar()
    job = f"restart-{api}"
    script = Script({}, tail=ENDLESS, hold={0: 2})
    worker = running(api, sidecar.target, script, dataflow(one_off(job), streaming=True),
                     reconnect_backoff=(0.1, 0.5), instance_suffix=InstanceSuffix.ALWAYS)
    trigger_once(sidecar, job, worker, {0})
    script.wait(lambda: len(script.of("process", 0)) == 2, 20, "the second batch")
    sidecar.restart()
    held = _held(script, 0)
    assert "stream to the sidecar ended" in held.reason, held
    _no_fetch_after(worker, script, 0, 2)
    # The worker subscribes again (the restarted sidecar, in memory, gets the job anew) and
    # is assigned the item on the new stream; the old execution stays void (no fetch for it).
    wait_until(lambda: worker.items() == {0} and worker.assignments[-1][0] > held.at, 20,
               what="an assignment on the new stream")
    assert len(script.of("fetch", 0)) == 2
    worker.stop()
    assert worker.error is None


@pytest.mark.parametrize("how", ["second-worker", "disable-job"])
@pytest.mark.parametrize("api", APIS)
def test_streaming_stops_fetching_an_item_a_resharding_took_away(sidecar, running, api, how):
    """ElasticJob's streaming loop ends when a resharding is due; shardcar reshards at once, so
    the loop ends before the next fetch once an Assignment no longer holds the item: a second
    worker joining takes one of two items, or ``DisableJob`` takes both. The loop of an item
    taken away ends (Complete: it stopped by itself, its batches were processed); an item kept
    goes on fetching until the worker drains, and is then answered Complete too."""
    job = f"handover-{api}-{how}"
    script = Script({}, tail=ENDLESS, pace=0.02)
    worker = running(api, sidecar.target, script, dataflow(one_off(job, 2), streaming=True),
                     instance_id="127.0.0.1@-@first")
    trigger_once(sidecar, job, worker, {0, 1})
    script.wait(lambda: all(len(script.of("fetch", i)) >= 2 for i in (0, 1)), 20,
                "both items to stream")
    other: Optional[Worker] = None
    other_thread: Optional[threading.Thread] = None
    before = len(worker.assignments)
    try:
        if how == "second-worker":
            other = Worker(sidecar.target, options=WorkerOptions(
                connect_timeout=5, instance_id="127.0.0.1@-@second"))
            other.job(job)(lambda ctx: None)
            other_thread = threading.Thread(target=other.run, kwargs={"handle_signals": False},
                                            daemon=True)
            other_thread.start()
        else:
            admin(sidecar, "DisableJob", pb.DisableJobRequest(job_name=job))
        wait_until(lambda: len(worker.items()) == (1 if how == "second-worker" else 0), 20,
                   what="the resharding to reach the worker")
        kept = worker.items()
        lost = {0, 1} - kept
        # When the first Assignment without the lost items arrived.
        moved_at = next(t for t, a in worker.assignments[before:] if not lost & set(a.item_numbers))
        if kept:
            (k,) = kept
            script.wait(lambda: len(script.of("fetch", k, after=moved_at)) >= 5, 20,
                        "the kept item to go on streaming")
        for item in lost:
            # The iteration under way when the Assignment came may finish; no further fetch.
            assert len(script.of("fetch", item, after=moved_at)) <= 1, script.of("fetch", item)
        worker.stop()  # a drain: the kept item's loop ends before its next fetch
        assert worker.error is None
        record = recorded(sidecar, job, script.execution())
        assert record.outcome == pb.EXECUTION_OUTCOME_COMPLETED, record
        assert {i: o for i, (o, _) in results(record).items()} == {
            0: pb.EXECUTION_OUTCOME_COMPLETED, 1: pb.EXECUTION_OUTCOME_COMPLETED}
        assert all(not c.cancelled for c in script.calls)
    finally:
        if other is not None:
            other.close()
        if other_thread is not None:
            other_thread.join(10)


@pytest.mark.parametrize("api", APIS)
def test_streaming_ends_and_is_answered_after_a_sidecar_shutdown(make_sidecar, running, workdir,
                                                                 api):
    """SIGTERM to the sidecar while an item streams: ``Shutdown`` (no revoke) ends the loop
    before its next fetch, the item is answered Complete (the sidecar waits for the answer and
    records it), and the worker, with ``stop_on_drain``, stops by itself (without it, it would
    subscribe again: ``test_faults.py``)."""
    history = workdir / f"history-{api}.jsonl"
    sidecar = make_sidecar(args=["--shutdown-grace", "60s", "--history-file", str(history)])
    job = f"shutdown-{api}"
    script = Script({}, tail=ENDLESS, pace=0.02)
    worker = running(api, sidecar.target, script, dataflow(one_off(job), streaming=True),
                     stop_on_drain=True)
    trigger_once(sidecar, job, worker, {0})
    script.wait(lambda: len(script.of("fetch", 0)) >= 3, 20, "the item to stream")
    sidecar.terminate()
    worker.wait_stopped(30)
    assert worker.error is None
    assert sidecar.proc is not None and sidecar.proc.wait(60) == 0
    execution = script.execution()
    records = [json.loads(line) for line in history.read_text().splitlines() if line.strip()]
    mine = [r for r in records if execution in json.dumps(r)]
    assert mine and "completed" in json.dumps(mine[-1]).lower(), records
    assert all(not c.cancelled for c in script.calls)


# -- without a sidecar ---------------------------------------------------------------------------


def test_streaming_argument_writes_the_prop() -> None:
    config = JobConfig(job_name="j", props={"other": "x"})
    on = with_streaming(config, True)
    assert isinstance(on, JobConfig)
    assert dict(on.props) == {"other": "x", STREAMING_PROCESS_KEY: "true"}
    off = with_streaming(on, False)
    assert isinstance(off, JobConfig) and off.props[STREAMING_PROCESS_KEY] == "false"
    assert with_streaming(config, None) is config
    assert with_streaming("by-name", None) == "by-name"
    with pytest.raises(ValueError, match="needs a JobConfig"):
        with_streaming("by-name", True)
    assert config.props == {"other": "x"}  # the caller's config is left alone


@pytest.mark.parametrize("value, expected", [
    ("true", True), ("True", True), ("TRUE", True), ("false", False), ("yes", False),
    ("1", False), ("", False), (None, False),
])
def test_the_prop_reads_as_java_parse_boolean(value, expected):
    props = {} if value is None else {STREAMING_PROCESS_KEY: value}
    assert is_streaming(props) is expected


def test_registration_checks_the_job() -> None:
    worker = Worker("127.0.0.1:1")
    made = []

    @worker.dataflow(JobConfig(job_name="a"))
    class Job:
        def __init__(self) -> None:
            made.append(self)

        def fetch(self, ctx: ShardingContext) -> List[int]:
            return []

        def process(self, ctx: ShardingContext, data: List[int]) -> None:
            pass

    assert len(made) == 1 and isinstance(Job, type)  # a class is made once; the decorator returns it

    class NoProcess:
        def fetch(self, ctx: ShardingContext) -> List[int]:
            return []

    class Async:
        async def fetch(self, ctx: ShardingContext) -> List[int]:
            return []

        async def process(self, ctx: ShardingContext, data: List[int]) -> None:
            pass

    with pytest.raises(TypeError, match="process"):
        worker.dataflow(JobConfig(job_name="b"))(NoProcess())  # type: ignore[type-var]
    with pytest.raises(TypeError, match="shardcar.aio.Worker"):
        worker.dataflow(JobConfig(job_name="c"))(Async())  # type: ignore[type-var]
    with pytest.raises(ValueError, match="already has a handler"):
        worker.dataflow(JobConfig(job_name="a"))(Job)
    worker.close()

    async def on_asyncio() -> None:
        aworker = shardcar.aio.Worker("127.0.0.1:1")
        with pytest.raises(TypeError, match="not async"):
            aworker.dataflow(JobConfig(job_name="d"))(Job)  # type: ignore[type-var]
        aworker.dataflow(JobConfig(job_name="e"))(Async())
        await aworker.close()

    asyncio.run(on_asyncio())
