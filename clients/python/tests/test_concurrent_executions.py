"""``SubscribeRequest.max_concurrent_executions``: what the workers ask for, and that they really
run that many executions at once.

* Without a sidecar: the value every ``SubscribeRequest`` carries (the executor size by default,
  the explicit override, the validation), and the protocol core's view of concurrent executions.
* Against a scripted in-process ``WorkerService`` (real gRPC, no sidecar): the request on the
  wire, and how each driver (sync, asyncio, dataflow) runs a second trigger that arrives while an
  execution runs: at once, each answered on its own; a revoke stops only the execution it names;
  a lapsed lease or a lost stream stops every execution.
* Against a real sidecar (``test_real_sidecar_*``): two workers of one failover job, each running a
  long item of its own; the other one is killed (SIGKILL) mid-item. With executor size 2 the busy
  worker under test receives the FAILOVER trigger for the dead worker's item while its own item
  still runs, runs both and answers both; with executor size 1 the FAILOVER run comes only after
  its own item finished.

Every wait polls for something observed, with a deadline; every process is killed at the end.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import re
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import grpc
import pytest

import shardcar.aio
from shardcar import JobConfig, ShardingContext, TriggerSource, Worker, WorkerOptions
from shardcar import _core
from shardcar._common import (
    MAX_CONCURRENT_EXECUTIONS,
    resolve_max_concurrent_executions,
    subscribe_request,
)
from shardcar._proto import shardcar_pb2 as pb
from shardcar._proto import shardcar_pb2_grpc as pb_grpc
from shardcar.events import Lease, Registered, Revoke, ShardItem, Trigger

from conftest import wait_until
from helpers import ChildWorker

APIS = ["sync", "asyncio"]
WAIT = 20.0  # the deadline of every wait in the scripted tests


def make_worker(api: str, target: str = "127.0.0.1:1", **options: Any) -> Any:
    cls = Worker if api == "sync" else shardcar.aio.Worker
    return cls(target, options=WorkerOptions(**options))


def request_of(worker: Any, job: str = "orders") -> pb.SubscribeRequest:
    """The ``SubscribeRequest`` the runner of ``job`` sends (the first and every reconnect)."""
    (runner,) = [r for r in worker._jobs if r.job_name == job]
    return worker._subscribe_request(runner.config, runner.overwrite,
                                     runner.max_concurrent_executions)


def register(worker: Any, api: str, job: Any = "orders", **kwargs: Any) -> None:
    if api == "sync":
        worker.job(job, **kwargs)(lambda ctx: None)
    else:
        async def handle(ctx: ShardingContext) -> None:
            return None
        worker.job(job, **kwargs)(handle)


# -- the value sent -----------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_the_subscription_asks_for_the_executor_size_by_default(api):
    worker = make_worker(api, item_concurrency=3)
    register(worker, api, JobConfig(job_name="orders", cron="* * * * * ?"))
    assert request_of(worker).max_concurrent_executions == 3
    default = make_worker(api)  # item_concurrency 8
    register(default, api)
    assert request_of(default).max_concurrent_executions == 8


@pytest.mark.parametrize("api", APIS)
def test_a_jobs_executor_size_and_override_win_over_the_workers(api):
    worker = make_worker(api, item_concurrency=4)
    register(worker, api, "wide", item_concurrency=6)
    register(worker, api, "elastic", max_concurrent_executions=1)
    register(worker, api, "both", item_concurrency=2, max_concurrent_executions=2)
    assert request_of(worker, "wide").max_concurrent_executions == 6
    assert request_of(worker, "elastic").max_concurrent_executions == 1
    assert request_of(worker, "both").max_concurrent_executions == 2
    capped = make_worker(api, item_concurrency=4, max_concurrent_executions=2)
    register(capped, api, "a")
    register(capped, api, "b", item_concurrency=3)
    register(capped, api, "c", max_concurrent_executions=4)
    assert request_of(capped, "a").max_concurrent_executions == 2
    assert request_of(capped, "b").max_concurrent_executions == 2
    assert request_of(capped, "c").max_concurrent_executions == 4


@pytest.mark.parametrize("api", APIS)
def test_a_dataflow_job_sends_it_too(api):
    worker = make_worker(api, item_concurrency=5)
    if api == "sync":
        class Job:
            def fetch(self, ctx):
                return []

            def process(self, ctx, data):
                pass
    else:
        class Job:  # type: ignore[no-redef]
            async def fetch(self, ctx):
                return []

            async def process(self, ctx, data):
                pass
    worker.dataflow("flow")(Job)
    worker.dataflow("one", max_concurrent_executions=1)(Job)
    assert request_of(worker, "flow").max_concurrent_executions == 5
    assert request_of(worker, "one").max_concurrent_executions == 1


def test_an_executor_larger_than_the_sidecars_limit_asks_for_the_limit():
    worker = Worker("127.0.0.1:1", options=WorkerOptions(item_concurrency=5000))
    register(worker, "sync")
    assert request_of(worker).max_concurrent_executions == MAX_CONCURRENT_EXECUTIONS == 1024
    assert resolve_max_concurrent_executions(None, 1) == 1
    assert resolve_max_concurrent_executions(1024, 5000) == 1024


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("bad", [0, -1, 1025, 2.0, "2", True])
def test_an_invalid_max_concurrent_executions_is_a_value_error(api, bad):
    with pytest.raises(ValueError, match="max_concurrent_executions"):
        make_worker(api, item_concurrency=2000, max_concurrent_executions=bad)
    worker = make_worker(api, item_concurrency=2000)
    with pytest.raises(ValueError, match="max_concurrent_executions"):
        register(worker, api, max_concurrent_executions=bad)
    with pytest.raises(ValueError, match="max_concurrent_executions"):
        worker._subscribe("orders", max_concurrent_executions=bad)
    assert worker._jobs == []


@pytest.mark.parametrize("api", APIS)
def test_more_executions_than_the_executor_size_is_a_value_error(api):
    with pytest.raises(ValueError, match=r"max_concurrent_executions=3 exceeds item_concurrency=2"):
        make_worker(api, item_concurrency=2, max_concurrent_executions=3)
    worker = make_worker(api, item_concurrency=4, max_concurrent_executions=3)
    with pytest.raises(ValueError, match=r"exceeds item_concurrency=2"):
        register(worker, api, item_concurrency=2)  # the worker's 3 does not fit the job's pool
    with pytest.raises(ValueError, match="item_concurrency must be at least 1"):
        register(worker, api, item_concurrency=-1)


def test_a_raw_subscription_leaves_the_field_unset_unless_given():
    unset = subscribe_request("orders", overwrite=False, instance_id="", labels={})
    assert unset.max_concurrent_executions == 0  # the sidecar reads 0 as 1
    assert subscribe_request("orders", overwrite=False, instance_id="", labels={},
                             max_concurrent_executions=7).max_concurrent_executions == 7
    worker = Worker("127.0.0.1:1")
    assert worker._subscribe_request("orders", False).max_concurrent_executions == 0


# -- the protocol core ----------------------------------------------------------------------------


class FakeClock(_core.Clock):
    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1_800_000_000.0 + self.t


def core_with_lease(limit: Optional[int]) -> Tuple[_core.ProtocolCore, FakeClock]:
    clock = FakeClock()
    core = _core.ProtocolCore("orders", clock, max_concurrent_executions=limit)
    core.stream_opened()
    core.on_event(Registered("10.0.0.1@-@7", None))
    core.on_event(Lease(valid_for=30, sequence=1, expires_at=0.0,
                        expires_at_wall=clock.wall() + 30))
    return core, clock


def trigger(execution_id: str, items, source=TriggerSource.FAILOVER) -> Trigger:
    return Trigger(execution_id=execution_id, task_id=f"orders@-@{execution_id}",
                   items=tuple(ShardItem(i, "") for i in items), job_parameter="",
                   sharding_total_count=4, source=source, fire_time=None,
                   fencing_tokens={i: 1 for i in items})


def starts(outputs) -> List[Tuple[str, int]]:
    return [(o.ctx.execution_id, o.ctx.sharding_item) for o in outputs
            if isinstance(o, _core.StartItem)]


def test_core_runs_concurrent_executions_and_counts_them(caplog):
    core, _ = core_with_lease(2)
    assert starts(core.on_event(trigger("e1", [0, 2], TriggerSource.CRON))) == [("e1", 0), ("e1", 2)]
    assert starts(core.on_event(trigger("e2", [1]))) == [("e2", 1)]
    assert core.running_executions() == ["e1", "e2"]
    out = core.handler_done("e1", 0, _core.Outcome.COMPLETE)
    assert [(o.call.rpc, o.call.execution_id, o.call.items) for o in out] == [
        (_core.Rpc.COMPLETE, "e1", (0,))]
    assert core.running_executions() == ["e1", "e2"]  # e1's item 2 still runs
    core.handler_done("e1", 2, _core.Outcome.COMPLETE)
    assert core.running_executions() == ["e2"]
    # A revoked run no longer counts: the sidecar took that execution back.
    core.on_event(Revoke((1,), "execution timeout"))
    assert core.running_executions() == []
    assert not any("max_concurrent_executions" in r.getMessage() for r in caplog.records)


def test_core_logs_a_trigger_beyond_the_limit_and_still_runs_it(caplog):
    core, _ = core_with_lease(1)
    core.on_event(trigger("e1", [0], TriggerSource.CRON))
    with caplog.at_level(logging.WARNING, logger="shardcar"):
        assert starts(core.on_event(trigger("e2", [1]))) == [("e2", 1)]
    assert any(re.search(r"trigger e2 \(FAILOVER\) arrived while 1 execution\(s\) run \['e1'\], "
                         r"but the worker subscribed with max_concurrent_executions=1",
                         r.getMessage()) for r in caplog.records), caplog.text


def test_core_lease_lapse_cancels_the_items_of_every_execution():
    core, clock = core_with_lease(3)
    core.on_event(trigger("e1", [0], TriggerSource.CRON))
    core.on_event(trigger("e2", [1]))
    core.on_event(trigger("e3", [2], TriggerSource.MISFIRE))
    clock.t += 31
    cancelled = [(o.ctx.execution_id, o.ctx.sharding_item) for o in core.tick()
                 if isinstance(o, _core.CancelItem)]
    assert cancelled == [("e1", 0), ("e2", 1), ("e3", 2)]
    assert core.running_executions() == []


# -- a scripted WorkerService ---------------------------------------------------------------------


class ScriptedSidecar(pb_grpc.WorkerServiceServicer):
    """``Subscribe`` records the request, sends ``Registered`` and a lease of ``lease_seconds``,
    then what :meth:`send` queues, until :meth:`end_stream`. Answers are recorded."""

    def __init__(self, lease_seconds: float = 120) -> None:
        self.lease_seconds = lease_seconds
        self.requests: List[pb.SubscribeRequest] = []
        self.answers: List[Tuple[str, Any]] = []
        self.lock = threading.Lock()
        self.events: "queue.Queue[pb.SubscribeResponse]" = queue.Queue()
        self.streams = 0
        self._end = threading.Event()
        self.target = ""

    def send(self, **event: Any) -> None:
        self.events.put(pb.SubscribeResponse(**event))

    def trigger(self, execution_id: str, items=(0,),
                source: int = pb.TRIGGER_SOURCE_FAILOVER) -> None:
        self.send(trigger=pb.Trigger(
            execution_id=execution_id, task_id=f"orders@-@{execution_id}",
            items=[pb.ShardItem(item=i) for i in items], sharding_total_count=4,
            source=source, fencing_tokens={i: 1 for i in items}))

    def end_stream(self) -> None:
        self._end.set()

    def Subscribe(self, request, context):
        with self.lock:
            self.requests.append(request)
            self.streams += 1
            stream = self.streams
        self._end.clear()
        yield pb.SubscribeResponse(registered=pb.Registered(instance_id="10.0.0.1@-@42"))
        yield pb.SubscribeResponse(assignment=pb.Assignment(
            items=[pb.ShardItem(item=0)], epoch=1))
        lease = pb.Lease(sequence=stream)
        lease.valid_for.FromNanoseconds(int(self.lease_seconds * 1e9))
        lease.expires_at.FromNanoseconds(int((time.time() + self.lease_seconds) * 1e9))
        yield pb.SubscribeResponse(lease=lease)
        while context.is_active() and not self._end.is_set():
            try:
                yield self.events.get(timeout=0.02)
            except queue.Empty:
                pass

    def _record(self, rpc: str, request: Any) -> None:
        with self.lock:
            self.answers.append((rpc, request))

    def Complete(self, request, context):
        self._record("complete", request)
        return pb.CompleteResponse()

    def ReportFailure(self, request, context):
        self._record("report_failure", request)
        return pb.ReportFailureResponse()

    def Decline(self, request, context):
        self._record("decline", request)
        return pb.DeclineResponse()

    def answered(self, execution_id: str) -> List[Tuple[str, Tuple[int, ...]]]:
        """``(rpc, items)`` of every answer to ``execution_id``."""
        with self.lock:
            out = []
            for rpc, req in self.answers:
                if req.execution_id != execution_id:
                    continue
                items = (req.item,) if rpc == "report_failure" else tuple(req.items)
                out.append((rpc, items))
            return out


def serve(servicer: ScriptedSidecar):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_WorkerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    servicer.target = f"127.0.0.1:{port}"
    return server


@pytest.fixture
def scripted():
    servicer = ScriptedSidecar()
    server = serve(servicer)
    try:
        yield servicer
    finally:
        server.stop(0)


@pytest.fixture
def short_lease():
    servicer = ScriptedSidecar(lease_seconds=1.5)
    server = serve(servicer)
    try:
        yield servicer
    finally:
        server.stop(0)


class Gates:
    """What the handlers did, and a gate per (execution, item) that lets its handler return."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.started: List[Tuple[str, int]] = []
        self.finished: Dict[Tuple[str, int], str] = {}  # key -> "released" / "cancelled"
        self.open: Set[Tuple[str, int]] = set()
        self.sources: Dict[Tuple[str, int], str] = {}

    def start(self, ctx: ShardingContext) -> Tuple[str, int]:
        key = (ctx.execution_id, ctx.sharding_item)
        with self.cond:
            self.started.append(key)
            self.sources[key] = ctx.source.name
            self.cond.notify_all()
        return key

    def end(self, key: Tuple[str, int], how: str) -> None:
        with self.cond:
            self.finished[key] = how
            self.cond.notify_all()

    def release(self, execution_id: str, item: int) -> None:
        with self.cond:
            self.open.add((execution_id, item))

    def is_open(self, key: Tuple[str, int]) -> bool:
        with self.cond:
            return key in self.open

    def running(self) -> Set[Tuple[str, int]]:
        with self.cond:
            return set(self.started) - set(self.finished)

    def wait_started(self, *keys: Tuple[str, int]) -> None:
        wait_until(lambda: set(keys) <= set(self.started), WAIT, what=f"{keys} to start")

    def wait_finished(self, key: Tuple[str, int]) -> str:
        return wait_until(lambda: self.finished.get(key), WAIT, what=f"{key} to finish")


class Running:
    """A worker of either API, run in a thread, whose handler (or dataflow job) is gated by
    :class:`Gates`: it returns once its gate opens, or stops once cancelled."""

    def __init__(self, api: str, target: str, gates: Gates, job: Any = "orders",
                 dataflow: bool = False, **kwargs: Any) -> None:
        self.api = api
        self.gates = gates
        self.error: Optional[BaseException] = None
        self._job, self._dataflow, self._kwargs, self._target = job, dataflow, kwargs, target
        self.worker: Any = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    # -- handlers
    def _sync_handler(self, ctx: ShardingContext) -> None:
        key = self.gates.start(ctx)
        while not self.gates.is_open(key):
            if ctx.wait(0.01):
                self.gates.end(key, "cancelled")
                return
        self.gates.end(key, "released")

    async def _async_handler(self, ctx: ShardingContext) -> None:
        key = self.gates.start(ctx)
        try:
            while not self.gates.is_open(key):
                if await ctx.wait_async(0.01):
                    self.gates.end(key, "cancelled")
                    return
        except asyncio.CancelledError:
            self.gates.end(key, "cancelled")
            raise
        self.gates.end(key, "released")

    def _register(self) -> None:
        if not self._dataflow:
            handler = self._sync_handler if self.api == "sync" else self._async_handler
            self.worker.job(self._job)(handler)
            return
        gates = self.gates
        job = self._job
        if isinstance(job, str):  # streaming=True is written into a config
            job = JobConfig(job_name=job, sharding_total_count=4)
        if self.api == "sync":
            class Flow:  # a streaming loop: one batch per fetch until the gate opens
                def fetch(self, ctx):
                    key = (ctx.execution_id, ctx.sharding_item)
                    if key not in gates.sources:
                        gates.start(ctx)
                    if gates.is_open(key):
                        gates.end(key, "released")
                        return []
                    return [key]

                def process(self, ctx, data):
                    ctx.wait(0.01)
            self.worker.dataflow(job, streaming=True)(Flow())
        else:
            class AsyncFlow:
                async def fetch(self, ctx):
                    key = (ctx.execution_id, ctx.sharding_item)
                    if key not in gates.sources:
                        gates.start(ctx)
                    if gates.is_open(key):
                        gates.end(key, "released")
                        return []
                    return [key]

                async def process(self, ctx, data):
                    await ctx.wait_async(0.01)
            self.worker.dataflow(job, streaming=True)(AsyncFlow())

    # -- running
    def _options(self) -> WorkerOptions:
        return WorkerOptions(connect_timeout=10, **self._kwargs)

    def _main(self) -> None:
        try:
            if self.api == "sync":
                self.worker = Worker(self._target, options=self._options())
                self._register()
                self._ready.set()
                self.worker.run(handle_signals=False)
            else:
                asyncio.run(self._amain())
        except BaseException as exc:  # handed to the test thread
            self.error = exc
        finally:
            self._ready.set()

    async def _amain(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.worker = shardcar.aio.Worker(self._target, options=self._options())
        self._register()
        self._ready.set()
        try:
            await self.worker.run(handle_signals=False)
        finally:
            await self.worker.close()

    def __enter__(self) -> "Running":
        self._thread.start()
        assert self._ready.wait(WAIT)
        if self.error is not None:
            raise self.error
        return self

    def __exit__(self, *exc: object) -> None:
        if self.worker is not None:
            if self.api == "sync":
                self.worker.stop(force=True)
            elif self._loop is not None:
                try:
                    self._loop.call_soon_threadsafe(functools.partial(self.worker.stop, force=True))
                except RuntimeError:
                    pass  # the loop has ended
        self._thread.join(WAIT)
        assert not self._thread.is_alive(), "worker.run() did not return"
        if self.api == "sync" and self.worker is not None:
            self.worker.close()


@pytest.mark.parametrize("api", APIS)
def test_every_subscription_carries_the_value_on_the_wire(scripted, api):
    with Running(api, scripted.target, Gates(), item_concurrency=3):
        wait_until(lambda: scripted.requests, WAIT, what="a subscription")
        scripted.end_stream()  # the worker subscribes again, with the same request
        wait_until(lambda: len(scripted.requests) >= 2, WAIT, what="a second subscription")
    assert [r.max_concurrent_executions for r in scripted.requests[:2]] == [3, 3]
    assert scripted.requests[0].job_name == "orders"


@pytest.mark.parametrize("api", APIS)
def test_a_trigger_that_arrives_while_an_execution_runs_runs_beside_it(scripted, api):
    gates = Gates()
    with Running(api, scripted.target, gates, item_concurrency=2):
        wait_until(lambda: scripted.requests, WAIT, what="a subscription")
        assert scripted.requests[0].max_concurrent_executions == 2
        scripted.trigger("own", [0], source=pb.TRIGGER_SOURCE_MANUAL)
        gates.wait_started(("own", 0))
        scripted.trigger("fo", [1])  # a FAILOVER run while "own" runs
        gates.wait_started(("fo", 1))
        assert gates.running() == {("own", 0), ("fo", 1)}, "both executions run at once"
        assert gates.sources[("fo", 1)] == "FAILOVER"
        gates.release("fo", 1)
        wait_until(lambda: scripted.answered("fo"), WAIT, what="the FAILOVER run's answer")
        assert scripted.answered("fo") == [("complete", (1,))]
        assert scripted.answered("own") == [] and ("own", 0) in gates.running()
        gates.release("own", 0)
        wait_until(lambda: scripted.answered("own"), WAIT, what="the first run's answer")
    assert scripted.answered("own") == [("complete", (0,))]
    assert scripted.answered("fo") == [("complete", (1,))]


@pytest.mark.parametrize("api", APIS)
def test_concurrent_dataflow_executions_stream_and_are_answered_each_on_its_own(scripted, api):
    gates = Gates()
    with Running(api, scripted.target, gates, dataflow=True, item_concurrency=2):
        wait_until(lambda: scripted.requests, WAIT, what="a subscription")
        scripted.trigger("own", [0], source=pb.TRIGGER_SOURCE_CRON)
        gates.wait_started(("own", 0))
        scripted.trigger("fo", [1])
        gates.wait_started(("fo", 1))
        gates.release("fo", 1)  # its next fetch finds nothing: the loop ends by itself
        wait_until(lambda: scripted.answered("fo"), WAIT, what="the FAILOVER item's answer")
        assert scripted.answered("own") == [] and ("own", 0) in gates.running()
        gates.release("own", 0)
        wait_until(lambda: scripted.answered("own"), WAIT, what="the first item's answer")
    assert scripted.answered("fo") == [("complete", (1,))]
    assert scripted.answered("own") == [("complete", (0,))]


@pytest.mark.parametrize("api", APIS)
def test_a_revoke_stops_only_the_execution_it_names(scripted, api):
    gates = Gates()
    with Running(api, scripted.target, gates, item_concurrency=2):
        wait_until(lambda: scripted.requests, WAIT, what="a subscription")
        scripted.trigger("own", [0], source=pb.TRIGGER_SOURCE_CRON)
        scripted.trigger("fo", [1])
        gates.wait_started(("own", 0), ("fo", 1))
        scripted.send(revoke=pb.Revoke(items=[1], reason="execution timeout"))
        assert gates.wait_finished(("fo", 1)) == "cancelled"
        wait_until(lambda: scripted.answered("fo"), WAIT, what="the revoked run's decline")
        assert scripted.answered("fo") == [("decline", (1,))]
        assert ("own", 0) in gates.running()
        gates.release("own", 0)
        wait_until(lambda: scripted.answered("own"), WAIT, what="the other run's answer")
    assert scripted.answered("own") == [("complete", (0,))]


@pytest.mark.parametrize("api", APIS)
def test_a_lapsed_lease_stops_every_execution(short_lease, api):
    gates = Gates()
    with Running(api, short_lease.target, gates, item_concurrency=3):
        wait_until(lambda: short_lease.requests, WAIT, what="a subscription")
        short_lease.trigger("own", [0], source=pb.TRIGGER_SOURCE_CRON)
        short_lease.trigger("fo", [1])
        short_lease.trigger("mf", [2], source=pb.TRIGGER_SOURCE_MISFIRE)
        # No renewal comes: the 1.5 s lease runs out under every execution.
        for key in (("own", 0), ("fo", 1), ("mf", 2)):
            assert gates.wait_finished(key) == "cancelled", key
        for execution, item in (("own", 0), ("fo", 1), ("mf", 2)):
            wait_until(lambda: short_lease.answered(execution), WAIT,
                       what=f"{execution} to be declined")
            assert short_lease.answered(execution) == [("decline", (item,))]


@pytest.mark.parametrize("api", APIS)
def test_a_lost_stream_stops_every_execution_and_answers_none(scripted, api):
    gates = Gates()
    with Running(api, scripted.target, gates, item_concurrency=2):
        wait_until(lambda: scripted.requests, WAIT, what="a subscription")
        scripted.trigger("own", [0], source=pb.TRIGGER_SOURCE_CRON)
        scripted.trigger("fo", [1])
        gates.wait_started(("own", 0), ("fo", 1))
        scripted.end_stream()
        assert gates.wait_finished(("own", 0)) == "cancelled"
        assert gates.wait_finished(("fo", 1)) == "cancelled"
        wait_until(lambda: len(scripted.requests) >= 2, WAIT, what="the worker to subscribe again")
    assert scripted.answered("own") == [] and scripted.answered("fo") == []


@pytest.mark.parametrize("api", APIS)
def test_with_executor_size_one_a_second_execution_waits_for_the_slot(scripted, api, caplog):
    """``item_concurrency=1`` asks for one execution at a time. Were the sidecar to send a second
    one anyway, it is logged and runs once the first returns (it waits for the only slot)."""
    gates = Gates()
    with caplog.at_level(logging.WARNING, logger="shardcar"):
        with Running(api, scripted.target, gates, item_concurrency=1):
            wait_until(lambda: scripted.requests, WAIT, what="a subscription")
            assert scripted.requests[0].max_concurrent_executions == 1
            scripted.trigger("own", [0], source=pb.TRIGGER_SOURCE_CRON)
            gates.wait_started(("own", 0))
            scripted.trigger("fo", [1])
            wait_until(lambda: "max_concurrent_executions=1" in caplog.text, WAIT,
                       what="the warning about a trigger beyond the limit")
            assert gates.started == [("own", 0)], "the second execution took a slot it has not"
            gates.release("own", 0)
            gates.wait_started(("fo", 1))
            gates.release("fo", 1)
            wait_until(lambda: scripted.answered("fo"), WAIT, what="the second answer")
    assert scripted.answered("own") == [("complete", (0,))]
    assert scripted.answered("fo") == [("complete", (1,))]


# -- against a real sidecar -----------------------------------------------------------------------

NEVER = "0 0 0 1 1 ? 2099"


def admin(sidecar) -> Tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(sidecar.target)
    return channel, pb_grpc.AdminServiceStub(channel)


def item_info(sidecar, job: str) -> Dict[int, pb.ItemInfo]:
    channel, stub = admin(sidecar)
    with channel:
        return {i.item: i for i in stub.GetJob(pb.GetJobRequest(job_name=job), timeout=10).job.items}


def instances(sidecar, job: str) -> Dict[str, List[int]]:
    channel, stub = admin(sidecar)
    with channel:
        job_detail = stub.GetJob(pb.GetJobRequest(job_name=job), timeout=10).job
        return {i.instance_id: list(i.items) for i in job_detail.instances}


def finished_executions(sidecar, job: str) -> Dict[str, pb.ExecutionInfo]:
    channel, stub = admin(sidecar)
    with channel:
        reply = stub.ListExecutions(pb.ListExecutionsRequest(job_name=job), timeout=10)
    return {e.execution_id: e for e in reply.executions}


def is_log(pattern: str) -> Callable[[Dict[str, Any]], bool]:
    regex = re.compile(pattern)
    return lambda e: e.get("ev") == "log" and regex.search(e["msg"]) is not None


def accepted(execution: str, item: int) -> Callable[[Dict[str, Any]], bool]:
    return is_log(rf"complete of {re.escape(execution)} items \[{item}\] accepted")


def child_args(sidecar, job: str, api: str, release: Path, item_concurrency: int) -> List[str]:
    args = ["--target", sidecar.target, "--job", job, "--cron", NEVER, "--first", "release",
            "--release-file", str(release), "--items", "2", "--failover",
            "--item-concurrency", str(item_concurrency)]
    if api == "asyncio":
        args.append("--asyncio")
    return args


def two_busy_workers(sidecar, spawn_child, tmp_path: Path, job: str, api: str,
                     item_concurrency: int):
    """The worker under test (``api``, executor size ``item_concurrency``) and a peer (sync,
    executor size 2), one item each of a two-item failover job, both running a long item of
    their own (one ``TriggerJob``), each until its release file exists. Returns
    ``(worker, peer, worker_start, peer_start, release_worker)``."""
    release_worker = tmp_path / "release-worker"
    release_peer = tmp_path / "release-peer"  # never created: the peer is killed mid-item
    worker = spawn_child(child_args(sidecar, job, api, release_worker, item_concurrency))
    worker.wait_for(is_log(r"registered as"), 30, "the worker to register")
    peer = spawn_child(child_args(sidecar, job, "sync", release_peer, 2))
    peer.wait_for(is_log(r"registered as"), 30, "the peer to register")
    wait_until(lambda: sorted(len(v) for v in instances(sidecar, job).values()) == [1, 1], 30,
               what="one item for each of the two instances")
    channel, stub = admin(sidecar)
    with channel:
        asked = stub.TriggerJob(pb.TriggerJobRequest(job_name=job), timeout=10).instance_ids
    assert len(asked) == 2, f"TriggerJob asked {list(asked)}"
    _, worker_start = worker.wait_for(lambda e: e["ev"] == "start", 30, "the worker's own item")
    _, peer_start = peer.wait_for(lambda e: e["ev"] == "start", 30, "the peer's own item")
    assert worker_start["item"] != peer_start["item"]
    return worker, peer, worker_start, peer_start, release_worker


def holds(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    """``predicate`` is true at every poll for ``seconds``: a bounded observation window for a
    negative property (something does not happen), never a wait for something to happen."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert predicate(), f"{what} stopped holding"
        time.sleep(0.05)


def no_item_twice(*children: ChildWorker) -> None:
    """No (execution, item) started twice, and no item started by two workers at once is what
    the sidecar promises; here: every start is a distinct (execution, item)."""
    seen = [(e["exec"], e["item"]) for c in children for e in c.snapshot() if e["ev"] == "start"]
    assert len(seen) == len(set(seen)), f"an item was delivered twice: {seen}"


@pytest.mark.parametrize("api", APIS)
def test_real_sidecar_busy_worker_runs_the_failover_beside_its_own_item(
        make_sidecar, spawn_child, tmp_path, api):
    """Executor size 2: the peer is SIGKILLed mid-item; the worker under test, busy with its own
    item, receives the FAILOVER trigger for the peer's item while its own item still runs, runs
    it (it returns at once) and answers it, then its own item is released and answered too."""
    sidecar = make_sidecar()
    job = f"fo-busy-{api}"
    worker, peer, own, peer_item, release = two_busy_workers(
        sidecar, spawn_child, tmp_path, job, api, item_concurrency=2)
    mark = len(worker.snapshot())
    peer.kill()
    index, failover = worker.wait_for(lambda e: e["ev"] == "start" and e["exec"] != own["exec"],
                                      40, "the FAILOVER trigger while the own item runs",
                                      start=mark)
    assert failover["source"] == "FAILOVER", failover
    assert failover["item"] == peer_item["item"], (failover, peer_item)
    worker.wait_for(accepted(failover["exec"], failover["item"]), 20,
                    "the FAILOVER run's answer to be accepted", start=index)
    # All of that happened while the worker's own item was still running.
    assert not any(e["ev"] == "released" for e in worker.snapshot()), worker.output()
    assert not any(accepted(own["exec"], own["item"])(e) for e in worker.snapshot())
    release.touch()
    _, done = worker.wait_for(lambda e: e["ev"] == "released" and e["exec"] == own["exec"], 20,
                              "the own item to finish")
    assert done["cancelled"] is False
    worker.wait_for(accepted(own["exec"], own["item"]), 20, "the own item's answer")
    no_item_twice(worker, peer)
    records = wait_until(
        lambda: (lambda r: r if {own["exec"], failover["exec"]} <= set(r) else None)(
            finished_executions(sidecar, job)),
        20, what="both executions in the sidecar's history")
    for execution in (own["exec"], failover["exec"]):
        assert records[execution].outcome == pb.EXECUTION_OUTCOME_COMPLETED, records[execution]
    assert records[failover["exec"]].source == pb.TRIGGER_SOURCE_FAILOVER
    assert records[own["exec"]].instance_id == records[failover["exec"]].instance_id


@pytest.mark.parametrize("api", APIS)
def test_real_sidecar_executor_size_one_takes_the_failover_only_after_its_own_item(
        make_sidecar, spawn_child, tmp_path, api):
    """Executor size 1 (ElasticJob's one execution at a time): the peer's item waits, flagged
    for failover, while the worker runs its own item; it comes as FAILOVER only after the own
    item finished and was answered."""
    sidecar = make_sidecar()
    job = f"fo-single-{api}"
    worker, peer, own, peer_item, release = two_busy_workers(
        sidecar, spawn_child, tmp_path, job, api, item_concurrency=1)
    peer.kill()
    # The sidecar knows the item must fail over (flagged, or already taken: it would then be
    # running on the busy worker, which the checks below refute) while the worker is busy.
    wait_until(lambda: item_info(sidecar, job)[peer_item["item"]].failover_pending, 30,
               what=f"item {peer_item['item']} to be flagged for failover")
    # It stays waiting as long as the worker is busy (a worker free for it takes it at once).
    holds(lambda: item_info(sidecar, job)[peer_item["item"]].failover_pending
          and [e for e in worker.snapshot() if e["ev"] == "start"] == [own], 1.0,
          "the failover item waiting, with no second execution on the busy worker")
    release.touch()
    # "released" is printed before the handler returns, so before its Complete is sent.
    own_done, _ = worker.wait_for(lambda e: e["ev"] == "released" and e["exec"] == own["exec"],
                                  20, "the own item to finish")
    index, failover = worker.wait_for(lambda e: e["ev"] == "start" and e["exec"] != own["exec"],
                                      40, "the FAILOVER trigger once idle")
    assert index > own_done, "the FAILOVER run started before the own item finished"
    worker.wait_for(accepted(own["exec"], own["item"]), 20, "the own item's answer")
    assert failover["source"] == "FAILOVER" and failover["item"] == peer_item["item"], failover
    worker.wait_for(accepted(failover["exec"], failover["item"]), 20, "the FAILOVER answer")
    no_item_twice(worker, peer)
