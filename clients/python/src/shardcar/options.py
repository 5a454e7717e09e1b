"""A worker's options, shared by the sync and asyncio workers: :class:`WorkerOptions`.

``Worker(target, options=WorkerOptions(...))``: the target is the one argument most workers
set; everything else is here, each default written once. The Java client's builder has the
same options under the same names in camelCase (``item_concurrency`` is ``itemConcurrency``),
with the same meaning and defaults.
"""

from __future__ import annotations

import dataclasses
import enum
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Tuple

from ._common import resolve_max_concurrent_executions

__all__ = ["WorkerOptions", "InstanceSuffix"]


class InstanceSuffix(str, enum.Enum):
    """When a worker sends an ``instance_suffix``, so that its instance id is
    ``{sidecar ip}@-@{pid}-{8 random hex}`` instead of ``{sidecar ip}@-@{pid}``."""

    #: In a container (pid 1, ``/.dockerenv`` or ``/run/.containerenv`` exists, or
    #: ``KUBERNETES_SERVICE_HOST`` is set), where pids of workers sharing a sidecar collide.
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


@dataclass(frozen=True)
class WorkerOptions:
    """How a worker runs its jobs. Every field is optional; the defaults are these.

    ``ValueError`` when a value is out of range, when the options are made.
    """

    #: The executor size: how many items of one job run at once, whichever execution they
    #: belong to (one pool per job). ``@worker.job(..., item_concurrency=N)`` overrides it.
    item_concurrency: int = 8
    #: How many executions of one job the worker runs at once, as it tells the sidecar. While
    #: it runs fewer, the sidecar also sends it FAILOVER runs (a crashed peer's items) and
    #: MISFIRE catch-ups, run beside what runs; cron fires and trigger-once requests still come
    #: only when it runs nothing. ``None``: the executor size (at most 1024); ``1``: ElasticJob's
    #: one execution at a time. 1 to 1024, and at most ``item_concurrency``.
    max_concurrent_executions: Optional[int] = None
    #: The instance id, used as it is; empty: ``{sidecar ip}@-@{pid}`` (see ``instance_suffix``).
    instance_id: str = ""
    #: When to send an instance suffix ``{pid}-{8 random hex}``, chosen once per worker and kept
    #: across reconnects. Ignored with an explicit ``instance_id``.
    instance_suffix: InstanceSuffix = InstanceSuffix.AUTO
    #: Labels sent with every subscription.
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Seconds the first subscription may keep failing before ``run()`` raises
    #: :class:`~shardcar.SidecarUnavailableError`. Once registered there is no deadline.
    connect_timeout: float = 30.0
    #: ``(initial, max)`` seconds between subscriptions after a lost stream or a drain: the
    #: initial delay doubles up to the max, with jitter, and starts over once registered.
    reconnect_backoff: Tuple[float, float] = (0.1, 5.0)
    #: Seconds each ``Complete``, ``ReportFailure`` or ``Decline`` call may take; one that runs
    #: out is sent again while its stream is open.
    answer_timeout: float = 10.0
    #: Seconds a stopping worker (``stop()``, Ctrl-C, SIGTERM) lets running items finish and be
    #: answered before it cancels them.
    drain_timeout: float = 30.0
    #: After a sidecar drain (a restart: ``Shutdown`` of kind DRAIN) the job subscribes again
    #: once the stream has ended, until the sidecar is back; ``True`` stops it instead, as a
    #: remote shutdown always does.
    stop_on_drain: bool = False
    #: With opentelemetry installed (the ``otel`` extra), each handler runs in a
    #: ``shardcar.handler`` span, a child of the sidecar's execution span; ``False`` turns it off.
    tracing: bool = True
    #: Where the handler spans go; ``None``: the global tracer provider.
    tracer_provider: Optional[Any] = None
    #: gRPC channel options (``"grpc.keepalive_time_ms"``, ...) over the client's own.
    channel_options: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.item_concurrency, bool) or not isinstance(self.item_concurrency, int) \
                or self.item_concurrency < 1:
            raise ValueError(f"item_concurrency must be at least 1, got {self.item_concurrency!r}")
        if self.max_concurrent_executions is not None:
            resolve_max_concurrent_executions(self.max_concurrent_executions, self.item_concurrency)
        try:
            suffix = InstanceSuffix(self.instance_suffix)
        except ValueError:
            raise ValueError(
                f"instance_suffix must be one of {[s.value for s in InstanceSuffix]}, "
                f"got {self.instance_suffix!r}"
            ) from None
        object.__setattr__(self, "instance_suffix", suffix)
        if self.instance_id and suffix is InstanceSuffix.ALWAYS:
            raise ValueError(
                "instance_id and instance_suffix=ALWAYS exclude each other: an explicit "
                "instance_id is used as it is"
            )
        initial, longest = self.reconnect_backoff
        if not 0 < initial <= longest:
            raise ValueError(
                f"reconnect_backoff must be (initial, max) with 0 < initial <= max, got "
                f"{self.reconnect_backoff!r}"
            )
        object.__setattr__(self, "reconnect_backoff", (float(initial), float(longest)))
        for name in ("connect_timeout", "answer_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if not self.drain_timeout >= 0:
            raise ValueError(f"drain_timeout must not be negative, got {self.drain_timeout!r}")
        object.__setattr__(self, "labels", dict(self.labels))
        object.__setattr__(self, "channel_options", dict(self.channel_options))


# The keywords ``Worker`` took before :class:`WorkerOptions` (0.1), accepted for one release.
_RENAMED = {
    "max_concurrency": "item_concurrency",
    "unique_instance": "instance_suffix",
    "backoff_initial": "reconnect_backoff",
    "backoff_max": "reconnect_backoff",
    "exit_on_shutdown": "stop_on_drain",
}
_MOVED = frozenset(
    {
        "max_concurrent_executions",
        "instance_id",
        "labels",
        "connect_timeout",
        "answer_timeout",
        "drain_timeout",
        "stop_on_drain",
        "tracing",
        "tracer_provider",
    }
)


def deprecated(message: str, stacklevel: int) -> None:
    """A ``DeprecationWarning`` of this client (their texts start with ``shardcar:``)."""
    warnings.warn(f"shardcar: {message}", DeprecationWarning, stacklevel=stacklevel + 1)


def options_with_legacy(options: Any, legacy: Mapping[str, Any], stacklevel: int) -> WorkerOptions:
    """The options of a worker made as in 0.1: ``Worker(target, connect_timeout=5,
    max_concurrency=4, options={"grpc...": ...})``. Each old keyword still works, with a
    ``DeprecationWarning`` naming its :class:`WorkerOptions` field; ``TypeError`` for an unknown
    one. ``stacklevel`` is that of the caller of ``Worker(...)``, as seen from here."""
    changes: dict = {}
    if options is not None and not isinstance(options, WorkerOptions):
        if not isinstance(options, Mapping):
            raise TypeError(f"options must be a WorkerOptions, got {type(options).__name__}")
        deprecated("Worker(options=<gRPC channel options>) is deprecated: use "
                   "Worker(options=WorkerOptions(channel_options=...))", stacklevel + 1)
        changes["channel_options"] = options
        options = None
    base = options if options is not None else WorkerOptions()
    backoff = list(base.reconnect_backoff)
    for key, value in legacy.items():
        if key in _RENAMED:
            new = _RENAMED[key]
            extra = ""
            if key == "exit_on_shutdown":
                extra = (" (a remote shutdown always stops the job; a drain, a sidecar restart, "
                         "subscribes again unless stop_on_drain=True)")
            deprecated(f"Worker({key}=...) is deprecated: use WorkerOptions({new}=...){extra}",
                       stacklevel + 1)
            if key == "unique_instance":
                value = {None: InstanceSuffix.AUTO, True: InstanceSuffix.ALWAYS,
                         False: InstanceSuffix.NEVER}[value]
            elif key == "backoff_initial":
                backoff[0] = value
                value = tuple(backoff)
            elif key == "backoff_max":
                backoff[1] = value
                value = tuple(backoff)
            changes[new] = value
        elif key in _MOVED:
            deprecated(f"Worker({key}=...) is deprecated: use "
                       f"Worker(options=WorkerOptions({key}=...))", stacklevel + 1)
            changes[key] = value
        else:
            raise TypeError(f"Worker() got an unexpected keyword argument {key!r}")
    if "reconnect_backoff" in changes:
        changes["reconnect_backoff"] = tuple(backoff)
    return dataclasses.replace(base, **changes) if changes else base
