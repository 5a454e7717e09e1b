"""Handler spans, with the ``otel`` extra (``pip install shardcar[otel]``).

Every item's handler runs inside a span, ``shardcar.handler``, whose parent is the sidecar's
``shardcar.execution`` span of that execution: its W3C Trace Context comes with the trigger
(``Trigger.traceparent``/``tracestate``) and is read with the W3C TraceContext propagator
(always that one, whatever global propagator is configured: it is the wire format). The span is
the current span while the handler runs, so the handler's own spans are its children.

Kind ``CONSUMER``: the handler processes work another process (the sidecar) delivered, and
its parent is remote. Attributes: ``shardcar.job``, ``shardcar.execution_id``,
``shardcar.task_id``, ``shardcar.item``, ``shardcar.source``, ``shardcar.instance``,
``shardcar.fencing_token`` (when the trigger had one) and, at the end, ``shardcar.outcome``:
``completed``, ``failed`` (status ``ERROR``, the exception recorded) or ``cancelled`` (the
item was revoked, its lease lapsed, the stream was lost or the worker forced to stop; it is
declined, not answered: status stays unset, and a ``shardcar.cancelled`` event with
``shardcar.cancel_reason`` marks when it happened).

opentelemetry is imported the first time a worker with ``tracing=True`` (the default) is
created; when it is not installed, nothing is traced and nothing else changes. With the API's
default (no-op) tracer provider the span records nothing and costs next to nothing. None of
this is part of the I/O-free protocol core.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, Dict, Iterator, Optional, Union

from .events import ShardingContext

SPAN_NAME = "shardcar.handler"
CANCEL_EVENT = "shardcar.cancelled"

_NOT_LOADED = object()
_api: Any = _NOT_LOADED


def _load() -> Any:
    """The opentelemetry names used here, or ``None`` when it is not installed."""
    global _api
    if _api is _NOT_LOADED:
        try:
            from opentelemetry import trace
            from opentelemetry.context import Context
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )
        except ImportError:
            _api = None
        else:
            _api = (trace, Context, TraceContextTextMapPropagator())
    return _api


def available() -> bool:
    """Whether opentelemetry (the API) can be imported."""
    return _load() is not None


class ItemTracer:
    """Opens the span of one item's handler (see the module's docstring)."""

    def __init__(self, tracer_provider: Optional[Any] = None) -> None:
        from . import __version__

        trace, self._context_class, self._propagator = _load()
        self._trace = trace
        # Without a provider: the global one, through a proxy that follows a provider set later.
        self._tracer = trace.get_tracer("shardcar", __version__, tracer_provider)

    @contextlib.contextmanager
    def span(self, ctx: ShardingContext) -> Iterator[Any]:
        """The handler of ``ctx`` runs inside this block; what it raises is recorded and
        raised again."""
        trace = self._trace
        carrier = {"traceparent": ctx.traceparent, "tracestate": ctx.tracestate}
        # From an empty context: with no (valid) traceparent the span is a root, never a child
        # of whatever span was current where the worker was started.
        parent = self._propagator.extract(carrier, context=self._context_class())
        attributes: Dict[str, Union[str, int]] = {
            "shardcar.job": ctx.job_name,
            "shardcar.execution_id": ctx.execution_id,
            "shardcar.task_id": ctx.task_id,
            "shardcar.item": ctx.sharding_item,
            "shardcar.source": ctx.source.value,
            "shardcar.instance": ctx.instance_id,
        }
        if ctx.fencing_token is not None:
            attributes["shardcar.fencing_token"] = ctx.fencing_token
        with self._tracer.start_as_current_span(
            SPAN_NAME,
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            if not span.is_recording():  # no SDK, or not sampled: nothing more to do
                yield span
                return
            noted = threading.Lock()  # held for good once the event is added

            def on_cancel() -> None:  # on the thread that cancels the item
                if noted.acquire(blocking=False):
                    span.add_event(
                        CANCEL_EVENT, {"shardcar.cancel_reason": ctx.cancel_reason or "cancelled"}
                    )

            unwatch = ctx._watch_cancel(on_cancel)
            outcome = "completed"
            try:
                yield span
            except asyncio.CancelledError:
                outcome = "cancelled"
                raise
            except BaseException as exc:
                if ctx.cancelled:  # the item is declined whatever it raised
                    outcome = "cancelled"
                    span.record_exception(exc)
                else:
                    outcome = "failed"
                    span.record_exception(exc)
                    span.set_status(
                        trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
                    )
                raise
            else:
                if ctx.cancelled:
                    outcome = "cancelled"
            finally:
                unwatch()
                if outcome == "cancelled":
                    on_cancel()  # a task cancelled without its context (the worker closing)
                span.set_attribute("shardcar.outcome", outcome)


def item_tracer(enabled: bool, tracer_provider: Optional[Any] = None) -> Optional[ItemTracer]:
    """The tracer of a worker: ``None`` when tracing is off or opentelemetry is missing."""
    if not enabled:
        return None
    if not available():
        if tracer_provider is not None:
            raise ValueError("tracer_provider given but opentelemetry is not installed")
        return None
    return ItemTracer(tracer_provider)


@contextlib.contextmanager
def no_span() -> Iterator[None]:
    yield None
