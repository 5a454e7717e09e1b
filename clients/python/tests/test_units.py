"""Sidecar-free tests: config encoding, the error mapping from rich details built by hand, event
conversion, container detection and instance suffixes, ``WorkerOptions`` (defaults, validation,
the keywords of 0.1 with their deprecation warnings), the public surface of the workers (no way
to take triggers without a lease), and the protocol core's rules one by one (the shared cases
are in ``test_protocol_cases.py``)."""

from __future__ import annotations

import os
import re
import threading
import time

import grpc
import grpc.aio
import pytest
from google.rpc import error_details_pb2, status_pb2

import shardcar
from shardcar import InstanceSuffix, JobConfig, ShardingStrategy, WorkerOptions
from shardcar._common import (
    resolve_target,
    running_in_container,
    sends_instance_suffix,
    subscribe_request,
)
from shardcar._proto import shardcar_pb2 as pb
from shardcar import _core
from shardcar._common import failure_text, truncate_utf8
from shardcar.errors import from_rpc_error
from shardcar.events import (
    Lease,
    ShardItem,
    Trigger,
    TriggerSource,
    contexts_for,
    event_from_proto,
)


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


def test_sharding_strategy_maps_to_the_prefixed_wire_values():
    wire = {
        "AVG_ALLOCATION": pb.SHARDING_STRATEGY_AVG_ALLOCATION,
        "ODEVITY": pb.SHARDING_STRATEGY_ODEVITY,
        "ROUND_ROBIN": pb.SHARDING_STRATEGY_ROUND_ROBIN,
    }
    assert [s.name for s in ShardingStrategy] == list(wire)
    for name, value in wire.items():
        member = ShardingStrategy[name]
        assert JobConfig(job_name="j", sharding_strategy=member).to_proto().sharding_strategy == value
        # The user-facing name works as well, in any case, and is stored as the member.
        for spelled in (name, name.lower()):
            cfg = JobConfig(job_name="j", sharding_strategy=spelled)  # type: ignore[arg-type]
            assert cfg.sharding_strategy is member
            assert cfg.to_proto().sharding_strategy == value
        assert ShardingStrategy.from_proto(value) is member
        assert JobConfig.from_proto(
            pb.JobConfig(job_name="j", sharding_strategy=value)).sharding_strategy is member
    # The default is ElasticJob's, sent explicitly; an unset strategy on the wire reads as it.
    assert JobConfig(job_name="j").to_proto().sharding_strategy == pb.SHARDING_STRATEGY_AVG_ALLOCATION
    assert ShardingStrategy.from_proto(pb.SHARDING_STRATEGY_UNSPECIFIED) is \
        ShardingStrategy.AVG_ALLOCATION
    assert JobConfig.from_proto(pb.JobConfig(job_name="j")).sharding_strategy is \
        ShardingStrategy.AVG_ALLOCATION
    for bad in ("SHARDING_STRATEGY_ODEVITY", "RANDOM", "", 99, None):
        with pytest.raises(ValueError, match="unknown sharding strategy"):
            JobConfig(job_name="j", sharding_strategy=bad)  # type: ignore[arg-type]


def test_subscribe_request_carries_pid_and_config(monkeypatch):
    req = subscribe_request(JobConfig(job_name="j"), overwrite=True, instance_id="", labels={"a": "b"})
    assert req.job_name == "j" and req.overwrite and req.pid > 0 and req.HasField("config")
    assert dict(req.labels) == {"a": "b"}
    bare = subscribe_request("j", overwrite=False, instance_id="x", labels={})
    assert not bare.HasField("config") and bare.instance_id == "x"


@pytest.mark.parametrize(
    "pid,environ,files,expected",
    [
        (4242, {}, (), False),
        (1, {}, (), True),  # the first process of a container
        (4242, {}, ("/.dockerenv",), True),
        (4242, {}, ("/run/.containerenv",), True),  # Podman
        (4242, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, (), True),
        (4242, {"KUBERNETES_SERVICE_HOST": ""}, (), False),
        (4242, {"HOSTNAME": "abc"}, ("/etc/hostname",), False),
    ],
)
def test_container_detection(pid, environ, files, expected):
    assert running_in_container(pid=pid, environ=environ,
                                exists=lambda path: path in files) is expected


def test_instance_suffix_auto_follows_container_detection(monkeypatch):
    import shardcar._common as common

    monkeypatch.setattr(common, "running_in_container", lambda: True)
    assert sends_instance_suffix("auto", "") is True
    assert shardcar.Worker("127.0.0.1:1").instance_suffix != ""
    monkeypatch.setattr(common, "running_in_container", lambda: False)
    assert sends_instance_suffix("auto", "") is False
    worker = shardcar.Worker("127.0.0.1:1")
    assert worker.options.instance_suffix is InstanceSuffix.AUTO and worker.instance_suffix == ""
    # Forced either way, whatever the detection says.
    assert sends_instance_suffix("always", "") is True
    monkeypatch.setattr(common, "running_in_container", lambda: True)
    assert sends_instance_suffix("never", "") is False
    # An explicit instance id is used as it is: no suffix, and forcing one is a mistake.
    assert sends_instance_suffix("auto", "10.0.0.1@-@a") is False
    assert sends_instance_suffix("never", "10.0.0.1@-@a") is False
    with pytest.raises(ValueError, match="instance_id"):
        WorkerOptions(instance_id="10.0.0.1@-@a", instance_suffix=InstanceSuffix.ALWAYS)


@pytest.mark.parametrize("make", [shardcar.Worker, "aio"])
def test_a_unique_worker_sends_pid_and_a_random_suffix_kept_across_reconnects(make):
    import shardcar.aio

    if make == "aio":
        make = shardcar.aio.Worker
    always = WorkerOptions(instance_suffix=InstanceSuffix.ALWAYS)
    worker = make("127.0.0.1:1", options=always)
    suffix = worker.instance_suffix
    assert re.fullmatch(rf"{os.getpid()}-[0-9a-f]{{8}}", suffix), suffix
    assert len(suffix) <= 64  # the sidecar's limit, of [A-Za-z0-9._-]
    # Every (re)subscription of this worker carries the same suffix.
    first = subscribe_request(JobConfig(job_name="j"), overwrite=False, instance_id="",
                              labels={}, instance_suffix=worker.instance_suffix)
    assert first.instance_suffix == suffix and first.pid == os.getpid()
    assert worker.instance_suffix == suffix
    # Another worker of the same process gets another suffix: they may join the same job.
    other = make("127.0.0.1:1", options=always)
    assert other.instance_suffix != suffix
    assert other.instance_suffix.startswith(f"{os.getpid()}-")
    # Off, or with an explicit instance id: no suffix (the sidecar uses the pid or the id).
    never = WorkerOptions(instance_suffix="never")  # the value's name works too
    assert make("127.0.0.1:1", options=never).instance_suffix == ""
    explicit = make("127.0.0.1:1", options=WorkerOptions(instance_id="10.0.0.1@-@mine"))
    assert explicit.instance_suffix == "" and explicit.options.instance_id == "10.0.0.1@-@mine"


def test_every_subscription_of_a_worker_sends_its_suffix():
    sent = []

    class Stub:
        def Subscribe(self, request):
            sent.append(request)
            return iter(())

    worker = shardcar.Worker("127.0.0.1:1",
                             options=WorkerOptions(instance_suffix=InstanceSuffix.ALWAYS))
    worker._stub = Stub()
    for _ in range(2):  # a reconnect subscribes again, with the same suffix
        worker._subscribe(JobConfig(job_name="j"))
    assert [r.instance_suffix for r in sent] == [worker.instance_suffix] * 2
    assert all(r.instance_id == "" for r in sent)
    worker.close()


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
    """A failed call as gRPC raises it: code, message and (optionally) trailing metadata."""

    def __init__(self, code, details, trailing=None):
        self._code, self._details, self._trailing = code, details, trailing

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailing


class _BareErr(grpc.RpcError):
    """An error object without trailing metadata at all (some wrappers raise those)."""

    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


def _status(code, message, reason=None, fields=(), domain="shardcar.v1"):
    """A ``google.rpc.Status`` as the sidecar sends it: an ErrorInfo, then a BadRequest."""
    status = status_pb2.Status(code=code.value[0], message=message)
    if reason is not None:
        status.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain=domain))
    if fields:
        bad = error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=f, description=f"{f} is wrong")
            for f in fields])
        status.details.add().Pack(bad)
    return status


def _rich_err(code, message, reason=None, fields=(), status=None):
    status = status if status is not None else _status(code, message, reason, fields)
    trailing = (("content-type", "application/grpc"),
                ("grpc-status-details-bin", status.SerializeToString()))
    return _Err(code, message, trailing)


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


def test_invalid_config_names_the_field_from_the_bad_request():
    message = "invalid config.cron: cron expression \"x\" has 1 fields"
    err = from_rpc_error(
        _rich_err(grpc.StatusCode.INVALID_ARGUMENT, message, "INVALID_ARGUMENT", ["config.cron"]),
        target="t", during="subscribe",
    )
    assert isinstance(err, shardcar.InvalidJobConfigError)
    assert err.field == "cron"  # the JobConfig field, as the client names it
    assert err.request_field == "config.cron"  # as on the wire
    assert err.reason == "INVALID_ARGUMENT"
    assert err.details == message and "field `cron`" in str(err)


@pytest.mark.parametrize(
    "wire,field,what",
    [
        ("config.sharding_total_count", "sharding_total_count", "job config"),
        ("config.sharding_item_parameters", "sharding_item_parameters", "job config"),
        ("config.time_zone", "time_zone", "job config"),
        ("job_name", "job_name", "job config"),
        ("instance_suffix", "instance_suffix", "request"),
        ("pid", "pid", "request"),
    ],
)
def test_the_wire_field_maps_to_the_clients_naming(wire, field, what):
    err = from_rpc_error(_rich_err(grpc.StatusCode.INVALID_ARGUMENT, "bad", "INVALID_ARGUMENT",
                                   [wire]), target="t", during="subscribe")
    assert isinstance(err, shardcar.InvalidJobConfigError)
    assert (err.field, err.request_field) == (field, wire)
    assert str(err).startswith(f"invalid {what} (field `{field}`)")


def test_the_field_never_comes_from_the_message():
    # The message names other fields; only the BadRequest counts, and without one there is none.
    message = "sharding_total_count must be in 1..=100000, got 0 (see cron and time_zone)"
    named = from_rpc_error(
        _rich_err(grpc.StatusCode.INVALID_ARGUMENT, message, "INVALID_ARGUMENT",
                  ["config.time_zone"]), target="t", during="subscribe")
    assert named.field == "time_zone"
    for bare in (_Err(grpc.StatusCode.INVALID_ARGUMENT, message),
                 _BareErr(grpc.StatusCode.INVALID_ARGUMENT, message),
                 _rich_err(grpc.StatusCode.INVALID_ARGUMENT, message, "INVALID_ARGUMENT")):
        err = from_rpc_error(bare, target="t", during="subscribe")
        assert isinstance(err, shardcar.InvalidJobConfigError)
        assert err.field is None and err.request_field is None
        assert str(err).startswith("invalid job config: ")


def test_the_first_field_violation_is_the_field():
    err = from_rpc_error(
        _rich_err(grpc.StatusCode.INVALID_ARGUMENT, "m", "INVALID_ARGUMENT",
                  ["config.cron", "config.time_zone"]), target="t", during="subscribe")
    assert err.field == "cron"


@pytest.mark.parametrize(
    "code,reason,during,cls",
    [
        (grpc.StatusCode.NOT_FOUND, "NOT_FOUND", "subscribe", shardcar.JobNotFoundError),
        (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND", "subscribe", shardcar.JobNotFoundError),
        (grpc.StatusCode.ALREADY_EXISTS, "ALREADY_EXISTS", "subscribe",
         shardcar.InstanceConflictError),
        (grpc.StatusCode.NOT_FOUND, "NOT_FOUND", "answer", shardcar.ExecutionNotFoundError),
        (grpc.StatusCode.FAILED_PRECONDITION, "FAILED_PRECONDITION", "answer",
         shardcar.ExecutionFencedError),
        (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED", "answer",
         shardcar.PermissionDeniedError),
        (grpc.StatusCode.FAILED_PRECONDITION, "CORRUPT_JOB_DATA", "subscribe", shardcar.RpcError),
        (grpc.StatusCode.UNAVAILABLE, "REGISTRY_UNAVAILABLE", "subscribe",
         shardcar.SidecarUnavailableError),
        (grpc.StatusCode.UNAVAILABLE, "UNAVAILABLE", "subscribe",
         shardcar.SidecarUnavailableError),
        (grpc.StatusCode.UNAVAILABLE, "REGISTRY_UNAVAILABLE", "answer",
         shardcar.AnswerTransportError),
    ],
)
def test_every_error_carries_the_reason_of_its_error_info(code, reason, during, cls):
    assert reason in shardcar.errors.REASONS
    err = from_rpc_error(_rich_err(code, "the message", reason), target="t", during=during)
    assert type(err) is cls
    assert err.reason == reason and err.code == code and err.details == "the message"
    assert err.field is None and err.request_field is None


def test_a_registry_outage_is_not_reported_as_an_unreachable_sidecar():
    err = from_rpc_error(_rich_err(grpc.StatusCode.UNAVAILABLE, "zk session lost",
                                   "REGISTRY_UNAVAILABLE"), target="t:1", during="subscribe")
    assert "registry" in str(err) and "unreachable" not in str(err)
    unreachable = from_rpc_error(_Err(grpc.StatusCode.UNAVAILABLE, "connect failed"),
                                 target="t:1", during="subscribe")
    assert unreachable.reason is None and "unreachable at 't:1'" in str(unreachable)


def test_an_invalid_answer_names_its_field_too():
    err = from_rpc_error(_rich_err(grpc.StatusCode.INVALID_ARGUMENT, "item 9 is not in it",
                                   "INVALID_ARGUMENT", ["items"]), target="t", during="answer")
    assert type(err) is shardcar.RpcError
    assert (err.reason, err.field, err.request_field) == ("INVALID_ARGUMENT", "items", "items")
    assert "field `items`" in str(err)


def test_details_that_do_not_belong_to_the_status_are_ignored():
    # from_call checks the Status proto against the call's code and message.
    other_code = _status(grpc.StatusCode.NOT_FOUND, "m", "NOT_FOUND")
    other_message = _status(grpc.StatusCode.INVALID_ARGUMENT, "another", "INVALID_ARGUMENT",
                            ["config.cron"])
    for status in (other_code, other_message):
        err = from_rpc_error(_rich_err(grpc.StatusCode.INVALID_ARGUMENT, "m", status=status),
                             target="t", during="subscribe")
        assert isinstance(err, shardcar.InvalidJobConfigError)
        assert err.reason is None and err.field is None
    foreign = _status(grpc.StatusCode.INVALID_ARGUMENT, "m", "QUOTA", domain="proxy.example")
    err = from_rpc_error(_rich_err(grpc.StatusCode.INVALID_ARGUMENT, "m", status=foreign),
                         target="t", during="subscribe")
    assert err.reason is None  # not the sidecar's ErrorInfo
    garbage = _Err(grpc.StatusCode.INVALID_ARGUMENT, "m",
                   (("grpc-status-details-bin", b"\xff\xff not a status"),))
    err = from_rpc_error(garbage, target="t", during="subscribe")
    assert err.reason is None and err.field is None


def test_rich_details_of_an_asyncio_error():
    status = _status(grpc.StatusCode.INVALID_ARGUMENT, "bad cron", "INVALID_ARGUMENT",
                     ["config.cron"])
    err = grpc.aio.AioRpcError(
        grpc.StatusCode.INVALID_ARGUMENT, grpc.aio.Metadata(),
        grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString())),
        details="bad cron")
    mapped = from_rpc_error(err, target="t", during="subscribe")
    assert isinstance(mapped, shardcar.InvalidJobConfigError)
    assert (mapped.reason, mapped.field, mapped.request_field) == (
        "INVALID_ARGUMENT", "cron", "config.cron")


def test_events_convert():
    ev = pb.SubscribeResponse(trigger=pb.Trigger(
        execution_id="e1", task_id="t", items=[pb.ShardItem(item=1, parameter="b")],
        job_parameter="jp", sharding_total_count=2, source=pb.TRIGGER_SOURCE_FAILOVER,
        fencing_tokens={1: 42}))
    ev.trigger.fire_time.seconds = 1_700_000_000
    trig = event_from_proto(ev, "j")
    assert isinstance(trig, Trigger)
    assert trig.items == (ShardItem(1, "b"),) and trig.source is TriggerSource.FAILOVER
    assert trig.fencing_tokens == {1: 42} and trig.fire_time.year == 2023
    lease = event_from_proto(pb.SubscribeResponse(lease=pb.Lease(sequence=5)), "j")
    assert isinstance(lease, Lease) and lease.sequence == 5


def test_trigger_sources_map_from_the_prefixed_wire_values():
    def source_of(value: int) -> TriggerSource:
        trig = event_from_proto(pb.SubscribeResponse(trigger=pb.Trigger(
            execution_id="e", items=[pb.ShardItem(item=0)], source=value)), "j")
        assert isinstance(trig, Trigger)
        return trig.source

    assert source_of(pb.TRIGGER_SOURCE_CRON) is TriggerSource.CRON
    assert source_of(pb.TRIGGER_SOURCE_MISFIRE) is TriggerSource.MISFIRE
    assert source_of(pb.TRIGGER_SOURCE_FAILOVER) is TriggerSource.FAILOVER
    assert source_of(pb.TRIGGER_SOURCE_MANUAL) is TriggerSource.MANUAL
    assert source_of(pb.TRIGGER_SOURCE_RETRY) is TriggerSource.RETRY
    assert source_of(pb.TRIGGER_SOURCE_RESIDENT) is TriggerSource.RESIDENT
    assert [s.value for s in TriggerSource] == ["CRON", "MISFIRE", "FAILOVER", "MANUAL", "RETRY",
                                                "RESIDENT", "UNKNOWN"]


def test_a_retry_trigger_carries_its_attempt_to_the_context():
    ev = pb.SubscribeResponse(trigger=pb.Trigger(
        execution_id="e2", items=[pb.ShardItem(item=1)], source=pb.TRIGGER_SOURCE_RETRY,
        attempt=2, fencing_tokens={1: 7}))
    trig = event_from_proto(ev, "j")
    assert isinstance(trig, Trigger)
    assert trig.source is TriggerSource.RETRY and trig.attempt == 2
    (ctx,) = contexts_for(trig, "j", "i")
    assert ctx.attempt == 2 and ctx.source is TriggerSource.RETRY and ctx.fencing_token == 7
    assert "attempt=2" in repr(ctx)
    # A first run, and a trigger from a sidecar older than the field: attempt 0.
    first = event_from_proto(pb.SubscribeResponse(trigger=pb.Trigger(
        execution_id="e1", items=[pb.ShardItem(item=1)], source=pb.TRIGGER_SOURCE_CRON)), "j")
    assert isinstance(first, Trigger) and contexts_for(first, "j", "i")[0].attempt == 0


def test_unspecified_trigger_source_is_unknown_not_cron():
    # Proto3 zero value: a Trigger without a source (never sent) must not pass for a cron fire.
    trig = event_from_proto(pb.SubscribeResponse(trigger=pb.Trigger(
        execution_id="e", items=[pb.ShardItem(item=0)])), "j")
    assert isinstance(trig, Trigger)
    assert trig.source is TriggerSource.UNKNOWN and trig.source is not TriggerSource.CRON
    assert TriggerSource.from_proto(pb.TRIGGER_SOURCE_UNSPECIFIED) is TriggerSource.UNKNOWN
    # A value newer than this client (an open enum on the wire) is unknown as well, not an error.
    assert TriggerSource.from_proto(99) is TriggerSource.UNKNOWN


class Clock(_core.Clock):
    """A fake clock: monotonic ``now``, wall ``WALL0 + now``."""

    WALL0 = 1_800_000_000.0

    def __init__(self):
        self.now = 100.0

    def monotonic(self):
        return self.now

    def wall(self):
        return self.WALL0 + self.now


def _trigger(exec_id="e1", items=(0, 1)):
    return Trigger(exec_id, f"j@-@{exec_id}", tuple(ShardItem(i, f"p{i}") for i in items), "",
                   2, TriggerSource.CRON, None, {i: 10 + i for i in items})


def _lease(clock, valid_for=3.0, seq=1, wall_valid_for=None):
    wall_end = clock.wall() + (valid_for if wall_valid_for is None else wall_valid_for)
    return Lease(valid_for, seq, clock.now + valid_for, wall_end)


def new_core(clock, **kwargs):
    core = _core.ProtocolCore("j", clock, **kwargs)
    assert core.stream_opened() == []
    core.on_event(shardcar.Registered("1.2.3.4@-@9", None))
    return core


def _kinds(outs):
    result = []
    for o in outs:
        if isinstance(o, _core.StartItem):
            result.append(("start", o.ctx.execution_id, o.ctx.sharding_item))
        elif isinstance(o, _core.CancelItem):
            result.append(("cancel", o.ctx.execution_id, o.ctx.sharding_item))
        elif isinstance(o, _core.SendCall):
            result.append((o.call.rpc.value, o.call.execution_id, o.call.items))
        elif isinstance(o, _core.Reconnect):
            result.append(("reconnect",))
        else:
            assert isinstance(o, _core.Stop)
            result.append(("stop",))
    return result


def test_core_contexts_carry_the_trigger():
    clock = Clock()
    core = new_core(clock)
    core.on_event(_lease(clock))
    outs = core.on_event(_trigger())
    ctxs = [o.ctx for o in outs]
    assert [c.sharding_item for c in ctxs] == [0, 1]
    assert ctxs[1].fencing_token == 11 and ctxs[1].sharding_parameter == "p1"
    assert ctxs[0].instance_id == "1.2.3.4@-@9" and ctxs[0].job_name == "j"
    (send,) = core.handler_done("e1", 0, _core.Outcome.COMPLETE)
    assert send.call.instance_id == "1.2.3.4@-@9" and send.call.generation == core.generation
    assert core.handler_done("e1", 0, _core.Outcome.COMPLETE) == []  # answered once


def test_core_declines_a_whole_trigger_without_lease_in_one_call():
    clock = Clock()
    core = new_core(clock)
    assert _kinds(core.on_event(_trigger())) == [("decline", "e1", (0, 1))]
    # A later lease does not bring it back: triggers are never queued.
    assert _kinds(core.on_event(_lease(clock))) == []


def test_core_wall_clock_end_wins_over_valid_for():
    clock = Clock()
    core = new_core(clock)
    core.on_event(_lease(clock, valid_for=10.0, wall_valid_for=2.0))
    core.on_event(_trigger(items=(0,)))
    clock.now += 1.9
    assert core.check("e1", 0)[1] is False
    clock.now += 0.2
    outs, cancelled, left = core.check("e1", 0)
    assert cancelled is True and left is None and _kinds(outs) == [("cancel", "e1", 0)]


def test_core_lapse_noticed_when_the_handler_returns_declines_without_cancel():
    clock = Clock()
    core = new_core(clock)
    core.on_event(_lease(clock, valid_for=1.0))
    core.on_event(_trigger())
    clock.now += 5  # no tick, no check meanwhile (a paused process)
    outs = core.handler_done("e1", 0, _core.Outcome.COMPLETE)
    # The other item is cancelled; the returned one is declined, never answered.
    assert _kinds(outs) == [("cancel", "e1", 1), ("decline", "e1", (0,))]
    assert "lease expired" in outs[1].call.text


def test_core_declines_an_item_whose_earlier_handler_still_runs():
    clock = Clock()
    core = new_core(clock)
    core.on_event(_lease(clock, valid_for=1.0))
    core.on_event(_trigger("e1", (0,)))
    clock.now += 2
    assert _kinds(core.tick()) == [("cancel", "e1", 0)]
    core.on_event(_lease(clock, valid_for=3.0, seq=2))
    outs = core.on_event(_trigger("e2", (0, 1)))
    assert _kinds(outs) == [("start", "e2", 1), ("decline", "e2", (0,))]
    assert _kinds(core.handler_done("e1", 0, _core.Outcome.COMPLETE)) == [("decline", "e1", (0,))]


def test_core_stop_request_declines_new_work_and_stops_when_the_stream_ends():
    clock = Clock()
    core = new_core(clock)
    core.on_event(_lease(clock))
    core.on_event(_trigger("e1", (0,)))
    assert core.request_stop() == []
    (decline,) = core.on_event(_trigger("e2", (1,)))
    assert _kinds([decline]) == [("decline", "e2", (1,))]
    core.answer_result(decline.call.id, "OK")
    assert not core.idle()
    (send,) = core.handler_done("e1", 0, _core.Outcome.COMPLETE)
    assert not core.idle()  # its answer is not settled yet
    core.answer_result(send.call.id, "OK")
    assert core.idle()
    assert _kinds(core.stream_ended("closed by the worker")) == [("stop",)] and core.stopped


def test_core_reconnects_after_a_drain_and_stops_after_a_remote_shutdown():
    """A drain (the default kind of ``Shutdown``) is a sidecar restart: once its stream has
    ended the core subscribes again; a remote shutdown stops it; ``stop_on_drain`` stops it
    after a drain too (the shared cases have each of them step by step)."""
    clock = Clock()
    core = new_core(clock)
    core.on_event(shardcar.Shutdown("drain"))
    assert _kinds(core.stream_ended("sidecar ended it")) == [("reconnect",)] and not core.stopped
    core.stream_opened()
    core.on_event(shardcar.Registered("1.2.3.4@-@9", None))
    core.on_event(_lease(clock))
    assert _kinds(core.on_event(_trigger("e1", (0,)))) == [("start", "e1", 0)]

    core = new_core(clock)
    core.on_event(shardcar.Shutdown("shut down remotely", shardcar.ShutdownKind.REMOTE))
    assert _kinds(core.stream_ended("sidecar ended it")) == [("stop",)] and core.stopped

    core = new_core(clock, stop_on_drain=True)
    core.on_event(shardcar.Shutdown("drain", shardcar.ShutdownKind.DRAIN))
    assert _kinds(core.stream_ended("sidecar ended it")) == [("stop",)] and core.stopped


class AsyncFlow:
    async def fetch(self, ctx):
        return []

    async def process(self, ctx, data):
        pass


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_the_keywords_of_0_1_still_work_with_a_deprecation_warning(api):
    """Every keyword ``Worker`` took before ``WorkerOptions`` means what it meant, mapped to its
    option (renamed ones too), with one ``DeprecationWarning`` each naming the new spelling."""
    import shardcar.aio

    cls = shardcar.Worker if api == "sync" else shardcar.aio.Worker
    provider = object()
    old = dict(max_concurrency=4, max_concurrent_executions=2, instance_id="10.0.0.1@-@old",
               unique_instance=False, labels={"team": "a"}, connect_timeout=5.0,
               backoff_initial=0.2, backoff_max=2.0, drain_timeout=7.0, answer_timeout=3.0,
               exit_on_shutdown=True, options={"grpc.keepalive_time_ms": 1000}, tracing=False,
               tracer_provider=provider)
    with pytest.warns(DeprecationWarning) as caught:
        worker = cls("127.0.0.1:1", **old)
    messages = [str(w.message) for w in caught]
    assert len(messages) == len(old), messages
    assert all(m.startswith("shardcar: Worker(") and "deprecated" in m for m in messages)
    assert any("max_concurrency=...) is deprecated: use WorkerOptions(item_concurrency" in m
               for m in messages)
    assert worker.options == WorkerOptions(
        item_concurrency=4, max_concurrent_executions=2, instance_id="10.0.0.1@-@old",
        instance_suffix=InstanceSuffix.NEVER, labels={"team": "a"}, connect_timeout=5.0,
        reconnect_backoff=(0.2, 2.0), drain_timeout=7.0, answer_timeout=3.0, stop_on_drain=True,
        channel_options={"grpc.keepalive_time_ms": 1000}, tracing=False, tracer_provider=provider)
    for unique, suffix in ((None, InstanceSuffix.AUTO), (True, InstanceSuffix.ALWAYS)):
        with pytest.deprecated_call():
            assert cls("127.0.0.1:1", unique_instance=unique).options.instance_suffix is suffix
    with pytest.deprecated_call(match="exit_on_shutdown"):
        assert cls("127.0.0.1:1", exit_on_shutdown=False).options.stop_on_drain is False
    with pytest.deprecated_call(match="backoff_max"):  # the other bound keeps its default
        assert cls("127.0.0.1:1", backoff_max=0.5).options.reconnect_backoff == (0.1, 0.5)
    # A job's executor size: item_concurrency, once max_concurrency.
    with pytest.deprecated_call(match=r"job\(max_concurrency=...\) is deprecated"):
        worker.job("j", max_concurrency=3)(lambda ctx: None)
    class Flow:
        def fetch(self, ctx):
            return []

        def process(self, ctx, data):
            pass

    with pytest.deprecated_call(match="max_concurrency"):
        worker.dataflow("d", max_concurrency=2)(Flow if api == "sync" else AsyncFlow)
    assert [r.item_concurrency for r in worker._jobs] == [3, 2]
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_concurency'"):
        cls("127.0.0.1:1", max_concurency=4)


def test_the_new_spelling_warns_nothing_and_defaults_are_the_documented_ones():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        worker = shardcar.Worker("127.0.0.1:1", options=WorkerOptions(item_concurrency=2))
        worker.job("j", item_concurrency=1)(lambda ctx: None)
    assert WorkerOptions() == WorkerOptions(
        item_concurrency=8, max_concurrent_executions=None, instance_id="",
        instance_suffix=InstanceSuffix.AUTO, labels={}, connect_timeout=30.0,
        reconnect_backoff=(0.1, 5.0), answer_timeout=10.0, drain_timeout=30.0,
        stop_on_drain=False, tracing=True, tracer_provider=None, channel_options={})
    for bad in (dict(item_concurrency=0), dict(reconnect_backoff=(1.0, 0.5)),
                dict(connect_timeout=0), dict(drain_timeout=-1), dict(instance_suffix="sometimes"),
                dict(max_concurrent_executions=9)):
        with pytest.raises(ValueError):
            WorkerOptions(**bad)


def test_a_worker_has_no_public_way_to_take_triggers_without_a_lease():
    """The raw stream is private: every public way to run work goes through a job runner,
    whose protocol core runs a trigger only under a valid lease."""
    import shardcar.aio

    for module in (shardcar, shardcar.worker, shardcar.aio):
        assert not hasattr(module, "Subscription")
    for cls in (shardcar.Worker, shardcar.aio.Worker):
        assert not hasattr(cls, "subscribe")
        public = {n for n in dir(cls) if not n.startswith("_")}
        assert public == {"job", "dataflow", "resident", "on_assignment", "run", "stop",
                          "close", "instance_suffix"}, public


def _subscribe_error(code, reason=None):
    return shardcar.errors.error_from_status(code, "from the test", reason=reason,
                                             request_field=None, target="t", during="subscribe")


def test_core_stops_on_a_refused_job_even_after_registration():
    """INVALID_ARGUMENT and NOT_FOUND of a reconnect end the worker (a retry cannot fix them);
    any other error of a reconnect is retried (shared cases too)."""
    for code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND):
        core = new_core(Clock())
        error = _subscribe_error(code)
        (stop,) = core.stream_ended(error=error)
        assert isinstance(stop, _core.Stop) and stop.error is error and core.stop_error is error
    core = new_core(Clock())
    for code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ALREADY_EXISTS,
                 grpc.StatusCode.INTERNAL, grpc.StatusCode.DEADLINE_EXCEEDED):
        assert _kinds(core.stream_ended(error=_subscribe_error(code))) == [("reconnect",)]
        core.stream_opened()
    assert not core.stopped


def test_core_retries_a_stream_ended_before_registration_until_the_deadline():
    """A first stream the sidecar ends without an error and without Registered is retried
    until connect_timeout (the sidecar may be restarting), then the worker stops unavailable."""
    clock = Clock()
    reconnect = _core.ReconnectPolicy(connect_timeout=1.0, backoff_initial=0.1, backoff_max=0.4,
                                      target="t", jitter=lambda low, high: high)
    core = _core.ProtocolCore("j", clock, reconnect=reconnect)
    delays = []
    while not core.stopped:
        core.stream_opened()
        outs = core.stream_ended()
        delays += [o.delay for o in outs if isinstance(o, _core.Reconnect)]
        clock.now += delays[-1] if delays and not core.stopped else 0
    assert delays == [0.1, 0.2, 0.4, 0.4]
    assert isinstance(core.stop_error, shardcar.SidecarUnavailableError)
    assert "no registration from the sidecar at 't' within 1.0s" in str(core.stop_error)


def test_core_retries_transient_statuses_before_registration_until_the_deadline():
    """DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED (and UNAVAILABLE) before the first
    registration are retried; past connect_timeout the worker stops unavailable, the stream's
    own error only when it was UNAVAILABLE."""
    for code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED,
                 grpc.StatusCode.RESOURCE_EXHAUSTED):
        error = _subscribe_error(code)
        assert _core.is_transient(error)
        clock = Clock()
        reconnect = _core.ReconnectPolicy(connect_timeout=1.0, target="t")
        core = _core.ProtocolCore("j", clock, reconnect=reconnect)
        core.stream_opened()
        assert _kinds(core.stream_ended(error=error)) == [("reconnect",)]
        clock.now += 1.0
        core.stream_opened()
        (stop,) = core.stream_ended(error=error)
        assert isinstance(stop.error, shardcar.SidecarUnavailableError), stop
        assert stop.error.code is None and stop.error.reason is None
        assert stop.error.__cause__ is error
        assert "no registration from the sidecar at 't' within 1.0s" in str(stop.error)
    unavailable = _subscribe_error(grpc.StatusCode.UNAVAILABLE, reason="REGISTRY_UNAVAILABLE")
    clock = Clock()
    core = _core.ProtocolCore("j", clock, reconnect=_core.ReconnectPolicy(connect_timeout=1.0))
    core.stream_opened()
    clock.now += 1.0
    (stop,) = core.stream_ended(error=unavailable)
    assert stop.error is unavailable
    for code in (grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.INTERNAL,
                 grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED):
        assert not _core.is_transient(_subscribe_error(code))


def test_core_decides_a_stop_request_then_fatal_errors_then_a_shutdown():
    """The order of the shared README: a requested stop wins over a fatal error, which wins
    over 'after a remote Shutdown, stop' and 'after a drain, reconnect'; a remote Shutdown
    wins over a reconnect."""
    refused = _subscribe_error(grpc.StatusCode.NOT_FOUND, reason="JOB_NOT_FOUND")
    remote = shardcar.Shutdown("shut down remotely", shardcar.ShutdownKind.REMOTE)
    clock = Clock()
    core = new_core(clock)
    core.on_event(remote)
    core.request_stop()
    (stop,) = core.stream_ended(error=refused)
    assert stop.error is None and core.stop_error is None and stop.reason == "stop requested"
    # Before the first registration too.
    core = _core.ProtocolCore("j", clock)
    core.stream_opened()
    core.request_stop()
    (stop,) = core.stream_ended(error=_subscribe_error(grpc.StatusCode.INVALID_ARGUMENT))
    assert stop.error is None
    # A fatal error after a Shutdown of either kind: the error.
    for shutdown in (remote, shardcar.Shutdown("drain")):
        core = new_core(clock)
        core.on_event(shutdown)
        (stop,) = core.stream_ended(error=refused)
        assert stop.error is refused and core.stop_error is refused
    # A retried status after a remote Shutdown: stop without an error; after a drain: retried.
    core = new_core(clock)
    core.on_event(remote)
    (stop,) = core.stream_ended(error=_subscribe_error(grpc.StatusCode.ALREADY_EXISTS))
    assert isinstance(stop, _core.Stop) and stop.error is None
    core = new_core(clock)
    core.on_event(shardcar.Shutdown("drain"))
    assert _kinds(core.stream_ended(error=_subscribe_error(grpc.StatusCode.ALREADY_EXISTS))) == [
        ("reconnect",)]


def test_core_forced_cancel_declines_once_returned():
    clock = Clock()
    core = new_core(clock)
    core.on_event(_lease(clock))
    core.on_event(_trigger("e1", (0,)))
    assert _kinds(core.cancel_all("worker forced to stop")) == [("cancel", "e1", 0)]
    assert core.cancel_all("again") == []  # once
    assert _kinds(core.handler_done("e1", 0, _core.Outcome.FAILURE, "x")) == [
        ("decline", "e1", (0,))]


def test_core_resends_with_growing_capped_backoff_and_never_twice_in_flight():
    clock = Clock()
    core = new_core(clock, retry_initial=0.1, retry_max=0.3)
    core.on_event(_lease(clock, valid_for=60))
    core.on_event(_trigger("e1", (0,)))
    (send,) = core.handler_done("e1", 0, _core.Outcome.COMPLETE)
    delays = []
    for _ in range(4):
        assert core.tick() == []  # in flight: nothing is repeated
        assert core.answer_result(send.call.id, "UNAVAILABLE", "connection refused") == []
        due = core.next_deadline()
        delays.append(round(due - clock.now, 3))
        clock.now = due
        (send,) = core.tick()
    assert delays == [0.1, 0.2, 0.3, 0.3]
    assert send.call.attempt == 5
    assert core.answer_result(send.call.id, "FAILED_PRECONDITION", "taken back") == []
    clock.now += 10
    assert core.tick() == [] and core.idle()


@pytest.mark.parametrize(
    "code,details,transport",
    [
        ("UNAVAILABLE", "", True),
        ("CANCELLED", "", True),
        ("DEADLINE_EXCEEDED", "", True),
        ("INTERNAL", "h2 protocol error: http2 error", True),
        ("INTERNAL", "Received RST_STREAM with error code 2", True),
        ("INTERNAL", "the sidecar failed", False),
        ("FAILED_PRECONDITION", "execution was taken back", False),
        ("NOT_FOUND", "", False),
        ("PERMISSION_DENIED", "", False),
        ("INVALID_ARGUMENT", "", False),
    ],
)
def test_transport_failures_are_told_from_refusals(code, details, transport):
    assert _core.is_transport_failure(code, details) is transport
    err = from_rpc_error(_Err(getattr(grpc.StatusCode, code), details), target="t", during="answer")
    assert isinstance(err, shardcar.AnswerTransportError) is transport
    if code in ("FAILED_PRECONDITION", "NOT_FOUND", "PERMISSION_DENIED"):
        assert isinstance(err, shardcar.AnswerRejectedError)


def test_failure_text_is_cut_to_16384_bytes_without_splitting_a_character():
    text = failure_text(RuntimeError("\u00e9\u4e2d\U0001f600" * 5000))
    data = text.encode("utf-8")
    assert 16384 - 4 < len(data) <= 16384
    assert text.startswith("RuntimeError: \u00e9\u4e2d\U0001f600")
    for limit in range(1, 12):
        cut = truncate_utf8("a\u00e9\u4e2d\U0001f600", limit)
        assert len(cut.encode("utf-8")) <= limit and "a\u00e9\u4e2d\U0001f600".startswith(cut)
    assert truncate_utf8("short") == "short"
    assert truncate_utf8("bad \udc80 surrogate") == "bad ? surrogate"


def test_decline_reason_is_cut_too():
    clock = Clock()
    core = new_core(clock)
    (send,) = core.on_event(_trigger("e" * 20000, (0,)))
    assert len(send.call.text.encode("utf-8")) <= 16384


def test_context_check_happens_at_call_time_on_the_cores_clock():
    clock = Clock()
    core = new_core(clock)
    core.on_event(_lease(clock, valid_for=3.0))
    (start,) = core.on_event(_trigger("e1", (0,)))
    ctx = start.ctx
    ctx._probe = lambda: core.check("e1", 0)[1:]
    assert not ctx.cancelled and not ctx.wait(0)
    clock.now += 60  # the process was paused: no timer ran
    assert ctx.cancelled and "lease expired" in ctx.cancel_reason
    assert ctx.wait(0)


def test_context_wait_wakes_when_the_lease_runs_out_without_any_timer():
    core = new_core(_core.SYSTEM_CLOCK)
    core.on_event(Lease(0.3, 1, time.monotonic() + 0.3, time.time() + 0.3))
    (start,) = core.on_event(_trigger("e1", (0,)))
    ctx = start.ctx
    ctx._probe = lambda: core.check("e1", 0)[1:]
    began = time.monotonic()
    assert ctx.wait(10) is True
    assert 0.25 < time.monotonic() - began < 2


async def test_context_wait_async_wakes_when_the_lease_runs_out():
    core = new_core(_core.SYSTEM_CLOCK)
    core.on_event(Lease(0.3, 1, time.monotonic() + 0.3, time.time() + 0.3))
    (start,) = core.on_event(_trigger("e1", (0,)))
    ctx = start.ctx
    ctx._probe = lambda: core.check("e1", 0)[1:]
    assert await ctx.wait_async(0.01) is False
    began = time.monotonic()
    assert await ctx.wait_async(10) is True
    assert 0.2 < time.monotonic() - began < 2


async def test_context_wait_async_wakes_on_cancel_from_another_thread():
    ctx = contexts_for(_trigger("e1", (0,)), "j", "i")[0]
    threading.Timer(0.1, ctx._cancel, args=("revoked",)).start()
    began = time.monotonic()
    assert await ctx.wait_async(10) is True
    assert time.monotonic() - began < 2 and ctx.cancel_reason == "revoked"


def test_lease_read_after_its_expires_at_is_not_valid():
    ev = pb.SubscribeResponse(lease=pb.Lease(valid_for={"seconds": 3}, sequence=2))
    ev.lease.expires_at.FromSeconds(int(time.time()) - 1)
    lease = event_from_proto(ev, "j")
    assert isinstance(lease, Lease) and not lease.valid
    assert lease.expires_at <= time.monotonic()
    ev.lease.expires_at.FromSeconds(int(time.time()) + 60)
    lease = event_from_proto(ev, "j")
    assert lease.valid and lease.expires_at - time.monotonic() <= 3.0


def test_lease_valid_uses_receipt_time():
    lease = event_from_proto(
        pb.SubscribeResponse(lease=pb.Lease(valid_for={"seconds": 2}, sequence=1)), "j")
    assert lease.valid and 1.9 < lease.expires_at - time.monotonic() <= 2.0


def test_unreachable_sidecar_raises_after_connect_timeout():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = shardcar.Worker(f"127.0.0.1:{port}", options=WorkerOptions(connect_timeout=1.0))

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
    worker = shardcar.aio.Worker(f"127.0.0.1:{port}", options=WorkerOptions(connect_timeout=1.0))

    @worker.job(JobConfig(job_name="j", cron="* * * * * ?"))
    async def handle(ctx):
        raise AssertionError("never called")

    with pytest.raises(shardcar.SidecarUnavailableError):
        await worker.run(handle_signals=False)
    await worker.close()


def test_run_without_jobs_is_an_error():
    with pytest.raises(shardcar.ShardcarError, match="no jobs"):
        shardcar.Worker("127.0.0.1:1").run(handle_signals=False)
