"""Resident jobs without a sidecar: ``JobConfig.resident`` (on the wire, and refused with what a
resident job cannot have, naming the field, as the sidecar's ``check_resident`` would),
``@worker.resident`` (sets it; ``@worker.job`` and ``@worker.dataflow`` refuse a resident
config), and the protocol core's rules for holds: a hold is cancelled by a stop of the worker and
by ``Shutdown`` (declined once its handler returned; on a stop given back by the end of the
stream instead), answered ``Complete`` or ``ReportFailure`` when its handler
ended it itself, and a registration whose effective config is of the other kind stops with an
error naming ``resident``. (Against a real sidecar: ``test_resident.py``.)"""

from __future__ import annotations

import pytest

import shardcar
import shardcar.aio
from shardcar import InvalidJobConfigError, JobConfig, RetryPolicy
from shardcar import _core
from shardcar._proto import shardcar_pb2 as pb
from shardcar.events import ShardItem, Shutdown, ShutdownKind, Trigger, TriggerSource

from test_units import Clock, _kinds, _lease


def test_resident_goes_on_the_wire_and_comes_back():
    config = JobConfig(job_name="p", sharding_total_count=3, resident=True,
                       retry=RetryPolicy(2, initial_backoff=0.2))
    msg = config.to_proto()
    assert msg.resident is True
    assert JobConfig.from_proto(msg) == config
    assert JobConfig(job_name="p").to_proto().resident is False


@pytest.mark.parametrize(
    "kwargs, field, says",
    [
        (dict(cron="0/5 * * * * ?"), "cron", "has no cron"),
        (dict(failover=True), "failover", "turn failover off"),
        (dict(monitor_execution=False), "monitor_execution", "turn it on"),
        (dict(execution_timeout_seconds=30), "execution_timeout_seconds", "at 0, got 30"),
    ],
)
def test_a_resident_config_the_sidecar_would_refuse_names_its_field(kwargs, field, says):
    with pytest.raises(ValueError) as err:
        JobConfig(job_name="p", resident=True, **kwargs)
    assert str(err.value).startswith(field + ": a resident job "), str(err.value)
    assert says in str(err.value) and "(or make the job not resident)" in str(err.value)
    # The same fields are fine for a job that is not resident.
    JobConfig(job_name="p", **kwargs)


def test_what_a_resident_job_may_have():
    JobConfig(job_name="p", resident=True, cron="  ", monitor_execution=True, misfire=False,
              sharding_item_parameters={0: "topic-0"}, job_error_handler_type="LOG")
    with pytest.raises(ValueError, match=r"^resident must be True or False"):
        JobConfig(job_name="p", resident="yes")  # type: ignore[arg-type]


def test_the_sidecars_resident_config_is_read_as_it_is():
    # Written by hand or by an older client: the sidecar shards it as resident whatever the rest
    # says (failover is off for a resident job); a worker still reads its stream.
    back = JobConfig.from_proto(pb.JobConfig(job_name="p", resident=True, failover=True,
                                             cron="0/5 * * * * ?"))
    assert back.resident is True and back.failover is True


@pytest.mark.parametrize("worker_cls", [shardcar.Worker, shardcar.aio.Worker])
def test_worker_resident_sets_resident_and_the_others_refuse_it(worker_cls):
    worker = worker_cls("127.0.0.1:1")

    @worker.resident(JobConfig(job_name="partitions", sharding_total_count=4))
    def hold(ctx):
        pass

    (runner,) = worker._jobs
    assert runner.config.resident is True and runner.resident and runner.core.resident
    # Each hold runs on its own: no executor bound is sent to the sidecar.
    assert runner.max_concurrent_executions is None
    assert worker._subscribe_request(runner.config, False, None).max_concurrent_executions == 0
    resident = JobConfig(job_name="other", resident=True)
    with pytest.raises(ValueError, match=r"^resident: .*@worker.resident\(config\), not "
                                         r"@worker.job\(config\)"):
        worker.job(resident)
    with pytest.raises(ValueError, match=r"not @worker.dataflow\(config\)"):
        worker.dataflow(resident)
    with pytest.raises(ValueError, match=r"^cron: a resident job"):
        worker.resident(JobConfig(job_name="cron", cron="0/5 * * * * ?"))
    worker.resident("existing")(hold)  # a job that exists, by name
    if worker_cls is shardcar.Worker:
        worker.close()


def _hold(exec_id, item):
    return Trigger(exec_id, f"p@-@{item}", (ShardItem(item, ""),), "", 4,
                   TriggerSource.RESIDENT, None, {item: 40 + item})


def resident_core(clock, resident=True, config=None):
    core = _core.ProtocolCore("p", clock, resident=resident)
    core.stream_opened()
    if config is None:
        config = JobConfig(job_name="p", sharding_total_count=4, resident=resident)
    assert core.on_event(shardcar.Registered("1.2.3.4@-@9", config)) == []
    core.on_event(_lease(clock, valid_for=5.0))
    return core


def test_core_a_hold_ended_by_its_handler_is_answered():
    clock = Clock()
    core = resident_core(clock)
    assert _kinds(core.on_event(_hold("h0", 0))) == [("start", "h0", 0)]
    assert _kinds(core.on_event(_hold("h1", 1))) == [("start", "h1", 1)]
    assert _kinds(core.handler_done("h0", 0, _core.Outcome.COMPLETE)) == [("complete", "h0", (0,))]
    (failure,) = core.handler_done("h1", 1, _core.Outcome.FAILURE, "RuntimeError: broke")
    assert _kinds([failure]) == [("report_failure", "h1", (1,))]
    assert failure.call.text == "RuntimeError: broke"


def test_core_a_revoked_hold_is_declined_once_its_handler_returned():
    clock = Clock()
    core = resident_core(clock)
    (start0,) = core.on_event(_hold("h0", 0))
    core.on_event(_hold("h1", 1))
    outs = core.on_event(shardcar.Revoke((0,), "resident item 0: the item moved"))
    assert _kinds(outs) == [("cancel", "h0", 0)]
    assert start0.ctx.cancelled and "the item moved" in start0.ctx.cancel_reason
    # Returned after the revoke, whether it noticed or not: declined, never Complete.
    assert _kinds(core.handler_done("h0", 0, _core.Outcome.COMPLETE)) == [("decline", "h0", (0,))]


def test_core_a_stop_of_the_worker_gives_every_hold_back_at_once():
    clock = Clock()
    core = resident_core(clock)
    core.on_event(_hold("h0", 0))
    core.on_event(_hold("h1", 1))
    outs = core.request_stop()
    assert _kinds(outs) == [("cancel", "h0", 0), ("cancel", "h1", 1)]
    assert "the worker is stopping" in outs[0].reason
    # Given back by the end of the stream, which the driver closes once the core is idle: a
    # Decline of a hold the sidecar did not revoke would only have it started here again.
    assert core.handler_done("h0", 0, _core.Outcome.COMPLETE) == []
    assert core.handler_done("h1", 1, _core.Outcome.FAILURE, "x") == []
    # A hold that comes meanwhile is not run, nor declined (for the same reason).
    assert core.on_event(_hold("h2", 2)) == []
    assert core.idle() and core.running() == 0


def test_core_a_plain_job_still_drains_on_stop():
    clock = Clock()
    core = resident_core(clock, resident=False)
    core.on_event(_hold("e1", 0))
    assert core.request_stop() == []  # running items finish and are answered


@pytest.mark.parametrize("kind", [ShutdownKind.DRAIN, ShutdownKind.REMOTE])
def test_core_shutdown_gives_every_hold_back(kind):
    clock = Clock()
    core = resident_core(clock)
    core.on_event(_hold("h0", 0))
    outs = core.on_event(Shutdown("sidecar stopping", kind))
    assert _kinds(outs) == [("cancel", "h0", 0)]
    assert "the sidecar sent Shutdown" in outs[0].reason
    assert _kinds(core.handler_done("h0", 0, _core.Outcome.COMPLETE)) == [("decline", "h0", (0,))]


@pytest.mark.parametrize("resident", [True, False])
def test_core_a_registration_of_the_wrong_kind_stops_naming_resident(resident):
    clock = Clock()
    core = _core.ProtocolCore("p", clock, resident=resident)
    core.stream_opened()
    stored = JobConfig(job_name="p", resident=not resident)
    (stop,) = core.on_event(shardcar.Registered("1.2.3.4@-@9", stored))
    assert isinstance(stop, _core.Stop) and core.stopped
    assert isinstance(stop.error, InvalidJobConfigError) and stop.error.field == "resident"
    says = "@worker.job" if resident else "@worker.resident"
    assert says in str(stop.error) and core.stop_error is stop.error
    # Nothing runs on it meanwhile, and its end stops nothing more.
    core.on_event(_lease(clock))
    assert not any(kind[0] == "start" for kind in _kinds(core.on_event(_hold("h0", 0))))
    assert core.stream_ended("worker stopped") == []


def test_core_a_hold_runs_only_under_a_valid_lease():
    clock = Clock()
    core = _core.ProtocolCore("p", clock, resident=True)
    core.stream_opened()
    core.on_event(shardcar.Registered("1.2.3.4@-@9", JobConfig(job_name="p", resident=True)))
    # No lease yet: declined at once, never run (and never queued for a later lease).
    assert _kinds(core.on_event(_hold("h0", 0))) == [("decline", "h0", (0,))]
    core.on_event(_lease(clock, valid_for=2.0))
    (start,) = core.on_event(_hold("h1", 1))
    # The lease runs out unrenewed: the hold is cancelled, and declined once it returned.
    clock.now += 2.5
    assert _kinds(core.tick()) == [("cancel", "h1", 1)]
    assert start.ctx.cancelled and "lease expired" in start.ctx.cancel_reason
    assert _kinds(core.handler_done("h1", 1, _core.Outcome.COMPLETE)) == [("decline", "h1", (1,))]
