"""Resident jobs against a real standalone sidecar, on the sync and the asyncio worker.

Every handler records when it started and when it returned (one clock: the test's process), so
the tests check from the workers' side what the sidecar promises:

* A join hands the moved items over without overlap: worker A holds the job's four items; B
  joins; the two items that move are revoked on A (their contexts say so), declined by the
  client (the sidecar's history shows the decline after the revoke), and only then held by B,
  under a larger fencing token; the two that stay with A are never interrupted. A stop of A
  gives its holds back at once (not after the drain timeout) and B holds all four, again never
  two at once.
* A hold whose handler returns by itself is answered ``Complete`` and started again after the
  job's backoffs (0.2 s doubling), not in a tight loop; ``attempt`` counts the restarts.
* A hold whose handler raises is answered ``ReportFailure`` (the history has the error) and is
  started again after its backoff as well.
* A resident handler on a job stored as not resident stops the worker with an error naming
  ``resident``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Set

import grpc
import pytest

from shardcar import InvalidJobConfigError, JobConfig, RetryPolicy, ShardingContext, TriggerSource
from shardcar import WorkerOptions
from shardcar._proto import shardcar_pb2 as pb
from shardcar._proto import shardcar_pb2_grpc as pb_grpc

from conftest import wait_until

APIS = ["sync", "asyncio"]
# The restart backoffs of the tests' jobs: 0.2 s, 0.4 s, 0.8 s, ... (max_attempts 2 so that the
# sidecar keeps the policy; a resident job uses its backoffs only).
RESTARTS = RetryPolicy(2, initial_backoff=0.2, max_backoff=5.0, multiplier=2)
# How much sooner than its backoff a restart may be seen: the sidecar schedules it on its wall
# clock in whole milliseconds, the test reads its monotonic one.
SLACK = 0.03


@dataclass
class Hold:
    worker: str
    item: int
    execution_id: str
    token: Optional[int]
    attempt: int
    source: TriggerSource
    start: float
    end: Optional[float] = None
    cancel_reason: str = ""


class Holds:
    """Every hold of every worker of a test, as their handlers recorded them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.all: List[Hold] = []

    def started(self, worker: str, ctx: ShardingContext) -> Hold:
        hold = Hold(worker, ctx.sharding_item, ctx.execution_id, ctx.fencing_token, ctx.attempt,
                    ctx.source, time.monotonic())
        with self.lock:
            self.all.append(hold)
        return hold

    def ended(self, hold: Hold, ctx: ShardingContext) -> None:
        with self.lock:
            hold.end = time.monotonic()
            hold.cancel_reason = ctx.cancel_reason

    def of(self, worker: Optional[str] = None, item: Optional[int] = None) -> List[Hold]:
        with self.lock:
            return [h for h in self.all if (worker is None or h.worker == worker)
                    and (item is None or h.item == item)]

    def held(self, worker: str) -> Set[int]:
        """The items ``worker`` holds now."""
        return {h.item for h in self.of(worker) if h.end is None}

    def assert_no_overlap(self) -> None:
        """No two holds of an item overlap: each starts after the one before it ended."""
        for item in {h.item for h in self.of()}:
            holds = sorted(self.of(item=item), key=lambda h: h.start)
            for before, after in zip(holds, holds[1:]):
                assert before.end is not None and before.end <= after.start, (before, after)
                assert after.token is not None and before.token is not None
                assert after.token > before.token, (before, after)


def holding(api: str, holds: Holds, worker: str, then: Callable[[ShardingContext], None]
            = lambda ctx: None) -> Any:
    """A resident handler that holds its item until cancelled, then calls ``then(ctx)``
    (which may raise); on the asyncio worker an ``async def``."""
    if api == "sync":
        def hold(ctx: ShardingContext) -> None:
            record = holds.started(worker, ctx)
            try:
                ctx.wait()
                then(ctx)
            finally:
                holds.ended(record, ctx)
        return hold

    async def ahold(ctx: ShardingContext) -> None:
        record = holds.started(worker, ctx)
        try:
            await ctx.wait_async()
            then(ctx)
        finally:
            holds.ended(record, ctx)
    return ahold


def returning(api: str, holds: Holds, worker: str, then: Callable[[ShardingContext], None]) -> Any:
    """A resident handler that ends its hold at once by itself: ``then(ctx)`` returns or raises."""
    if api == "sync":
        def hold(ctx: ShardingContext) -> None:
            record = holds.started(worker, ctx)
            try:
                then(ctx)
            finally:
                holds.ended(record, ctx)
        return hold

    async def ahold(ctx: ShardingContext) -> None:
        record = holds.started(worker, ctx)
        try:
            await asyncio.sleep(0)
            then(ctx)
        finally:
            holds.ended(record, ctx)
    return ahold


def options(instance: str) -> WorkerOptions:
    return WorkerOptions(instance_id=f"127.0.0.1@-@{instance}", connect_timeout=5,
                         drain_timeout=10)


def history(target: str, job_name: str) -> Dict[str, Any]:
    """The sidecar's executions of the job (``ListExecutions``), by execution id."""
    with grpc.insecure_channel(target) as channel:
        listed = pb_grpc.AdminServiceStub(channel).ListExecutions(
            pb.ListExecutionsRequest(job_name=job_name), timeout=10)
    return {e.execution_id: e for e in listed.executions}


@pytest.mark.parametrize("api", APIS)
def test_a_join_hands_the_moved_items_over_without_overlap(sidecar, running, api):
    holds = Holds()
    job = JobConfig(job_name=f"partitions-{api}", sharding_total_count=4)
    a = running(api, sidecar.target,
                lambda w: w.resident(job)(holding(api, holds, "a")), options("a"))
    wait_until(lambda: holds.held("a") == {0, 1, 2, 3}, 20, what="A holding all four items")
    assert all(h.source is TriggerSource.RESIDENT and h.attempt == 0 for h in holds.of("a"))

    joined = time.monotonic()
    b = running(api, sidecar.target,
                lambda w: w.resident(job)(holding(api, holds, "b")), options("b"))
    wait_until(lambda: len(holds.held("a")) == 2 and len(holds.held("b")) == 2, 20,
               what="a 2/2 split of the holds")
    moved = holds.held("b")
    assert holds.held("a") == {0, 1, 2, 3} - moved
    # A kept two holds it never gave up, and gave up exactly the two that moved, each revoked.
    a_holds = holds.of("a")
    assert len(a_holds) == 4, a_holds
    for hold in a_holds:
        if hold.item in moved:
            assert hold.end is not None and "revoked by the sidecar" in hold.cancel_reason, hold
        else:
            assert hold.end is None, hold
    # B started each moved item only after A's hold of it had ended.
    holds.assert_no_overlap()
    handoffs = [h.start - joined for h in holds.of("b")]
    assert all(t < 5 for t in handoffs), handoffs
    # The client declined what was revoked: the sidecar recorded the decline after its revoke.
    def declined() -> bool:
        executions = history(sidecar.target, job.job_name)
        for hold in a_holds:
            if hold.item in moved:
                names = [e.name for e in executions[hold.execution_id].events]
                if "decline" not in names or names.index("revoke") > names.index("decline"):
                    return False
                if executions[hold.execution_id].outcome != pb.EXECUTION_OUTCOME_REVOKED:
                    return False
        return True
    wait_until(declined, 10, what="A's declines in the sidecar's history")

    # A stops: its holds are given back at once, and B holds every item.
    stopping = time.monotonic()
    a.stop()
    assert time.monotonic() - stopping < 5, "the stop waited for the drain timeout"
    assert a.error is None
    wait_until(lambda: holds.held("b") == {0, 1, 2, 3}, 20, what="B holding all four items")
    assert all("the worker is stopping" in h.cancel_reason
               for h in holds.of("a") if h.item not in moved)
    holds.assert_no_overlap()
    # Given back by the end of A's stream, not by declines the sidecar would answer with new
    # holds on A, again and again until the stream ended: A's executions are its four holds.
    of_a = [e for e in history(sidecar.target, job.job_name).values()
            if e.instance_id == "127.0.0.1@-@a"]
    assert len(of_a) == 4, of_a
    b.stop()
    assert b.error is None
    assert all(h.end is not None for h in holds.of())


def assert_restarted_after_backoffs(holds: List[Hold]) -> None:
    """Each hold after the first started its backoff after the one before it ended."""
    for n, (before, after) in enumerate(zip(holds, holds[1:])):
        assert after.attempt == n + 1, holds
        assert before.end is not None
        backoff = 0.2 * 2 ** n
        waited = after.start - before.end
        assert waited >= backoff - SLACK, (n, waited, backoff)


@pytest.mark.parametrize("api", APIS)
def test_a_hold_that_returns_is_completed_and_started_again_after_a_backoff(
        sidecar, running, api):
    holds = Holds()
    job = JobConfig(job_name=f"returns-{api}", retry=RESTARTS)
    run = running(api, sidecar.target,
                  lambda w: w.resident(job)(returning(api, holds, "a", lambda ctx: None)),
                  options("a"))
    # 0.2 + 0.4 + 0.8 s of backoff for four holds: a tight loop would have made hundreds.
    wait_until(lambda: len(holds.of()) >= 4, 20, what="four holds of the item")
    started = holds.of()[:4]
    assert len(holds.of()) <= 5, holds.of()
    assert_restarted_after_backoffs(started)
    assert all(h.cancel_reason == "" for h in started)

    def completed() -> bool:
        executions = history(sidecar.target, job.job_name)
        return all(h.execution_id in executions and executions[h.execution_id].outcome
                   == pb.EXECUTION_OUTCOME_COMPLETED for h in started)
    wait_until(completed, 10, what="the four holds completed in the sidecar's history")
    run.stop()
    assert run.error is None


@pytest.mark.parametrize("api", APIS)
def test_a_hold_that_fails_reports_it_and_is_started_again(sidecar, running, api):
    holds = Holds()
    job = JobConfig(job_name=f"fails-{api}", retry=RESTARTS)

    def fail(ctx: ShardingContext) -> None:
        raise RuntimeError(f"partition {ctx.sharding_item} broke on attempt {ctx.attempt}")

    run = running(api, sidecar.target,
                  lambda w: w.resident(job)(returning(api, holds, "a", fail)), options("a"))
    wait_until(lambda: len(holds.of()) >= 3, 20, what="three holds of the item")
    started = holds.of()[:3]
    assert_restarted_after_backoffs(started)

    def failed() -> Optional[List[Any]]:
        executions = history(sidecar.target, job.job_name)
        found = [executions.get(h.execution_id) for h in started]
        if any(e is None or e.outcome != pb.EXECUTION_OUTCOME_FAILED for e in found):
            return None
        return found
    executions = wait_until(failed, 10, what="the three holds failed in the sidecar's history")
    assert [e.attempt for e in executions] == [0, 1, 2]
    assert [e.source for e in executions] == [pb.TRIGGER_SOURCE_RESIDENT] * 3
    assert "partition 0 broke on attempt 1" in executions[1].error
    run.stop()
    assert run.error is None


@pytest.mark.parametrize("api", APIS)
def test_a_resident_handler_on_a_job_that_is_not_resident_stops_naming_resident(
        sidecar, running, api):
    name = f"plain-{api}"

    async def nothing(ctx: ShardingContext) -> None:
        pass

    handler = nothing if api == "asyncio" else (lambda ctx: None)
    assigned = threading.Event()

    def register(w: Any) -> None:
        w.on_assignment(lambda a: assigned.set())
        w.job(JobConfig(job_name=name))(handler)

    plain = running(api, sidecar.target, register, options("plain"))
    assert assigned.wait(20), "the plain job was never assigned"
    holds = Holds()
    wrong = running(api, sidecar.target,
                    lambda w: w.resident(name)(holding(api, holds, "wrong")), options("wrong"))
    wrong.thread.join(20)
    assert not wrong.thread.is_alive(), "the worker did not stop"
    assert isinstance(wrong.error, InvalidJobConfigError), wrong.error
    assert wrong.error.field == "resident" and "is not resident" in str(wrong.error)
    assert holds.of() == []
    plain.stop()
    assert plain.error is None
