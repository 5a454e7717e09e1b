"""Every case of ``clients/protocol-cases/cases.json`` against the protocol core, fake clock.

The schema and its ordering rules are those of ``clients/protocol-cases/README.md``: the steps
are fed to :class:`shardcar._core.ProtocolCore` in order, both clocks reading the step's ``at``;
the outputs it produces must be exactly the expected ones, in order, each expected output with
an ``at`` produced by a step at that time, and every ``check`` must answer as the case says.
A stream that ends with a status is fed as the error the drivers would raise for it
(:func:`shardcar.errors.error_from_status`, the mapping of ``from_rpc_error``); a reconnect is
compared by its nominal delay, and its real (jittered) delay must lie in the README's window.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import grpc
import pytest

from shardcar._core import (
    AnswerCall,
    CancelItem,
    Clock,
    Outcome,
    Output,
    ProtocolCore,
    Reconnect,
    ReconnectPolicy,
    SendCall,
    StartItem,
    Stop,
)
from shardcar._proto import shardcar_pb2 as pb
from shardcar.errors import SidecarUnavailableError, error_from_status
from shardcar.events import (
    Assignment,
    Lease,
    Registered,
    Revoke,
    ShardItem,
    Shutdown,
    Trigger,
    TriggerSource,
    event_from_proto,
)

CASES_FILE = Path(__file__).resolve().parent / ".." / ".." / "protocol-cases" / "cases.json"
WALL_ZERO = datetime(2026, 11, 23, 12, 0, 0, tzinfo=timezone.utc).timestamp()

# The transport failure a case names INTERNAL_GOAWAY, as a client sees it: INTERNAL with the
# HTTP/2 layer's message (tonic: "h2 protocol error: ..."; the sidecar never replied).
STATUS = {"INTERNAL_GOAWAY": ("INTERNAL", "h2 protocol error: connection closed by GOAWAY")}

# The defaults of a case's `settings` (README: "settings").
SETTINGS = {"backoff_initial_ms": 100, "backoff_max_ms": 5000, "connect_timeout_ms": 10000,
            "stop_on_drain": False}

# A case's shutdown `kind` (absent: SHUTDOWN_KIND_UNSPECIFIED, which reads as a drain).
SHUTDOWN_KINDS = {"drain": pb.SHUTDOWN_KIND_DRAIN, "remote": pb.SHUTDOWN_KIND_REMOTE,
                  None: pb.SHUTDOWN_KIND_UNSPECIFIED}


def load_cases() -> List[Dict[str, Any]]:
    with open(CASES_FILE, encoding="utf-8") as f:
        return json.load(f)["cases"]


class FakeClock(Clock):
    """Both clocks read the current step's ``at`` (milliseconds from the start of the case)."""

    def __init__(self) -> None:
        self.at_ms = 0

    def monotonic(self) -> float:
        return self.at_ms / 1000

    def wall(self) -> float:
        return WALL_ZERO + self.at_ms / 1000


def output_json(out: Output) -> Dict[str, Any]:
    """An output in the schema of ``expect``."""
    if isinstance(out, StartItem):
        return {"start": {"execution_id": out.ctx.execution_id, "item": out.ctx.sharding_item}}
    if isinstance(out, CancelItem):
        return {"cancel": {"execution_id": out.ctx.execution_id, "item": out.ctx.sharding_item}}
    if isinstance(out, SendCall):
        return {"call": out.call.rpc.value, "execution_id": out.call.execution_id,
                "items": list(out.call.items)}
    if isinstance(out, Stop):
        if out.error is None:
            return {"stop": True}
        code = out.error.code
        if code is None:  # the first-connect deadline: no status of its own
            assert isinstance(out.error, SidecarUnavailableError), repr(out.error)
            code = grpc.StatusCode.UNAVAILABLE
        stop: Dict[str, Any] = {"stop": True, "error": code.name}
        if out.error.reason is not None:
            stop["reason"] = out.error.reason
        return stop
    if isinstance(out, Reconnect):
        return {"reconnect": {"after_ms": round(out.nominal * 1000)}}
    raise AssertionError(f"unknown output {out!r}")


def trigger(execution_id: str, items: List[int], sent_at_ms: int) -> Trigger:
    return Trigger(
        execution_id=execution_id,
        task_id=f"job@-@{','.join(map(str, items))}@-@READY@-@10.0.0.1@-@7",
        items=tuple(ShardItem(i, "") for i in items),
        job_parameter="",
        sharding_total_count=max(items, default=0) + 1,
        source=TriggerSource.CRON,
        fire_time=datetime.fromtimestamp(WALL_ZERO + sent_at_ms / 1000, tz=timezone.utc),
        fencing_tokens={i: 1 for i in items},
    )


class Runner:
    """Feeds one case's steps to a core and records what it produces, step by step."""

    def __init__(self, settings: Dict[str, Any]) -> None:
        settings = {**SETTINGS, **settings}
        self.clock = FakeClock()
        reconnect = ReconnectPolicy(
            connect_timeout=settings["connect_timeout_ms"] / 1000,
            backoff_initial=settings["backoff_initial_ms"] / 1000,
            backoff_max=settings["backoff_max_ms"] / 1000,
            target="127.0.0.1:50061",
        )
        self.core = ProtocolCore("job", self.clock, stop_on_drain=settings["stop_on_drain"],
                                 reconnect=reconnect)
        self.produced: List[Tuple[int, int, Output]] = []  # (step index, at, output)
        self.running: Dict[Tuple[str, int], bool] = {}  # started and not returned
        self.calls: List[AnswerCall] = []
        self.in_flight: Dict[int, AnswerCall] = {}

    def record(self, index: int, at: int, outs: List[Output]) -> None:
        for out in outs:
            if isinstance(out, StartItem):
                self.running[(out.ctx.execution_id, out.ctx.sharding_item)] = True
            elif isinstance(out, CancelItem):
                key = (out.ctx.execution_id, out.ctx.sharding_item)
                assert key in self.running, f"cancel of {key}, whose handler is not running"
            elif isinstance(out, SendCall):
                assert out.call.id not in self.in_flight, (
                    f"{out.call.rpc.value} of {out.call.execution_id} repeated while its result "
                    "is pending")
                self.in_flight[out.call.id] = out.call
                self.calls.append(out.call)
            elif isinstance(out, Reconnect):
                assert out.nominal / 2 <= out.delay <= out.nominal * 1.2, (
                    f"reconnect delay {out.delay}s outside the jitter window of {out.nominal}s")
            self.produced.append((index, at, out))

    def step(self, index: int, step: Dict[str, Any]) -> None:
        at = step["at"]
        self.clock.at_ms = at
        core = self.core
        if "stream" in step:
            outs = core.stream_opened() if step["stream"] == "open" else self.stream_ended(step)
        elif "event" in step:
            outs = core.on_event(self.event(step))
        elif "done" in step:
            done = step["done"]
            key = (done["execution_id"], done["item"])
            assert self.running.pop(key, False), f"the case ends a handler not running: {key}"
            outcome = Outcome.COMPLETE if done["outcome"] == "complete" else Outcome.FAILURE
            error = "" if outcome is Outcome.COMPLETE else "RuntimeError: the handler raised"
            outs = core.handler_done(done["execution_id"], done["item"], outcome, error)
        elif "answer_result" in step:
            result = step["answer_result"]
            call = self.last_call(result["execution_id"], result["rpc"])
            code, details = STATUS.get(result["status"], (result["status"], ""))
            self.in_flight.pop(call.id, None)
            outs = core.answer_result(call.id, code, details)
        elif "check" in step:
            check = step["check"]
            outs, cancelled, _ = core.check(check["execution_id"], check["item"])
            self.record(index, at, outs)
            assert cancelled is step["cancelled"], (
                f"step {index} (at {at}): check of {check} answered cancelled={cancelled}, "
                f"expected {step['cancelled']}")
            return
        elif step.get("tick"):
            outs = core.tick()
        elif step.get("close"):
            outs = core.request_stop()  # Worker.stop(): the drivers' drain waits on the core
        else:
            raise AssertionError(f"unknown step {step}")
        self.record(index, at, outs)

    def stream_ended(self, step: Dict[str, Any]) -> List[Output]:
        status = step.get("status", "OK")
        if status == "OK":
            return self.core.stream_ended()
        error = error_from_status(grpc.StatusCode[status], f"{status} from the case",
                                  reason=step.get("reason"), request_field=None,
                                  target="127.0.0.1:50061", during="subscribe")
        return self.core.stream_ended(error=error)

    def event(self, step: Dict[str, Any]) -> Any:
        kind = step["event"]
        if kind == "registered":
            return Registered(step["instance_id"], None)
        if kind == "lease":
            valid_for = step["valid_for"] / 1000
            sent_at = step.get("sent_at", step["at"])
            return Lease(valid_for=valid_for, sequence=step["at"], expires_at=0.0,
                         expires_at_wall=WALL_ZERO + sent_at / 1000 + valid_for)
        if kind == "trigger":
            return trigger(step["execution_id"], step["items"], step.get("sent_at", step["at"]))
        if kind == "assignment":
            return Assignment("job", tuple(ShardItem(i, "") for i in step["items"]), False,
                              step.get("epoch", 1))
        if kind == "revoke":
            return Revoke(tuple(step["items"]), "")
        if kind == "shutdown":
            # Through the proto, as the drivers read it: an unspecified kind is a drain.
            msg = pb.SubscribeResponse(shutdown=pb.Shutdown(kind=SHUTDOWN_KINDS[step.get("kind")]))
            event = event_from_proto(msg, "job")
            assert isinstance(event, Shutdown)
            return event
        raise AssertionError(f"unknown event {kind}")

    def last_call(self, execution_id: str, rpc: str) -> AnswerCall:
        for call in reversed(self.calls):
            if call.execution_id == execution_id and call.rpc.value == rpc:
                return call
        raise AssertionError(f"answer_result for a {rpc} of {execution_id} that was never sent")


def compare(case: Dict[str, Any], runner: Runner) -> None:
    expected = case["expect"]
    produced = runner.produced
    got = [output_json(out) for _, _, out in produced]
    want = [{k: v for k, v in e.items() if k != "at"} for e in expected]
    listing = "\n".join(f"  step {i} at {at}: {output_json(out)}" for i, at, out in produced)
    assert got == want, f"outputs differ\nexpected: {want}\nproduced:\n{listing}"
    for (index, at, _), exp in zip(produced, expected):
        if "at" in exp:
            assert at == exp["at"], (
                f"{want[expected.index(exp)]} expected at {exp['at']}, produced by step {index} "
                f"at {at}\nproduced:\n{listing}")


CASES = load_cases()


def test_the_case_file_has_every_case():
    assert len(CASES) == 40
    assert len({c["name"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_protocol_case(case: Dict[str, Any]) -> None:
    runner = Runner(case.get("settings", {}))
    last_at: Optional[int] = None
    for index, step in enumerate(case["steps"]):
        assert last_at is None or step["at"] >= last_at, "steps go forward in time"
        last_at = step["at"]
        runner.step(index, step)
    compare(case, runner)
