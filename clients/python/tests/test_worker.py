"""The sync and asyncio workers against a real standalone sidecar process.

Triggers reach the handler with ElasticJob's sharding context; failures are reported and run
again at the next fire; items of a trigger run concurrently up to ``item_concurrency``; the
job runner's stream and answers, and how refused answers map to errors; a bad cron is refused
naming ``config.cron`` with reason ``INVALID_ARGUMENT``; two workers of one process with
instance suffixes share a job; a remote ``ShutdownInstance`` stops the job for good (sync,
asyncio, the stream itself); Unix socket and ``$SHARDCAR_TARGET`` targets; a worker made with
the option keywords of 0.1 still runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import time

import grpc
import pytest

import shardcar
import shardcar.aio
from shardcar import (
    Assignment,
    InstanceSuffix,
    JobConfig,
    ShardingContext,
    ShardingStrategy,
    TriggerSource,
    Worker,
    WorkerOptions,
)
from shardcar._proto import shardcar_pb2 as pb
from shardcar._proto import shardcar_pb2_grpc as pb_grpc
from shardcar.errors import from_rpc_error

from conftest import wait_until
from helpers import Calls, WorkerThread

EVERY_SECOND = "* * * * * ?"


def orders(**kwargs) -> JobConfig:
    base = dict(job_name="orders", cron=EVERY_SECOND, sharding_total_count=2,
                sharding_item_parameters={0: "north", 1: "south"}, job_parameter="batch=5")
    base.update(kwargs)
    return JobConfig(**base)


def test_triggers_reach_handler_with_sharding_context(sidecar):
    worker = Worker(sidecar.target, options=WorkerOptions(connect_timeout=5))
    calls = Calls()
    assignments = []
    worker.on_assignment(assignments.append)

    @worker.job(orders())
    def handle(ctx: ShardingContext) -> None:
        calls.add(ctx)

    with WorkerThread(worker) as wt:
        wait_until(lambda: calls.items() == {0, 1}, 15, what="both items triggered")
        # Answered items are triggered again by later fires (unanswered ones would stay running).
        wait_until(lambda: len(calls.executions()) >= 2, 15, what="a second execution")
    assert wt.error is None
    ctx = calls.snapshot()[0]
    assert ctx.job_name == "orders"
    assert ctx.sharding_total_count == 2 and ctx.job_parameter == "batch=5"
    assert {c.sharding_item: c.sharding_parameter for c in calls.snapshot()} == {0: "north", 1: "south"}
    assert ctx.source is TriggerSource.CRON
    assert ctx.execution_id and "orders" in ctx.task_id
    assert isinstance(ctx.fencing_token, int) and ctx.fencing_token > 0
    assert ctx.instance_id and not ctx.cancelled
    assert assignments and isinstance(assignments[0], Assignment)
    assert set(assignments[-1].item_numbers) == {0, 1} and assignments[-1].leader


def test_a_worker_made_with_the_keywords_of_0_1_still_runs(sidecar):
    """The option keywords of 0.1, before ``WorkerOptions`` (``connect_timeout=``,
    ``max_concurrency=``, ``drain_timeout=``, ``exit_on_shutdown=``, ...), still make a worker
    that runs its jobs, each with a ``DeprecationWarning``."""
    with pytest.deprecated_call():
        worker = Worker(sidecar.target, connect_timeout=5, max_concurrency=2, drain_timeout=5,
                        exit_on_shutdown=False, unique_instance=False, backoff_max=1.0)
    calls = Calls()
    with pytest.deprecated_call():
        @worker.job(orders(job_name="old-names"), max_concurrency=2)
        def handle(ctx: ShardingContext) -> None:
            calls.add(ctx)

    with WorkerThread(worker) as wt:
        wait_until(lambda: calls.items() == {0, 1}, 15, what="both items triggered")
    assert wt.error is None
    assert worker.options.item_concurrency == 2 and worker.options.drain_timeout == 5


def test_failure_is_reported_and_the_item_runs_again(sidecar, caplog):
    caplog.set_level(logging.INFO, logger="shardcar")
    worker = Worker(sidecar.target, options=WorkerOptions(connect_timeout=5))
    calls = Calls()

    @worker.job(orders(sharding_total_count=1, sharding_item_parameters={}))
    def handle(ctx: ShardingContext) -> None:
        calls.add(ctx)
        raise ValueError(f"order book for item {ctx.sharding_item} is locked")

    with WorkerThread(worker) as wt:
        wait_until(lambda: len(calls.executions()) >= 3, 15, what="three failed executions")
    assert wt.error is None
    rejected = [r for r in caplog.records if "answer rejected" in r.getMessage()
                or "not delivered" in r.getMessage()]
    assert rejected == []


def test_items_of_one_trigger_run_concurrently_up_to_the_limit(sidecar):
    worker = Worker(sidecar.target, options=WorkerOptions(connect_timeout=5))
    calls = Calls()
    active = [0, 0]  # current, peak

    import threading
    lock = threading.Lock()

    @worker.job(orders(job_name="wide", sharding_total_count=6, sharding_item_parameters={}),
                item_concurrency=3)
    def handle(ctx: ShardingContext) -> None:
        with lock:
            active[0] += 1
            active[1] = max(active[1], active[0])
        time.sleep(0.3)
        with lock:
            active[0] -= 1
        calls.add(ctx)

    with WorkerThread(worker):
        wait_until(lambda: len(calls.items()) == 6, 15, what="all six items")
    assert active[1] == 3


def test_low_level_stream_and_answers(sidecar):
    worker = Worker(sidecar.target)
    sub = worker._subscribe(orders(job_name="raw"))
    events = iter(sub)
    first = next(events)
    assert isinstance(first, shardcar.Registered)
    assert first.config is not None and first.config.job_name == "raw"
    assert first.config.sharding_total_count == 2
    trigger = None
    seen = [first]
    for event in events:
        seen.append(event)
        if isinstance(event, shardcar.Trigger):
            trigger = event
            break
    kinds = [type(e).__name__ for e in seen]
    assert kinds[:3] == ["Registered", "Assignment", "Lease"], kinds
    assert sub.lease_valid and sub.lease.valid_for > 0
    assert {i.item for i in trigger.items} == {0, 1}
    sub.complete(trigger.execution_id, [0])
    sub.complete(trigger.execution_id, [0])  # a repeated Complete is idempotent
    sub.report_failure(trigger.execution_id, 1, "RuntimeError: disk full")
    with pytest.raises(shardcar.ExecutionNotFoundError):
        sub.complete("no-such-execution", [0])
    sub.close()
    assert list(events) == []  # closing ends the iteration quietly
    worker.close()


def test_strategy_and_manual_source_round_trip_through_the_sidecar(sidecar):
    # The renamed contract end to end: a strategy given by its user-facing name goes out as
    # SHARDING_STRATEGY_ROUND_ROBIN and comes back as ROUND_ROBIN (Registered, AdminService's
    # JobDetail); a trigger-once arrives as TRIGGER_SOURCE_MANUAL and reads as MANUAL.
    worker = Worker(sidecar.target)
    sub = worker._subscribe(JobConfig(job_name="manual", sharding_total_count=2,
                                     sharding_strategy="ROUND_ROBIN"))  # type: ignore[arg-type]
    events = iter(sub)
    first = next(events)
    assert isinstance(first, shardcar.Registered) and first.config is not None
    assert first.config.sharding_strategy is ShardingStrategy.ROUND_ROBIN
    # The first Assignment may come before the leader has sharded (no items yet).
    next(e for e in events if isinstance(e, shardcar.Assignment) and set(e.item_numbers) == {0, 1})
    with grpc.insecure_channel(sidecar.target) as channel:
        admin = pb_grpc.AdminServiceStub(channel)
        detail = admin.GetJob(pb.GetJobRequest(job_name="manual"), timeout=10).job
        assert detail.config.job_name == "manual"
        assert detail.config.sharding_strategy == pb.SHARDING_STRATEGY_ROUND_ROBIN
        assert detail.state == pb.JOB_STATE_OK
        triggered = admin.TriggerJob(pb.TriggerJobRequest(job_name="manual"), timeout=10)
    assert list(triggered.instance_ids) == [first.instance_id]
    trigger = next(e for e in events if isinstance(e, shardcar.Trigger))
    assert trigger.source is TriggerSource.MANUAL
    sub.complete(trigger.execution_id, [i.item for i in trigger.items])
    sub.close()
    worker.close()


def test_answer_for_an_execution_of_a_closed_stream_is_rejected(sidecar):
    worker = Worker(sidecar.target)
    first = worker._subscribe(orders(job_name="handover", sharding_total_count=1,
                                    sharding_item_parameters={}), overwrite=True)
    trigger = next(e for e in first if isinstance(e, shardcar.Trigger))
    first.close()
    other = Worker(sidecar.target, options=WorkerOptions(instance_id="127.0.0.1@-@other"))
    second = other._subscribe("handover")
    next(e for e in second if isinstance(e, shardcar.Registered))
    with pytest.raises(shardcar.AnswerRejectedError) as info:
        second.complete(trigger.execution_id, [0])
    assert info.value.code is not None
    second.close()
    other.close()
    worker.close()


def test_invalid_config_names_the_field(sidecar):
    worker = Worker(sidecar.target, options=WorkerOptions(connect_timeout=5))

    @worker.job(orders(job_name="bad", sharding_total_count=0, sharding_item_parameters={}))
    def handle(ctx: ShardingContext) -> None:
        raise AssertionError("never triggered")

    with pytest.raises(shardcar.InvalidJobConfigError) as info:
        worker.run(handle_signals=False)
    assert info.value.field == "sharding_total_count"
    assert info.value.request_field == "config.sharding_total_count"
    assert info.value.reason == "INVALID_ARGUMENT"
    assert "sharding_total_count" in str(info.value)
    worker.close()


def test_bad_cron_names_the_field_from_the_rich_details(sidecar):
    # The sidecar's BadRequest names `config.cron`; the client exposes it as the JobConfig
    # field `cron`, with the ErrorInfo's reason. The message is not read.
    worker = Worker(sidecar.target)
    with pytest.raises(shardcar.InvalidJobConfigError) as info:
        list(worker._subscribe(orders(job_name="badcron", cron="every tuesday")))
    err = info.value
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.reason, err.field, err.request_field) == ("INVALID_ARGUMENT", "cron", "config.cron")
    assert str(err).startswith("invalid job config (field `cron`): ")
    worker.close()


def test_an_invalid_instance_suffix_is_named_by_the_sidecar(sidecar):
    # Not reachable through Worker (its suffix is always valid): the raw stub shows the
    # sidecar's refusal of the field, mapped like any other.
    with grpc.insecure_channel(sidecar.target) as channel:
        stub = pb_grpc.WorkerServiceStub(channel)
        request = pb.SubscribeRequest(job_name="suffixed", pid=os.getpid(),
                                      instance_suffix="no/slash",
                                      config=orders(job_name="suffixed").to_proto())
        with pytest.raises(grpc.RpcError) as raised:
            list(stub.Subscribe(request, timeout=10))
    err = from_rpc_error(raised.value, target=sidecar.target, during="subscribe")
    assert isinstance(err, shardcar.InvalidJobConfigError)
    assert (err.reason, err.field) == ("INVALID_ARGUMENT", "instance_suffix")


def test_subscribing_without_config_to_unknown_job_is_not_found(sidecar):
    worker = Worker(sidecar.target)
    with pytest.raises(shardcar.JobNotFoundError) as info:
        list(worker._subscribe("nobody-created-this"))
    assert info.value.reason == "NOT_FOUND" and info.value.field is None
    worker.close()


def test_two_unique_workers_of_one_process_share_a_job(sidecar):
    # Two workers with the same pid (as containers sharing one sidecar are all pid 1) get
    # distinct instance ids, `{ip}@-@{pid}-{random}`, and the items are split between them.
    calls = [Calls(), Calls()]
    threads = []
    for mine in calls:
        worker = Worker(sidecar.target, options=WorkerOptions(
            connect_timeout=5, instance_suffix=InstanceSuffix.ALWAYS))

        @worker.job(orders(job_name="shared"))
        def handle(ctx: ShardingContext, mine=mine) -> None:
            mine.add(ctx)

        threads.append(WorkerThread(worker))
    suffixes = [t.worker.instance_suffix for t in threads]
    assert suffixes[0] != suffixes[1]

    def latest_items(c: Calls) -> set:
        snapshot = c.snapshot()
        last = snapshot[-1].execution_id if snapshot else None
        return {x.sharding_item for x in snapshot if x.execution_id == last}

    def split() -> bool:
        a, b = latest_items(calls[0]), latest_items(calls[1])
        return bool(a) and bool(b) and not (a & b) and a | b == {0, 1}

    with threads[0], threads[1]:
        wait_until(split, 30, what="both workers to get an item of the job")
    for t, c, suffix in zip(threads, calls, suffixes):
        assert t.error is None
        ids = {x.instance_id for x in c.snapshot()}
        assert len(ids) == 1, ids
        (instance_id,) = ids
        ip, tail = instance_id.split("@-@")
        assert ip and tail == suffix and re.fullmatch(rf"{os.getpid()}-[0-9a-f]{{8}}", tail)


def test_without_unique_instance_the_id_is_ip_and_pid(sidecar):
    worker = Worker(sidecar.target, options=WorkerOptions(instance_suffix=InstanceSuffix.NEVER))
    sub = worker._subscribe(orders(job_name="plain"))
    registered = next(iter(sub))
    assert isinstance(registered, shardcar.Registered)
    assert registered.instance_id.endswith(f"@-@{os.getpid()}")
    sub.close()
    worker.close()


def _shutdown_instance(sidecar, job: str, instance_id: str) -> None:
    with grpc.insecure_channel(sidecar.target) as channel:
        reply = pb_grpc.AdminServiceStub(channel).ShutdownInstance(
            pb.ShutdownInstanceRequest(job_name=job, instance_id=instance_id), timeout=10)
    assert list(reply.job_names) == [job]


def test_a_remote_shutdown_stops_the_worker(sidecar, caplog):
    """AdminService.ShutdownInstance: the worker gets ``Shutdown`` of kind REMOTE and takes no
    new work; the sidecar takes the running item back (a remote shutdown revokes it: the
    handler sees cancelled, the item is declined, never answered) and ends the stream; the job
    stops for good (an operator's decision, unlike a drain) and ``run()`` returns by itself,
    without ``stop()``."""
    caplog.set_level(logging.INFO, logger="shardcar")
    worker = Worker(sidecar.target, options=WorkerOptions(connect_timeout=5))
    starts = []
    outcome = {}
    running = threading.Event()

    @worker.job(orders(job_name="remote-stop", sharding_total_count=1,
                       sharding_item_parameters={}))
    def handle(ctx: ShardingContext) -> None:
        starts.append(time.time())
        if running.is_set():
            return
        outcome["instance"] = ctx.instance_id
        running.set()
        outcome["cancelled"] = ctx.wait(30)
        outcome["reason"] = ctx.cancel_reason

    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False}, daemon=True)
    try:
        thread.start()
        assert running.wait(15), "no item started"
        _shutdown_instance(sidecar, "remote-stop", outcome["instance"])
        thread.join(20)
        assert not thread.is_alive(), "run() did not return after the sidecar's Shutdown"
    finally:
        worker.close()
    shutdown_at = [r.created for r in caplog.records
                   if "the sidecar sent Shutdown (remote," in r.getMessage()]
    assert len(shutdown_at) == 1, [r.getMessage() for r in caplog.records]
    assert any("Shutdown (remote); the worker stops" in r.getMessage() for r in caplog.records)
    assert outcome["cancelled"] is True and "remote shutdown" in outcome["reason"]
    assert not [t for t in starts if t > shutdown_at[0]], "an item started after Shutdown"


def test_a_raw_subscription_ends_after_shutdown(sidecar):
    worker = Worker(sidecar.target)
    sub = worker._subscribe(orders(job_name="raw-stop"))
    events = iter(sub)
    registered = next(events)
    assert isinstance(registered, shardcar.Registered)
    next(e for e in events if isinstance(e, shardcar.Lease))
    _shutdown_instance(sidecar, "raw-stop", registered.instance_id)
    rest = list(events)  # the loop ends by itself once the sidecar has ended the stream
    assert any(isinstance(e, shardcar.Shutdown) for e in rest), rest
    assert not any(isinstance(e, shardcar.Trigger) for e in rest[
        next(i for i, e in enumerate(rest) if isinstance(e, shardcar.Shutdown)):])
    sub.close()
    worker.close()


async def test_asyncio_worker_stops_after_a_remote_shutdown(sidecar):
    """The asyncio worker after ``ShutdownInstance``: the running task is cancelled (the remote
    shutdown revoked it) and ``run()`` returns by itself: no reconnect after a remote shutdown."""
    worker = shardcar.aio.Worker(sidecar.target, options=WorkerOptions(connect_timeout=5))
    running = asyncio.Event()
    outcome = {}
    ids = []

    @worker.job(orders(job_name="async-remote-stop", sharding_total_count=1,
                       sharding_item_parameters={}))
    async def handle(ctx: ShardingContext) -> None:
        ids.append(ctx.instance_id)
        if running.is_set():
            return
        running.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            outcome["reason"] = ctx.cancel_reason
            raise

    task = asyncio.create_task(worker.run(handle_signals=False))
    await asyncio.wait_for(running.wait(), 15)
    await asyncio.get_running_loop().run_in_executor(
        None, _shutdown_instance, sidecar, "async-remote-stop", ids[0])
    await asyncio.wait_for(task, 20)  # returns by itself: no stop()
    await worker.close()
    assert "remote shutdown" in outcome["reason"]


def test_unix_socket_target(make_sidecar, workdir):
    sidecar = make_sidecar(listen=f"unix://{workdir}/shardcar.sock")
    worker = Worker(sidecar.target, options=WorkerOptions(connect_timeout=5))
    calls = Calls()

    @worker.job(orders(job_name="unixjob"))
    def handle(ctx: ShardingContext) -> None:
        calls.add(ctx)

    with WorkerThread(worker) as wt:
        wait_until(lambda: calls.items() == {0, 1}, 15, what="triggers over the unix socket")
    assert wt.error is None


def test_env_target(sidecar, monkeypatch):
    monkeypatch.setenv("SHARDCAR_TARGET", sidecar.target)
    worker = Worker()
    assert worker.target == sidecar.target
    sub = worker._subscribe(orders(job_name="envjob"))
    assert isinstance(next(iter(sub)), shardcar.Registered)
    sub.close()
    worker.close()


async def test_asyncio_worker_completes_and_fails(sidecar):
    worker = shardcar.aio.Worker(sidecar.target, options=WorkerOptions(connect_timeout=5))
    seen = []
    assignments = []

    @worker.on_assignment
    async def assigned(a: Assignment) -> None:
        assignments.append(a)

    @worker.job(orders(job_name="async-orders"))
    async def handle(ctx: ShardingContext) -> None:
        seen.append(ctx)
        await asyncio.sleep(0.01)
        if ctx.sharding_item == 1:
            raise RuntimeError("south is closed")

    task = asyncio.create_task(worker.run(handle_signals=False))
    deadline = time.monotonic() + 15
    while len({c.execution_id for c in seen}) < 3 or {c.sharding_item for c in seen} != {0, 1}:
        assert time.monotonic() < deadline, "async handler not triggered repeatedly"
        assert not task.done(), task.exception()
        await asyncio.sleep(0.05)
    worker.stop()
    await asyncio.wait_for(task, 20)
    await worker.close()
    assert seen[0].job_name == "async-orders" and seen[0].source is TriggerSource.CRON
    assert assignments and set(assignments[-1].item_numbers) == {0, 1}


async def test_asyncio_low_level_stream(sidecar):
    worker = shardcar.aio.Worker(sidecar.target)
    sub = worker._subscribe(orders(job_name="async-raw", sharding_total_count=1,
                                  sharding_item_parameters={}))
    async for event in sub:
        if isinstance(event, shardcar.Trigger):
            await sub.complete(event.execution_id, [0])
            with pytest.raises(shardcar.ExecutionNotFoundError):
                await sub.report_failure("no-such-execution", 0, "x")
            break
    sub.close()
    await worker.close()


async def test_asyncio_invalid_config(sidecar):
    worker = shardcar.aio.Worker(sidecar.target, options=WorkerOptions(connect_timeout=5))

    @worker.job(orders(job_name="async-bad", sharding_total_count=0, sharding_item_parameters={}))
    async def handle(ctx: ShardingContext) -> None:
        raise AssertionError("never triggered")

    with pytest.raises(shardcar.InvalidJobConfigError, match="sharding_total_count"):
        await worker.run(handle_signals=False)
    await worker.close()
