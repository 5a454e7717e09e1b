"""Handler spans (the ``otel`` extra): unit tests against a scripted in-process WorkerService,
spans collected by the SDK's in-memory exporter; and one test against the real sidecar, which
exports its ``shardcar.execution`` spans by OTLP/gRPC to a receiver run by the test."""

from __future__ import annotations

import asyncio
import os
import queue
import secrets
import subprocess
import sys
import threading
import time
from concurrent import futures
from typing import Any, Dict, List, Optional

import grpc
import pytest

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

import shardcar  # noqa: E402
import shardcar.aio  # noqa: E402
from shardcar import JobConfig, ShardingContext, Worker, WorkerOptions, _tracing  # noqa: E402
from shardcar._proto import shardcar_pb2 as pb  # noqa: E402
from shardcar._proto import shardcar_pb2_grpc as pb_grpc  # noqa: E402

from conftest import wait_until  # noqa: E402
from helpers import WorkerThread  # noqa: E402

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{SPAN_ID}-01"
TRACESTATE = "vendor=abc"


# -- a scripted sidecar -----------------------------------------------------------------------------
class FakeSidecar(pb_grpc.WorkerServiceServicer):
    """``Subscribe`` sends Registered, a long Lease, then whatever :meth:`send` queues; the
    answers are recorded."""

    def __init__(self) -> None:
        self.events: "queue.Queue[pb.SubscribeResponse]" = queue.Queue()
        self.answers: List[Any] = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()

    def send(self, **event: Any) -> None:
        self.events.put(pb.SubscribeResponse(**event))

    def trigger(self, execution_id: str, items=(0,), traceparent: str = TRACEPARENT,
                tracestate: str = TRACESTATE) -> None:
        self.send(trigger=pb.Trigger(
            execution_id=execution_id, task_id=f"traced@-@{execution_id}",
            items=[pb.ShardItem(item=i) for i in items], sharding_total_count=2,
            source=pb.TRIGGER_SOURCE_MANUAL, fencing_tokens={i: 7 + i for i in items},
            traceparent=traceparent, tracestate=tracestate))

    def Subscribe(self, request, context):
        yield pb.SubscribeResponse(registered=pb.Registered(instance_id="10.0.0.1@-@42"))
        lease = pb.Lease(sequence=1)
        lease.valid_for.FromSeconds(120)
        lease.expires_at.FromSeconds(int(time.time()) + 120)
        yield pb.SubscribeResponse(lease=lease)
        self.subscribed.set()
        while context.is_active():
            try:
                yield self.events.get(timeout=0.05)
            except queue.Empty:
                pass

    def _record(self, request: Any) -> None:
        with self.lock:
            self.answers.append(request)

    def Complete(self, request, context):
        self._record(request)
        return pb.CompleteResponse()

    def ReportFailure(self, request, context):
        self._record(request)
        return pb.ReportFailureResponse()

    def Decline(self, request, context):
        self._record(request)
        return pb.DeclineResponse()

    def answered(self, execution_id: str) -> List[Any]:
        with self.lock:
            return [a for a in self.answers if a.execution_id == execution_id]


@pytest.fixture
def fake():
    servicer = FakeSidecar()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_WorkerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    servicer.target = f"127.0.0.1:{port}"
    try:
        yield servicer
    finally:
        server.stop(0)


@pytest.fixture
def spans():
    """``(provider, exporter)``: an SDK provider of this test only, spans kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def handler_spans(exporter) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == _tracing.SPAN_NAME]


def wait_spans(exporter, count: int, what: str = "handler spans") -> list:
    return wait_until(lambda: len(handler_spans(exporter)) >= count and handler_spans(exporter),
                      10, what=what)


def assert_child_of_traceparent(span, item: int = 0, execution_id: str = "e1") -> None:
    assert span.parent is not None and span.parent.is_remote
    assert format(span.parent.span_id, "016x") == SPAN_ID
    assert format(span.parent.trace_id, "032x") == TRACE_ID
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.context.trace_state.get("vendor") == "abc"
    assert span.kind is SpanKind.CONSUMER
    attrs = dict(span.attributes)
    assert attrs["shardcar.job"] == "traced"
    assert attrs["shardcar.execution_id"] == execution_id
    assert attrs["shardcar.task_id"] == f"traced@-@{execution_id}"
    assert attrs["shardcar.item"] == item
    assert attrs["shardcar.source"] == "MANUAL"
    assert attrs["shardcar.fencing_token"] == 7 + item
    assert attrs["shardcar.instance"] == "10.0.0.1@-@42"


# -- sync worker ------------------------------------------------------------------------------------
def tracing_to(provider) -> WorkerOptions:
    """A worker's options that send its handler spans to ``provider``."""
    return WorkerOptions(connect_timeout=5, tracer_provider=provider)


def test_context_carries_the_triggers_trace_context():
    msg = pb.SubscribeResponse(trigger=pb.Trigger(
        execution_id="e", items=[pb.ShardItem(item=3)], traceparent=TRACEPARENT,
        tracestate=TRACESTATE))
    trig = shardcar.events.event_from_proto(msg, "j")
    assert (trig.traceparent, trig.tracestate) == (TRACEPARENT, TRACESTATE)
    (ctx,) = shardcar.events.contexts_for(trig, "j", "i")
    assert (ctx.traceparent, ctx.tracestate) == (TRACEPARENT, TRACESTATE)


def test_sync_handler_runs_in_a_child_span_of_the_traceparent(fake, spans):
    provider, exporter = spans
    worker = Worker(fake.target, options=tracing_to(provider))
    inner: Dict[str, Any] = {}

    @worker.job("traced")
    def handle(ctx: ShardingContext) -> None:
        current = trace.get_current_span().get_span_context()
        inner["span_id"], inner["trace_id"] = current.span_id, current.trace_id
        with provider.get_tracer("test").start_as_current_span("inside"):
            pass

    with WorkerThread(worker):
        assert fake.subscribed.wait(10)
        fake.trigger("e1", items=(0, 1))
        wait_until(lambda: sum(len(a.items) for a in fake.answered("e1")) >= 2, 10,
                   what="both items answered")
        found = wait_spans(exporter, 2)
    by_item = {s.attributes["shardcar.item"]: s for s in found}
    assert set(by_item) == {0, 1}
    for item, span in by_item.items():
        assert_child_of_traceparent(span, item)
        assert span.attributes["shardcar.outcome"] == "completed"
        assert span.status.status_code is StatusCode.UNSET
    # The span is current while the handler runs: the handler's own spans are its children.
    assert inner["trace_id"] == int(TRACE_ID, 16)
    assert inner["span_id"] in {s.context.span_id for s in found}
    children = [s for s in exporter.get_finished_spans() if s.name == "inside"]
    assert {c.parent.span_id for c in children} == {s.context.span_id for s in found}


def test_sync_handler_failure_sets_error_status(fake, spans):
    provider, exporter = spans
    worker = Worker(fake.target, options=tracing_to(provider))

    @worker.job("traced")
    def handle(ctx: ShardingContext) -> None:
        raise ValueError("order book locked")

    with WorkerThread(worker):
        assert fake.subscribed.wait(10)
        fake.trigger("e1")
        (span,) = wait_spans(exporter, 1)
        wait_until(lambda: fake.answered("e1"), 10, what="the failure report")
    assert_child_of_traceparent(span)
    assert span.status.status_code is StatusCode.ERROR
    assert "ValueError: order book locked" in span.status.description
    assert span.attributes["shardcar.outcome"] == "failed"
    (exc,) = [e for e in span.events if e.name == "exception"]
    assert exc.attributes["exception.type"] == "ValueError"
    assert isinstance(fake.answered("e1")[0], pb.ReportFailureRequest)


def test_sync_handler_revoked_gets_a_cancel_event(fake, spans):
    provider, exporter = spans
    worker = Worker(fake.target, options=tracing_to(provider))
    started = threading.Event()

    @worker.job("traced")
    def handle(ctx: ShardingContext) -> None:
        started.set()
        assert ctx.wait(10), "never cancelled"

    with WorkerThread(worker):
        assert fake.subscribed.wait(10)
        fake.trigger("e1")
        assert started.wait(10)
        fake.send(revoke=pb.Revoke(items=[0], reason="resharded"))
        (span,) = wait_spans(exporter, 1)
        wait_until(lambda: fake.answered("e1"), 10, what="the decline")
    assert span.attributes["shardcar.outcome"] == "cancelled"
    assert span.status.status_code is StatusCode.UNSET
    (event,) = [e for e in span.events if e.name == _tracing.CANCEL_EVENT]
    assert "resharded" in event.attributes["shardcar.cancel_reason"]
    assert isinstance(fake.answered("e1")[0], pb.DeclineRequest)


def test_tracing_false_makes_no_span(fake, spans):
    provider, exporter = spans
    worker = Worker(fake.target,
                    options=WorkerOptions(connect_timeout=5, tracer_provider=provider, tracing=False))
    seen: List[Any] = []

    @worker.job("traced")
    def handle(ctx: ShardingContext) -> None:
        seen.append(trace.get_current_span().get_span_context().is_valid)

    with WorkerThread(worker):
        assert fake.subscribed.wait(10)
        fake.trigger("e1")
        wait_until(lambda: fake.answered("e1"), 10, what="the answer")
    assert seen == [False]
    assert exporter.get_finished_spans() == ()


def test_a_trigger_without_traceparent_gets_a_root_span(fake, spans):
    provider, exporter = spans
    worker = Worker(fake.target, options=tracing_to(provider))

    @worker.job("traced")
    def handle(ctx: ShardingContext) -> None:
        pass

    # A span current where the worker runs is not the parent of handler spans.
    with provider.get_tracer("test").start_as_current_span("outer"):
        with WorkerThread(worker):
            assert fake.subscribed.wait(10)
            fake.trigger("e1", traceparent="", tracestate="")
            (span,) = wait_spans(exporter, 1)
    assert span.parent is None
    assert span.attributes["shardcar.outcome"] == "completed"


# -- asyncio worker ---------------------------------------------------------------------------------
async def _run_aio(worker: shardcar.aio.Worker, body) -> None:
    task = asyncio.ensure_future(worker.run(handle_signals=False))
    try:
        await body()
    finally:
        worker.stop()
        await asyncio.wait_for(task, 20)
        await worker.close()


async def _wait_async(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def test_asyncio_handler_runs_in_a_child_span_of_the_traceparent(fake, spans):
    provider, exporter = spans
    worker = shardcar.aio.Worker(fake.target, options=tracing_to(provider))
    current: List[int] = []

    @worker.job("traced")
    async def handle(ctx: ShardingContext) -> None:
        await asyncio.sleep(0.01)
        current.append(trace.get_current_span().get_span_context().span_id)
        if ctx.sharding_item == 1:
            raise RuntimeError("disk full")

    async def body() -> None:
        await _wait_async(fake.subscribed.is_set, 10, "subscribe")
        fake.trigger("e1", items=(0, 1))
        await _wait_async(lambda: len(handler_spans(exporter)) == 2, 10, "handler spans")

    await _run_aio(worker, body)
    by_item = {s.attributes["shardcar.item"]: s for s in handler_spans(exporter)}
    for item, span in by_item.items():
        assert_child_of_traceparent(span, item)
    assert by_item[0].attributes["shardcar.outcome"] == "completed"
    assert by_item[1].attributes["shardcar.outcome"] == "failed"
    assert by_item[1].status.status_code is StatusCode.ERROR
    # Each task has its own current span.
    assert sorted(current) == sorted(s.context.span_id for s in by_item.values())


async def test_asyncio_handler_cancelled_by_revoke_gets_a_cancel_event(fake, spans):
    provider, exporter = spans
    worker = shardcar.aio.Worker(fake.target, options=tracing_to(provider))
    started = asyncio.Event()

    @worker.job("traced")
    async def handle(ctx: ShardingContext) -> None:
        started.set()
        await asyncio.sleep(30)

    async def body() -> None:
        await _wait_async(fake.subscribed.is_set, 10, "subscribe")
        fake.trigger("e1")
        await asyncio.wait_for(started.wait(), 10)
        fake.send(revoke=pb.Revoke(items=[0], reason="resharded"))
        await _wait_async(lambda: handler_spans(exporter), 10, "the handler span")

    await _run_aio(worker, body)
    (span,) = handler_spans(exporter)
    assert_child_of_traceparent(span)
    assert span.attributes["shardcar.outcome"] == "cancelled"
    assert span.status.status_code is StatusCode.UNSET
    (event,) = [e for e in span.events if e.name == _tracing.CANCEL_EVENT]
    assert "resharded" in event.attributes["shardcar.cancel_reason"]


# -- without opentelemetry --------------------------------------------------------------------------
def test_without_opentelemetry_nothing_is_traced(monkeypatch):
    monkeypatch.setattr(_tracing, "_api", None)  # as if the import had failed
    assert _tracing.item_tracer(True) is None
    worker = Worker("127.0.0.1:1")
    assert worker._item_tracer is None
    worker.close()
    with pytest.raises(ValueError, match="not installed"):
        _tracing.item_tracer(True, object())


def test_the_base_package_does_not_import_opentelemetry():
    # A fresh interpreter in which opentelemetry cannot be imported at all.
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import shardcar, shardcar.aio\n"
        "w = shardcar.Worker('127.0.0.1:1'); assert w._item_tracer is None; w.close()\n"
        "w = shardcar.Worker('127.0.0.1:1', options=shardcar.WorkerOptions(tracing=False))\n"
        "w.close()\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    code = (
        "import sys, shardcar, shardcar.aio\n"
        "shardcar.Worker('127.0.0.1:1', options=shardcar.WorkerOptions(tracing=False)).close()\n"
        "assert not any(m.startswith('opentelemetry') for m in sys.modules), 'imported'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


# -- against the real sidecar -----------------------------------------------------------------------
class Receiver:
    """A tiny OTLP/gRPC trace receiver: keeps every span it is sent."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        receiver = self
        self.lock = threading.Lock()
        self.spans: List[Any] = []  # (resource attributes, span)

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                with receiver.lock:
                    for rs in request.resource_spans:
                        resource = {a.key: a.value.string_value for a in rs.resource.attributes}
                        for ss in rs.scope_spans:
                            receiver.spans.extend((resource, s) for s in ss.spans)
                return trace_service_pb2.ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def span(self, span_id: int) -> Optional[Any]:
        with self.lock:
            for resource, s in self.spans:
                if int.from_bytes(s.span_id, "big") == span_id:
                    return resource, s
        return None


@pytest.fixture
def receiver():
    r = Receiver()
    try:
        yield r
    finally:
        r.server.stop(0)


class TracedSidecar:
    """A real sidecar exporting to ``receiver``, and a sync worker of job ``traced`` on it whose
    handler spans go to ``exporter``."""

    def __init__(self, make_sidecar, receiver: Receiver, spans) -> None:
        self.provider, self.exporter = spans
        self.receiver = receiver
        self.sidecar = make_sidecar(args=["--otlp-endpoint", f"http://127.0.0.1:{receiver.port}"])
        self.worker = Worker(self.sidecar.target, options=tracing_to(self.provider))
        self.assigned = threading.Event()
        self.worker.on_assignment(
            lambda a: self.assigned.set() if 0 in a.item_numbers else None)

        @self.worker.job(JobConfig(job_name="traced", sharding_total_count=1))
        def handle(ctx: ShardingContext) -> None:
            pass

    def trigger(self, metadata=()) -> Any:
        """Triggers the job through the Admin API; the handler span of that run."""
        count = len(handler_spans(self.exporter)) + 1
        with grpc.insecure_channel(self.sidecar.target) as channel:
            reply = pb_grpc.AdminServiceStub(channel).TriggerJob(
                pb.TriggerJobRequest(job_name="traced"), metadata=metadata, timeout=10)
        assert list(reply.instance_ids), "no instance was asked to run"
        return wait_spans(self.exporter, count, "the handler span")[count - 1]

    def execution_span(self, handler) -> Any:
        """``(resource attributes, span)`` the sidecar exported as the handler span's parent;
        it exports in batches (about every second) once the execution is over."""
        return wait_until(lambda: self.receiver.span(handler.parent.span_id), 20,
                          what="the sidecar to export the handler span's parent")


@pytest.fixture
def traced(make_sidecar, receiver, spans):
    t = TracedSidecar(make_sidecar, receiver, spans)
    with WorkerThread(t.worker):
        assert t.assigned.wait(15), "item 0 never assigned"
        yield t


def test_handler_span_is_a_child_of_the_sidecars_execution_span(traced):
    handler = traced.trigger()
    assert handler.parent is not None and handler.parent.is_remote
    assert handler.parent.trace_id == handler.context.trace_id
    assert handler.attributes["shardcar.outcome"] == "completed"
    assert handler.attributes["shardcar.source"] == "MANUAL"
    assert handler.attributes["shardcar.job"] == "traced"
    resource, execution = traced.execution_span(handler)
    assert execution.name == "shardcar.execution"
    assert resource.get("service.name") == os.environ.get("OTEL_SERVICE_NAME", "shardcar")
    assert int.from_bytes(execution.span_id, "big") == handler.parent.span_id
    assert int.from_bytes(execution.trace_id, "big") == handler.context.trace_id
    # A root execution: its trace id is its execution id.
    assert execution.trace_id.hex() == handler.attributes["shardcar.execution_id"]
    assert not execution.parent_span_id


def test_trigger_job_with_traceparent_puts_both_spans_into_the_callers_trace(traced):
    traced.trigger()  # a first, untraced run
    caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    handler = traced.trigger(metadata=(("traceparent", f"00-{caller_trace}-{caller_span}-01"),))
    assert format(handler.context.trace_id, "032x") == caller_trace
    resource, execution = traced.execution_span(handler)
    assert execution.name == "shardcar.execution"
    assert execution.trace_id.hex() == caller_trace
    assert execution.parent_span_id.hex() == caller_span
    assert int.from_bytes(execution.span_id, "big") == handler.parent.span_id
