"""Sidecar-free tests: config encoding, error mapping, event conversion, the per-job state rules."""

from __future__ import annotations

import time

import grpc
import pytest

import shardcar
from shardcar import JobConfig, ShardingStrategy
from shardcar._common import resolve_target, subscribe_request
from shardcar._proto import shardcar_pb2 as pb
from shardcar._state import JobState
from shardcar.errors import from_rpc_error
from shardcar.events import Lease, ShardItem, Trigger, TriggerSource, event_from_proto


def test_optional_fields_stay_unset_unless_given():
    msg = JobConfig(job_name="orders", cron="0/5 * * * * ?", sharding_total_count=4).to_proto()
    for name in ("misfire", "monitor_execution", "max_time_diff_seconds", "reconcile_interval_minutes"):
        assert not msg.HasField(name), name
    msg = JobConfig(job_name="o", misfire=False, monitor_execution=False,
                    max_time_diff_seconds=-1, reconcile_interval_minutes=0).to_proto()
    assert msg.HasField("misfire") and msg.misfire is False
    assert msg.HasField("monitor_execution") and msg.monitor_execution is False
    assert msg.max_time_diff_seconds == -1 and msg.HasField("reconcile_interval_minutes")


def test_config_round_trip():
    cfg = JobConfig(job_name="orders", cron="* * * * * ?", sharding_total_count=3,
                    sharding_item_parameters={0: "north", 2: "south"}, job_parameter="p",
                    failover=True, sharding_strategy=ShardingStrategy.ROUND_ROBIN,
                    props={"k": "v"}, execution_timeout_seconds=7, misfire=True)
    assert JobConfig.from_proto(cfg.to_proto()) == cfg


def test_subscribe_request_carries_pid_and_config(monkeypatch):
    req = subscribe_request(JobConfig(job_name="j"), overwrite=True, instance_id="", labels={"a": "b"})
    assert req.job_name == "j" and req.overwrite and req.pid > 0 and req.HasField("config")
    assert dict(req.labels) == {"a": "b"}
    bare = subscribe_request("j", overwrite=False, instance_id="x", labels={})
    assert not bare.HasField("config") and bare.instance_id == "x"


def test_target_resolution(monkeypatch):
    monkeypatch.delenv("SHARDCAR_TARGET", raising=False)
    assert resolve_target(None) == "127.0.0.1:50061"
    monkeypatch.setenv("SHARDCAR_TARGET", "unix:///run/shardcar.sock")
    assert resolve_target(None) == "unix:///run/shardcar.sock"
    assert resolve_target("10.0.0.1:1") == "10.0.0.1:1"


def test_unix_targets_send_localhost_authority():
    from shardcar._common import channel_options

    assert ("grpc.default_authority", "localhost") in channel_options("unix:///tmp/s.sock")
    assert all(k != "grpc.default_authority" for k, _ in channel_options("127.0.0.1:1"))


class _Err(grpc.RpcError):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


@pytest.mark.parametrize(
    "code,during,cls",
    [
        (grpc.StatusCode.UNAVAILABLE, "subscribe", shardcar.SidecarUnavailableError),
        (grpc.StatusCode.INVALID_ARGUMENT, "subscribe", shardcar.InvalidJobConfigError),
        (grpc.StatusCode.NOT_FOUND, "subscribe", shardcar.JobNotFoundError),
        (grpc.StatusCode.ALREADY_EXISTS, "subscribe", shardcar.InstanceConflictError),
        (grpc.StatusCode.NOT_FOUND, "answer", shardcar.ExecutionNotFoundError),
        (grpc.StatusCode.FAILED_PRECONDITION, "answer", shardcar.ExecutionFencedError),
        (grpc.StatusCode.PERMISSION_DENIED, "answer", shardcar.PermissionDeniedError),
        (grpc.StatusCode.INTERNAL, "answer", shardcar.RpcError),
    ],
)
def test_status_codes_map_to_error_classes(code, during, cls):
    err = from_rpc_error(_Err(code, "details here"), target="t", during=during)
    assert isinstance(err, cls) and isinstance(err, shardcar.ShardcarError)
    assert err.code == code and "details here" in str(err)


def test_invalid_config_names_the_field():
    err = from_rpc_error(
        _Err(grpc.StatusCode.INVALID_ARGUMENT, "sharding_total_count must be in 1..=100000, got 0"),
        target="t", during="subscribe",
    )
    assert err.field == "sharding_total_count"
    assert "sharding_total_count" in str(err)


def test_events_convert():
    ev = pb.WorkerEvent(trigger=pb.Trigger(
        execution_id="e1", task_id="t", items=[pb.ShardItem(item=1, parameter="b")],
        job_parameter="jp", sharding_total_count=2, source=pb.FAILOVER,
        fencing_tokens={1: 42}))
    ev.trigger.fire_time.seconds = 1_700_000_000
    trig = event_from_proto(ev, "j")
    assert isinstance(trig, Trigger)
    assert trig.items == (ShardItem(1, "b"),) and trig.source is TriggerSource.FAILOVER
    assert trig.fencing_tokens == {1: 42} and trig.fire_time.year == 2023
    lease = event_from_proto(pb.WorkerEvent(lease=pb.Lease(sequence=5)), "j")
    assert isinstance(lease, Lease) and lease.sequence == 5


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _trigger(exec_id="e1", items=(0, 1)):
    return Trigger(exec_id, f"j@-@{exec_id}", tuple(ShardItem(i, f"p{i}") for i in items), "",
                   2, TriggerSource.CRON, None, {i: 10 + i for i in items})


def _lease(clock, valid_for=3.0, seq=1):
    return Lease(valid_for, seq, clock.now + valid_for)


def test_state_runs_items_and_answers_while_leased():
    clock = Clock()
    st = JobState("j", clock)
    st.new_stream("s1")
    st.registered("1.2.3.4@-@9")
    assert st.on_lease(_lease(clock)) == []
    ctxs = st.on_trigger(_trigger())
    assert [c.sharding_item for c in ctxs] == [0, 1]
    assert ctxs[1].fencing_token == 11 and ctxs[1].sharding_parameter == "p1"
    assert ctxs[0].instance_id == "1.2.3.4@-@9"
    assert st.finish(ctxs[0]).token == "s1"
    assert st.finish(ctxs[0]) is None  # answered once


def test_state_trigger_without_lease_waits_for_renewal():
    clock = Clock()
    st = JobState("j", clock)
    st.new_stream("s1")
    assert st.on_trigger(_trigger()) == []
    st.on_revoke((1,), "moved")
    started = st.on_lease(_lease(clock))
    assert [c.sharding_item for c in started] == [0]


def test_state_lease_expiry_cancels_and_blocks_new_work():
    clock = Clock()
    st = JobState("j", clock)
    st.new_stream("s1")
    st.on_lease(_lease(clock, 3.0))
    ctxs = st.on_trigger(_trigger())
    clock.now += 2.0
    assert st.check_lease() == ([], 103.0)
    clock.now += 1.5
    cancelled, _ = st.check_lease()
    assert cancelled == list(ctxs) and all(c.cancelled for c in ctxs)
    assert "lease" in ctxs[0].cancel_reason
    assert st.on_trigger(_trigger("e2")) == []  # waits for a renewal
    assert st.finish(ctxs[0]) is None
    renewed = st.on_lease(_lease(clock, 3.0, 2))
    assert [c.execution_id for c in renewed] == ["e2", "e2"]


def test_state_finish_after_expiry_without_watchdog_is_not_answered():
    clock = Clock()
    st = JobState("j", clock)
    st.new_stream("s1")
    st.on_lease(_lease(clock, 1.0))
    (ctx,) = st.on_trigger(_trigger(items=(0,)))
    clock.now += 5
    assert st.finish(ctx) is None and ctx.cancelled


def test_state_revoke_cancels_only_named_items():
    clock = Clock()
    st = JobState("j", clock)
    st.new_stream("s1")
    st.on_lease(_lease(clock))
    c0, c1 = st.on_trigger(_trigger())
    assert st.on_revoke((1,), "resharded") == [c1]
    assert c1.cancelled and not c0.cancelled and "resharded" in c1.cancel_reason
    assert st.finish(c1) is None and st.finish(c0) is not None


def test_state_reconnect_never_answers_old_executions():
    clock = Clock()
    st = JobState("j", clock)
    st.new_stream("s1")
    st.on_lease(_lease(clock))
    (old,) = st.on_trigger(_trigger(items=(0,)))
    assert st.stream_lost("sidecar gone") == [old]
    st.new_stream("s2")
    st.on_lease(_lease(clock))
    assert st.finish(old) is None
    (new,) = st.on_trigger(_trigger("e9", items=(0,)))
    assert st.finish(new).token == "s2"


def test_state_stop_refuses_new_work_on_every_stream():
    clock = Clock()
    st = JobState("j", clock)
    st.new_stream("s1")
    st.on_lease(_lease(clock))
    st.stop()
    assert st.on_trigger(_trigger()) == []
    st.new_stream("s2")
    st.on_lease(_lease(clock))
    assert st.on_trigger(_trigger()) == []


def test_lease_valid_uses_receipt_time():
    lease = event_from_proto(
        pb.WorkerEvent(lease=pb.Lease(valid_for={"seconds": 2}, sequence=1)), "j")
    assert lease.valid and 1.9 < lease.expires_at - time.monotonic() <= 2.0


def test_unreachable_sidecar_raises_after_connect_timeout():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = shardcar.Worker(f"127.0.0.1:{port}", connect_timeout=1.0)

    @worker.job(JobConfig(job_name="j", cron="* * * * * ?"))
    def handle(ctx):
        raise AssertionError("never called")

    started = time.monotonic()
    with pytest.raises(shardcar.SidecarUnavailableError, match=f"127.0.0.1:{port}"):
        worker.run(handle_signals=False)
    assert time.monotonic() - started < 10
    worker.close()


async def test_unreachable_sidecar_raises_asyncio():
    import socket
    import shardcar.aio
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = shardcar.aio.Worker(f"127.0.0.1:{port}", connect_timeout=1.0)

    @worker.job(JobConfig(job_name="j", cron="* * * * * ?"))
    async def handle(ctx):
        raise AssertionError("never called")

    with pytest.raises(shardcar.SidecarUnavailableError):
        await worker.run(handle_signals=False)
    await worker.close()


def test_run_without_jobs_is_an_error():
    with pytest.raises(shardcar.ShardcarError, match="no jobs"):
        shardcar.Worker("127.0.0.1:1").run(handle_signals=False)
