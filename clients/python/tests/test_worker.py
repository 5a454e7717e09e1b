"""The sync and asyncio workers against a real standalone sidecar process."""

from __future__ import annotations

import asyncio
import logging
import time

import grpc
import pytest

import shardcar
import shardcar.aio
from shardcar import Assignment, JobConfig, ShardingContext, ShardingStrategy, TriggerSource, Worker
from shardcar._proto import shardcar_pb2 as pb
from shardcar._proto import shardcar_pb2_grpc as pb_grpc

from conftest import wait_until
from helpers import Calls, WorkerThread

EVERY_SECOND = "* * * * * ?"


def orders(**kwargs) -> JobConfig:
    base = dict(job_name="orders", cron=EVERY_SECOND, sharding_total_count=2,
                sharding_item_parameters={0: "north", 1: "south"}, job_parameter="batch=5")
    base.update(kwargs)
    return JobConfig(**base)


def test_triggers_reach_handler_with_sharding_context(sidecar):
    worker = Worker(sidecar.target, connect_timeout=5)
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


def test_failure_is_reported_and_the_item_runs_again(sidecar, caplog):
    caplog.set_level(logging.INFO, logger="shardcar")
    worker = Worker(sidecar.target, connect_timeout=5)
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
    worker = Worker(sidecar.target, connect_timeout=5)
    calls = Calls()
    active = [0, 0]  # current, peak

    import threading
    lock = threading.Lock()

    @worker.job(orders(job_name="wide", sharding_total_count=6, sharding_item_parameters={}),
                max_concurrency=3)
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
    sub = worker.subscribe(orders(job_name="raw"))
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
    sub = worker.subscribe(JobConfig(job_name="manual", sharding_total_count=2,
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
    first = worker.subscribe(orders(job_name="handover", sharding_total_count=1,
                                    sharding_item_parameters={}), overwrite=True)
    trigger = next(e for e in first if isinstance(e, shardcar.Trigger))
    first.close()
    other = Worker(sidecar.target, instance_id="127.0.0.1@-@other")
    second = other.subscribe("handover")
    next(e for e in second if isinstance(e, shardcar.Registered))
    with pytest.raises(shardcar.AnswerRejectedError) as info:
        second.complete(trigger.execution_id, [0])
    assert info.value.code is not None
    second.close()
    other.close()
    worker.close()


def test_invalid_config_names_the_field(sidecar):
    worker = Worker(sidecar.target, connect_timeout=5)

    @worker.job(orders(job_name="bad", sharding_total_count=0, sharding_item_parameters={}))
    def handle(ctx: ShardingContext) -> None:
        raise AssertionError("never triggered")

    with pytest.raises(shardcar.InvalidJobConfigError) as info:
        worker.run(handle_signals=False)
    assert info.value.field == "sharding_total_count"
    assert "sharding_total_count" in str(info.value)
    worker.close()


def test_bad_cron_names_the_field(sidecar):
    worker = Worker(sidecar.target)
    with pytest.raises(shardcar.InvalidJobConfigError) as info:
        list(worker.subscribe(orders(job_name="badcron", cron="every tuesday")))
    assert info.value.field == "cron"
    worker.close()


def test_subscribing_without_config_to_unknown_job_is_not_found(sidecar):
    worker = Worker(sidecar.target)
    with pytest.raises(shardcar.JobNotFoundError):
        list(worker.subscribe("nobody-created-this"))
    worker.close()


def test_unix_socket_target(make_sidecar, workdir):
    sidecar = make_sidecar(listen=f"unix://{workdir}/shardcar.sock")
    worker = Worker(sidecar.target, connect_timeout=5)
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
    sub = worker.subscribe(orders(job_name="envjob"))
    assert isinstance(next(iter(sub)), shardcar.Registered)
    sub.close()
    worker.close()


async def test_asyncio_worker_completes_and_fails(sidecar):
    worker = shardcar.aio.Worker(sidecar.target, connect_timeout=5)
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
    sub = worker.subscribe(orders(job_name="async-raw", sharding_total_count=1,
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
    worker = shardcar.aio.Worker(sidecar.target, connect_timeout=5)

    @worker.job(orders(job_name="async-bad", sharding_total_count=0, sharding_item_parameters={}))
    async def handle(ctx: ShardingContext) -> None:
        raise AssertionError("never triggered")

    with pytest.raises(shardcar.InvalidJobConfigError, match="sharding_total_count"):
        await worker.run(handle_signals=False)
    await worker.close()
