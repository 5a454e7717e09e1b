"""Typed events of a worker stream and the per-item :class:`ShardingContext`.

The sidecar streams ``SubscribeResponse`` messages; :func:`event_from_proto` turns each into one
of the frozen dataclasses below, which the workers' protocol core reads.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Dict, List, Optional, Tuple, Union

from ._proto import shardcar_pb2 as pb
from .config import JobConfig

__all__ = [
    "TriggerSource",
    "ShardItem",
    "Registered",
    "Assignment",
    "Trigger",
    "Revoke",
    "Shutdown",
    "ShutdownKind",
    "Lease",
    "Event",
    "ShardingContext",
    "event_from_proto",
]


class TriggerSource(str, enum.Enum):
    """Why an execution started (ElasticJob's execution sources, plus manual triggers and
    retries).

    ``RETRY`` is a failed item run again by the sidecar under the job's
    :class:`~shardcar.RetryPolicy` (``ShardingContext.attempt`` says which retry).

    ``UNKNOWN`` is a trigger whose source the sidecar left unset (``TRIGGER_SOURCE_UNSPECIFIED``,
    which it never sends) or sent as a value this client does not know: the work is still to be
    done, but nothing is known about why.
    """

    CRON = "CRON"
    MISFIRE = "MISFIRE"
    FAILOVER = "FAILOVER"
    MANUAL = "MANUAL"
    RETRY = "RETRY"
    RESIDENT = "RESIDENT"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def from_proto(cls, value: int) -> "TriggerSource":
        """The source a wire ``TriggerSource`` means; never ``CRON`` for an unset one."""
        return _SOURCE_FROM_PROTO.get(value, cls.UNKNOWN)


_SOURCE_FROM_PROTO: Dict[int, TriggerSource] = {
    pb.TRIGGER_SOURCE_CRON: TriggerSource.CRON,
    pb.TRIGGER_SOURCE_MISFIRE: TriggerSource.MISFIRE,
    pb.TRIGGER_SOURCE_FAILOVER: TriggerSource.FAILOVER,
    pb.TRIGGER_SOURCE_MANUAL: TriggerSource.MANUAL,
    pb.TRIGGER_SOURCE_RETRY: TriggerSource.RETRY,
    pb.TRIGGER_SOURCE_RESIDENT: TriggerSource.RESIDENT,
}


@dataclass(frozen=True)
class ShardItem:
    item: int
    parameter: str = ""


@dataclass(frozen=True)
class Registered:
    """First event of a stream: the instance id and the job's effective config."""

    instance_id: str
    config: Optional[JobConfig]


@dataclass(frozen=True)
class Assignment:
    """The items this instance owns now; ``epoch`` grows with every resharding."""

    job_name: str
    items: Tuple[ShardItem, ...]
    leader: bool
    epoch: int

    @property
    def item_numbers(self) -> Tuple[int, ...]:
        return tuple(i.item for i in self.items)


@dataclass(frozen=True)
class Trigger:
    """Run these items now; answer each with ``Complete`` or ``ReportFailure``."""

    execution_id: str
    task_id: str
    items: Tuple[ShardItem, ...]
    job_parameter: str
    sharding_total_count: int
    source: TriggerSource
    fire_time: Optional[datetime]
    fencing_tokens: Dict[int, int]
    #: W3C Trace Context of the execution's span in the sidecar (``shardcar.execution``); ``""``
    #: from a sidecar that does not send it.
    traceparent: str = ""
    tracestate: str = ""
    #: Which retry of its items this run is: 0 for a first run, 1 for the first retry (source
    #: ``RETRY``); a ``FAILOVER`` run that takes over a retry carries that retry's attempt.
    attempt: int = 0


@dataclass(frozen=True)
class Revoke:
    """Stop working on these items now; answers for them will be refused."""

    items: Tuple[int, ...]
    reason: str


class ShutdownKind(str, enum.Enum):
    """Why the sidecar ends a stream, and so what the worker does once it has ended
    (``Shutdown.kind`` in the proto)."""

    #: The sidecar is stopping (a restart, an upgrade, SIGTERM): subscribe again, with backoff,
    #: until it is back. A sidecar that does not say (``SHUTDOWN_KIND_UNSPECIFIED``) means this.
    DRAIN = "drain"
    #: An operator shut this instance down (``ShutdownInstance``, ``RemoveJob``, ElasticJob's
    #: console): do not subscribe to the job again.
    REMOTE = "remote"

    @classmethod
    def from_proto(cls, value: int) -> "ShutdownKind":
        return cls.REMOTE if value == pb.SHUTDOWN_KIND_REMOTE else cls.DRAIN


@dataclass(frozen=True)
class Shutdown:
    """The sidecar is ending the stream: a drain (it restarts) or a remote shutdown."""

    reason: str
    kind: ShutdownKind = ShutdownKind.DRAIN


@dataclass(frozen=True)
class Lease:
    """Work is allowed while the lease is valid: until the earlier of ``valid_for`` after its
    receipt and ``expires_at_wall`` on the host's wall clock.

    ``expires_at`` is that end on the ``time.monotonic()`` clock, as computed at receipt;
    ``expires_at_wall`` is the sidecar's ``Lease.expires_at`` in seconds since the epoch
    (``None`` from a sidecar that does not send it). A lease read after its ``expires_at_wall``
    (a renewal that waited in a socket buffer while the process was paused) is not valid.
    """

    valid_for: float
    sequence: int
    expires_at: float
    expires_at_wall: Optional[float] = None

    @property
    def valid(self) -> bool:
        if time.monotonic() >= self.expires_at:
            return False
        return self.expires_at_wall is None or time.time() < self.expires_at_wall


Event = Union[Registered, Assignment, Trigger, Revoke, Shutdown, Lease]


def event_from_proto(msg: pb.SubscribeResponse, job_name: str) -> Optional[Event]:
    """Converts one ``SubscribeResponse``; ``None`` for an event kind this client does not know."""
    kind = msg.WhichOneof("event")
    if kind == "registered":
        r = msg.registered
        return Registered(
            instance_id=r.instance_id,
            config=JobConfig.from_proto(r.config) if r.HasField("config") else None,
        )
    if kind == "assignment":
        a = msg.assignment
        return Assignment(
            job_name=job_name,
            items=tuple(ShardItem(i.item, i.parameter) for i in a.items),
            leader=a.leader,
            epoch=a.epoch,
        )
    if kind == "trigger":
        t = msg.trigger
        fire_time = None
        if t.HasField("fire_time"):
            fire_time = datetime.fromtimestamp(
                t.fire_time.seconds + t.fire_time.nanos / 1e9, tz=timezone.utc
            )
        return Trigger(
            execution_id=t.execution_id,
            task_id=t.task_id,
            items=tuple(ShardItem(i.item, i.parameter) for i in t.items),
            job_parameter=t.job_parameter,
            sharding_total_count=t.sharding_total_count,
            source=TriggerSource.from_proto(t.source),
            fire_time=fire_time,
            fencing_tokens=dict(t.fencing_tokens),
            traceparent=t.traceparent,
            tracestate=t.tracestate,
            attempt=t.attempt,
        )
    if kind == "revoke":
        return Revoke(items=tuple(msg.revoke.items), reason=msg.revoke.reason)
    if kind == "shutdown":
        return Shutdown(
            reason=msg.shutdown.reason, kind=ShutdownKind.from_proto(msg.shutdown.kind)
        )
    if kind == "lease":
        valid_for = msg.lease.valid_for.seconds + msg.lease.valid_for.nanos / 1e9
        received, received_wall = time.monotonic(), time.time()
        expires_at = received + valid_for
        expires_at_wall: Optional[float] = None
        if msg.lease.HasField("expires_at"):
            expires_at_wall = msg.lease.expires_at.seconds + msg.lease.expires_at.nanos / 1e9
            expires_at = min(expires_at, received + (expires_at_wall - received_wall))
        return Lease(
            valid_for=valid_for,
            sequence=msg.lease.sequence,
            expires_at=expires_at,
            expires_at_wall=expires_at_wall,
        )
    return None


#: A context's link to the protocol core: ``(cancelled, seconds until the lease runs out)``,
#: evaluated on the core's clock at the moment of the call. ``cancelled`` is ``None`` when the
#: core no longer tracks the item (its handler returned).
Probe = Callable[[], Tuple[Optional[bool], Optional[float]]]

# Guards each context's cancel callbacks; held only to swap a list, never across a call.
_CANCEL_LOCK = threading.Lock()

# Longest sleep between two checks of the lease inside ``wait``: a wall-clock step is noticed
# within this long even while the monotonic deadline is far.
_MAX_STEP = 1.0


@dataclass
class ShardingContext:
    """What a handler gets for one item of one execution (ElasticJob's ``ShardingContext``).

    ``cancelled`` turns true when the item is revoked, the lease runs out, the stream is lost or
    the worker is forced to stop; a handler that sees it should return soon. A cancelled item is
    never answered: the worker declines it (gives it back) once the handler returns.

    ``cancelled``, :meth:`wait` and :meth:`wait_async` compare the clock with the lease deadline
    at the moment they are called, so the first check after the process was paused (SIGSTOP, a
    long GC, a swapped-out page) already reports a lease that ran out meanwhile, before any
    timer thread or task has had a chance to run.
    """

    job_name: str
    task_id: str
    execution_id: str
    sharding_total_count: int
    job_parameter: str
    sharding_item: int
    sharding_parameter: str
    source: TriggerSource
    fencing_token: Optional[int]
    fire_time: Optional[datetime] = None
    instance_id: str = ""
    #: The trigger's W3C Trace Context (the sidecar's ``shardcar.execution`` span): with the
    #: ``otel`` extra the handler runs in a child span of it (see
    #: ``WorkerOptions(tracing=...)``).
    traceparent: str = field(default="", repr=False)
    tracestate: str = field(default="", repr=False)
    #: Which run of the item this is under the job's retry policy: 0 for a first run (a cron
    #: fire, a trigger-once, a catch-up), 1 for the first retry (``source`` is ``RETRY``), and
    #: so on; a ``FAILOVER`` run that takes over a retry carries that retry's attempt.
    attempt: int = 0
    cancel_event: threading.Event = field(default_factory=threading.Event, repr=False)
    cancel_reason: str = field(default="", repr=False)
    _probe: Optional[Probe] = field(default=None, repr=False, compare=False)
    _on_cancel: List[Callable[[], None]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    @property
    def cancelled(self) -> bool:
        """Whether the item is cancelled, the lease being checked now."""
        return self._poll()[0]

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Sleeps up to ``timeout`` seconds; returns ``True`` as soon as the item is cancelled.

        For sync handlers (it blocks the calling thread). The lease is checked when called and
        again when it is due to run out, whatever the worker's other threads are doing.
        """
        end = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            # The clock is read before the lease is checked, never after: a pause (SIGSTOP)
            # between the two is then seen by the check, instead of ending the wait with
            # False on a check made before it.
            now = time.monotonic()
            cancelled, step = self._poll()
            if cancelled:
                return True
            if end is not None:
                remaining = end - now
                if remaining <= 0:
                    return False
                step = min(step, remaining)
            if self.cancel_event.wait(step):
                return True

    async def wait_async(self, timeout: Optional[float] = None) -> bool:
        """The asyncio form of :meth:`wait`: ``await ctx.wait_async(5)``.

        In a ``shardcar.aio`` worker a cancelled item's task is also cancelled, so this may
        raise ``asyncio.CancelledError`` instead of returning ``True``; both mean: stop now.
        """
        loop = asyncio.get_running_loop()
        fired = asyncio.Event()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(fired.set)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        with _CANCEL_LOCK:
            self._on_cancel.append(wake)
        try:
            end = None if timeout is None else time.monotonic() + max(0.0, timeout)
            while True:
                now = time.monotonic()  # before the check, as in wait()
                cancelled, step = self._poll()
                if cancelled:
                    return True
                if end is not None:
                    remaining = end - now
                    if remaining <= 0:
                        return False
                    step = min(step, remaining)
                try:
                    await asyncio.wait_for(fired.wait(), step)
                except asyncio.TimeoutError:
                    pass
        finally:
            with _CANCEL_LOCK:
                if wake in self._on_cancel:
                    self._on_cancel.remove(wake)

    def _poll(self) -> Tuple[bool, float]:
        """``(cancelled, how long to sleep before the next check)``."""
        step = _MAX_STEP
        probe = self._probe
        if probe is not None:
            cancelled, lease_left = probe()
            if cancelled:
                return True, 0.0
            if lease_left is not None:
                # Wake just after the lease would run out, to check it again then.
                step = min(step, max(0.0, lease_left) + 0.001)
        return self.cancel_event.is_set(), step

    def _watch_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Calls ``callback`` when the item is cancelled (now, if it already is); returns the
        function that stops watching. ``callback`` runs on whichever thread cancels the item."""
        with _CANCEL_LOCK:
            already = self.cancel_event.is_set()
            if not already:
                self._on_cancel.append(callback)
        if already:
            callback()

        def unwatch() -> None:
            with _CANCEL_LOCK:
                if callback in self._on_cancel:
                    self._on_cancel.remove(callback)

        return unwatch

    def _cancel(self, reason: str) -> None:
        with _CANCEL_LOCK:
            if self.cancel_event.is_set():
                return
            self.cancel_reason = reason
            self.cancel_event.set()
            callbacks, self._on_cancel = self._on_cancel, []
        for callback in callbacks:
            callback()


def contexts_for(trigger: Trigger, job_name: str, instance_id: str) -> Tuple[ShardingContext, ...]:
    """One context per item of ``trigger``."""
    return tuple(
        ShardingContext(
            job_name=job_name,
            task_id=trigger.task_id,
            execution_id=trigger.execution_id,
            sharding_total_count=trigger.sharding_total_count,
            job_parameter=trigger.job_parameter,
            sharding_item=si.item,
            sharding_parameter=si.parameter,
            source=trigger.source,
            fencing_token=trigger.fencing_tokens.get(si.item),
            fire_time=trigger.fire_time,
            instance_id=instance_id,
            traceparent=trigger.traceparent,
            tracestate=trigger.tracestate,
            attempt=trigger.attempt,
        )
        for si in trigger.items
    )
