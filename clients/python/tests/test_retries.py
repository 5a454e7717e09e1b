"""Retries (``JobConfig.retry``) and the error handler (``JobConfig.job_error_handler_type``).

* Without a sidecar: :class:`RetryPolicy` takes backoffs as a ``timedelta`` or seconds and
  refuses, naming the field, every value the sidecar refuses (``max_attempts`` 0 to 100,
  backoffs 10 ms to 1 day, ``max_backoff`` not below ``initial_backoff``, ``multiplier`` 1 to
  10); unset fields stay unset on the wire; what the sidecar sends back is read as it is; the
  error handler type is one of ElasticJob's names. (A ``RETRY`` trigger's ``attempt`` on the
  handler's context: ``test_units.py``.)
* Against a real standalone sidecar, on the sync and the asyncio worker: a job of two items
  with ``max_attempts`` 3 and a 100 ms backoff, triggered once through the Admin API, whose
  handler fails item 1 on attempts 0 and 1: the handler sees item 1 at attempts 0, 1, 2 with
  sources MANUAL, RETRY, RETRY and a growing fencing token, item 0 once, and nothing more; the
  sidecar's history (``ListExecutions``) says the same. The effective policy comes back in
  ``Registered``, and an error handler without its settings is refused naming the prop.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from datetime import timedelta
from typing import Any, List

import grpc
import pytest

import shardcar
from shardcar import (
    ERROR_HANDLER_TYPES,
    Assignment,
    InvalidJobConfigError,
    JobConfig,
    RetryPolicy,
    ShardingContext,
    TriggerSource,
    Worker,
)
from shardcar._proto import shardcar_pb2 as pb
from shardcar._proto import shardcar_pb2_grpc as pb_grpc

from conftest import wait_until

# -- without a sidecar ---------------------------------------------------------------------------


def test_a_policy_takes_backoffs_as_a_timedelta_or_seconds():
    policy = RetryPolicy(3, initial_backoff=0.1, max_backoff=timedelta(seconds=30), multiplier=3)
    assert policy.max_attempts == 3
    assert policy.initial_backoff == timedelta(milliseconds=100)
    assert policy.max_backoff == timedelta(seconds=30)
    assert policy.multiplier == 3.0 and isinstance(policy.multiplier, float)
    assert RetryPolicy(3, 0.1) == RetryPolicy(3, timedelta(milliseconds=100))
    # The limits themselves are accepted.
    RetryPolicy(100, initial_backoff=0.01, max_backoff=timedelta(days=1), multiplier=10)
    RetryPolicy(1, initial_backoff=timedelta(days=1), multiplier=1)
    # 0 is the sidecar's "no retries", as 1 is (proto: "0 or 1: no retries"), and goes on the
    # wire as it is.
    assert RetryPolicy(0).to_proto().max_attempts == 0


@pytest.mark.parametrize(
    "kwargs, field, says",
    [
        (dict(max_attempts=101), "retry.max_attempts", "from 0 to 100"),
        (dict(max_attempts=-1), "retry.max_attempts", "from 0 to 100"),
        (dict(max_attempts=3.0), "retry.max_attempts", "an int"),
        (dict(max_attempts=True), "retry.max_attempts", "an int"),
        (dict(max_attempts=3, initial_backoff=0.009), "retry.initial_backoff", "10 ms and 1 day"),
        (dict(max_attempts=3, initial_backoff=timedelta(microseconds=9999)),
         "retry.initial_backoff", "10 ms and 1 day"),
        (dict(max_attempts=3, initial_backoff=0), "retry.initial_backoff", "10 ms and 1 day"),
        (dict(max_attempts=3, initial_backoff=-1), "retry.initial_backoff", "10 ms and 1 day"),
        (dict(max_attempts=3, initial_backoff=math.nan), "retry.initial_backoff", "10 ms and 1 day"),
        (dict(max_attempts=3, initial_backoff=1e300), "retry.initial_backoff", "10 ms and 1 day"),
        (dict(max_attempts=3, initial_backoff="1s"), "retry.initial_backoff", "timedelta or a number"),
        (dict(max_attempts=3, max_backoff=timedelta(days=1, microseconds=1)),
         "retry.max_backoff", "10 ms and 1 day"),
        (dict(max_attempts=3, initial_backoff=2, max_backoff=1), "retry.max_backoff",
         "must not be below retry.initial_backoff (2 s)"),
        # Unset, the initial backoff is the sidecar's 1 s, which the max must not be below either.
        (dict(max_attempts=3, max_backoff=0.5), "retry.max_backoff",
         "must not be below the default initial_backoff (1 s)"),
        (dict(max_attempts=3, multiplier=0.5), "retry.multiplier", "from 1 to 10"),
        (dict(max_attempts=3, multiplier=0), "retry.multiplier", "from 1 to 10"),
        (dict(max_attempts=3, multiplier=10.5), "retry.multiplier", "from 1 to 10"),
        (dict(max_attempts=3, multiplier=math.nan), "retry.multiplier", "from 1 to 10"),
        (dict(max_attempts=3, multiplier="2"), "retry.multiplier", "from 1 to 10"),
    ],
)
def test_a_policy_the_sidecar_would_refuse_names_its_field(kwargs, field, says):
    with pytest.raises(ValueError) as err:
        RetryPolicy(**kwargs)
    assert str(err.value).startswith(field + " "), str(err.value)
    assert says in str(err.value)


def test_unset_policy_fields_stay_unset_on_the_wire():
    msg = JobConfig(job_name="j", retry=RetryPolicy(3)).to_proto()
    assert msg.HasField("retry") and msg.retry.max_attempts == 3
    assert not msg.retry.HasField("initial_backoff") and not msg.retry.HasField("max_backoff")
    assert msg.retry.multiplier == 0  # the wire's unset: the sidecar's 2
    assert not JobConfig(job_name="j").to_proto().HasField("retry")

    full = JobConfig(job_name="j", retry=RetryPolicy(5, 0.25, 90, 1.5)).to_proto().retry
    assert full.initial_backoff.ToTimedelta() == timedelta(milliseconds=250)
    assert full.max_backoff.ToTimedelta() == timedelta(seconds=90)
    assert full.multiplier == 1.5


def test_the_sidecars_policy_and_handler_are_read_as_they_are():
    cfg = JobConfig(job_name="j", retry=RetryPolicy(4, 0.5, 10, 2.5),
                    job_error_handler_type="webhook", props={"webhook.url": "http://x"})
    assert cfg.job_error_handler_type == "WEBHOOK"
    assert JobConfig.from_proto(cfg.to_proto()) == cfg
    # What the sidecar reads from ZooKeeper need not be what this client would send: a handler
    # of an ElasticJob process's own (an SPI type), a policy written by hand. A worker still
    # reads its stream.
    wire = pb.JobConfig(job_name="j", job_error_handler_type="MY_SPI_HANDLER",
                        retry=pb.RetryPolicy(max_attempts=500, multiplier=20))
    back = JobConfig.from_proto(wire)
    assert back.job_error_handler_type == "MY_SPI_HANDLER"
    assert back.retry is not None and back.retry.max_attempts == 500
    assert back.retry.multiplier == 20 and back.retry.initial_backoff is None


def test_the_error_handler_type_is_one_of_elasticjobs():
    assert ERROR_HANDLER_TYPES == ("LOG", "IGNORE", "THROW", "EMAIL", "WECHAT", "DINGTALK",
                                   "WEBHOOK")
    for name in ERROR_HANDLER_TYPES:
        assert JobConfig(job_name="j", job_error_handler_type=name.lower()).job_error_handler_type \
            == name
    assert JobConfig(job_name="j").to_proto().job_error_handler_type == ""
    assert JobConfig(job_name="j", job_error_handler_type=" ignore ").to_proto() \
        .job_error_handler_type == "IGNORE"
    with pytest.raises(ValueError, match=r"^job_error_handler_type must be one of LOG, IGNORE"):
        JobConfig(job_name="j", job_error_handler_type="SLACK")
    with pytest.raises(ValueError, match=r"^retry must be a RetryPolicy"):
        JobConfig(job_name="j", retry={"max_attempts": 3})  # type: ignore[arg-type]


# -- against a real sidecar ----------------------------------------------------------------------

APIS = ["sync", "asyncio"]
BACKOFF = timedelta(milliseconds=100)
# After the last attempt, how long nothing more may run: five times the 0.4 s a fourth attempt
# would have waited (backoffs 0.1 s, 0.2 s, 0.4 s).
QUIET = 2.0


class Seen:
    """Every context a handler got, in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.contexts: List[ShardingContext] = []

    def add(self, ctx: ShardingContext) -> None:
        with self.lock:
            self.contexts.append(ctx)

    def of(self, item: int) -> List[ShardingContext]:
        with self.lock:
            return [c for c in self.contexts if c.sharding_item == item]


def fail_item_1_until_attempt_2(seen: Seen, ctx: ShardingContext) -> None:
    seen.add(ctx)
    if ctx.sharding_item == 1 and ctx.attempt < 2:
        raise RuntimeError(f"item 1 fails on attempt {ctx.attempt}")


def retried_job(name: str) -> JobConfig:
    # No cron: the job runs only when triggered, so that no fire of the item comes between a
    # failure and its retry (a fire drops the pending retry and starts the count again).
    return JobConfig(job_name=name, sharding_total_count=2,
                     retry=RetryPolicy(max_attempts=3, initial_backoff=BACKOFF))


def item_1_history(stub: Any, job_name: str) -> List[Any]:
    """The sidecar's executions of item 1 (``ListExecutions``), by attempt."""
    listed = stub.ListExecutions(pb.ListExecutionsRequest(job_name=job_name), timeout=10)
    return sorted((e for e in listed.executions if 1 in e.items), key=lambda e: e.attempt)


@pytest.mark.parametrize("api", APIS)
def test_a_failed_item_runs_again_with_its_attempt_until_it_succeeds(sidecar, running, api):
    seen = Seen()
    job = retried_job(f"retried-{api}")
    assignments: List[Assignment] = []

    def register(worker: Any) -> None:
        worker.on_assignment(assignments.append)
        if api == "sync":
            worker.job(job)(lambda ctx: fail_item_1_until_attempt_2(seen, ctx))
        else:
            async def handle(ctx: ShardingContext) -> None:
                await asyncio.sleep(0)
                fail_item_1_until_attempt_2(seen, ctx)
            worker.job(job)(handle)

    run = running(api, sidecar.target, register)
    wait_until(lambda: assignments and assignments[-1].item_numbers == (0, 1), 20,
               what="both items assigned")
    with grpc.insecure_channel(sidecar.target) as channel:
        stub = pb_grpc.AdminServiceStub(channel)
        stub.TriggerJob(pb.TriggerJobRequest(job_name=job.job_name), timeout=10)
        wait_until(lambda: len(seen.of(1)) >= 3, 20, what="item 1 run three times")
        # Nothing more: the third attempt succeeded, and item 0 never failed.
        time.sleep(QUIET)
        runs = seen.of(1)
        assert [c.attempt for c in runs] == [0, 1, 2], runs
        assert [c.source for c in runs] == [TriggerSource.MANUAL, TriggerSource.RETRY,
                                            TriggerSource.RETRY], runs
        # Each retry is a new execution with a new fencing token, growing as a store that
        # fences the item needs it to.
        assert len({c.execution_id for c in runs}) == 3
        tokens = [c.fencing_token for c in runs]
        assert all(isinstance(t, int) for t in tokens) and tokens == sorted(set(tokens)), tokens
        assert [(c.attempt, c.source) for c in seen.of(0)] == [(0, TriggerSource.MANUAL)]

        # The sidecar's record of the same: three executions of item 1, attempts 0, 1, 2.
        executions = wait_until(lambda: len(item_1_history(stub, job.job_name)) == 3 and
                                item_1_history(stub, job.job_name), 10,
                                what="three executions of item 1 in the history")
        assert [(e.attempt, e.source, e.outcome) for e in executions] == [
            (0, pb.TRIGGER_SOURCE_MANUAL, pb.EXECUTION_OUTCOME_FAILED),
            (1, pb.TRIGGER_SOURCE_RETRY, pb.EXECUTION_OUTCOME_FAILED),
            (2, pb.TRIGGER_SOURCE_RETRY, pb.EXECUTION_OUTCOME_COMPLETED),
        ]
        assert "item 1 fails on attempt 1" in executions[1].error
    assert run.error is None


def test_the_effective_policy_and_handler_come_back_in_registered(sidecar):
    worker = Worker(sidecar.target)
    job = JobConfig(job_name="effective", retry=RetryPolicy(3, initial_backoff=BACKOFF),
                    job_error_handler_type="ignore")
    sub = worker._subscribe(job)
    try:
        first = next(iter(sub))
        assert isinstance(first, shardcar.Registered) and first.config is not None
        # The sidecar's defaults filled in: max 1 min, multiplier 2.
        assert first.config.retry == RetryPolicy(3, BACKOFF, timedelta(minutes=1), 2)
        assert first.config.job_error_handler_type == "IGNORE"
    finally:
        sub.close()
        worker.close()


def test_an_error_handler_without_its_settings_is_refused_naming_the_prop(sidecar):
    worker = Worker(sidecar.target)
    sub = worker._subscribe(JobConfig(job_name="alerts", job_error_handler_type="DINGTALK"))
    try:
        with pytest.raises(InvalidJobConfigError) as err:
            next(iter(sub))
        assert err.value.field == 'props["dingtalk.webhook"]', err.value
        assert err.value.request_field == 'config.props["dingtalk.webhook"]'
        assert err.value.reason == "INVALID_ARGUMENT"
    finally:
        sub.close()
        worker.close()
