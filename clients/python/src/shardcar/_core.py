"""The worker contract for one job registration, decided without I/O: :class:`ProtocolCore`.

The sync worker (``worker.py``) and the asyncio worker (``aio.py``) are drivers of this core:
they own the threads or tasks, the gRPC calls and the timers, feed the core its inputs, and
perform the outputs it returns. The core owns every rule of the contract in
``proto/shardcar/v1/shardcar.proto`` (rules 1-5 of its header), so both drivers, and the
table of ``clients/protocol-cases/cases.json`` run against it with a fake clock, mean the same
thing by each rule:

* **Streams.** Every ``Subscribe`` is a new *generation*. When a stream ends, its running items
  are cancelled and every answer of its executions is dropped (pending resends too): the
  sidecar refuses them and hands the items to others.
* **Leases.** The latest lease is valid until the earlier of ``valid_for`` after its receipt
  (monotonic clock) and its ``expires_at`` (wall clock); one read after its ``expires_at`` is
  void. Validity is evaluated at every input on the core's clock, so a pause of the process
  is noticed by the first input after it, whichever that is.
* **Triggers** run only under a valid lease; one that arrives without one (or after a
  ``Shutdown``, or while the worker stops) is declined at once, never queued.
* **Concurrent executions.** Nothing here assumes one execution at a time: every run is keyed
  by (execution, item), and each item is answered on its own. A worker that subscribes with
  ``max_concurrent_executions`` N > 1 may be sent a FAILOVER or MISFIRE trigger while up to N - 1
  executions run; its items start at once, beside the others (a revoke, a lease lapse, the end
  of the stream cancel the runs of every execution they concern).
* **Lease lapse.** Every running item is cancelled; once its handler returns it is declined,
  never answered.
* **Revoke.** Those items are cancelled and declined once their handlers return.
* **Resident jobs** (``resident``): every trigger is a hold of one item (source ``RESIDENT``),
  which the handler runs until it is cancelled: by a ``Revoke`` or a lease lapse as any run, and
  also when the worker stops or the sidecar sends ``Shutdown`` (a hold never finishes by
  itself, so it is given back at once for its next holder). A cancelled hold is declined; one
  whose handler returned by itself is answered ``Complete``, one that raised ``ReportFailure``
  (the sidecar starts it again after a backoff). When the worker stops, though, a hold is given
  back by the end of the stream, which the driver closes once every handler has returned (the
  sidecar releases the items of a stream its worker ended at once), and neither it nor a hold
  that arrives meanwhile is declined: a decline the sidecar did not ask for would only have it
  start the hold again on the same worker, after its restart backoff. A registration whose effective config (in ``Registered``) is not of its kind, resident
  or not, stops with :class:`~shardcar.InvalidJobConfigError` naming ``resident``.
* **Shutdown.** New triggers are declined; running items finish and are answered. Once the
  stream has ended, after a drain (the sidecar restarts; ``ShutdownKind.DRAIN``, also when the
  sidecar does not say) the worker subscribes again with the reconnect backoff until the
  sidecar is back; after a remote shutdown (``REMOTE``: an operator's decision) the job stops
  for good. ``stop_on_drain`` makes a drain stop the job too.
* **Reconnect** (:class:`ReconnectPolicy`). Every end of a stream is decided, in this order:
  stop after a requested stop; stop with a fatal error (the sidecar refused the job,
  INVALID_ARGUMENT or NOT_FOUND, at any time; the first registration failed with a
  non-transient error, or did not come within ``connect_timeout``); stop after a remote
  ``Shutdown`` (or any, with ``stop_on_drain``); otherwise subscribe again after a backoff.
* **Answers** (``Complete``, ``ReportFailure``, ``Decline``) are idempotent: after a transport
  error (:func:`is_transport_failure`) they are sent again with backoff while the stream that
  delivered the trigger is open, and dropped once it has ended. Any other error is the
  sidecar's refusal: final, logged, never resent. A call is never repeated while its result is
  pending.

Inputs are methods (``stream_opened``, ``stream_ended``, ``on_event``, ``handler_done``,
``answer_result``, ``check``, ``tick``, ``request_stop``, ``cancel_all``); each returns the
outputs to perform, in order: :class:`StartItem`, :class:`CancelItem`, :class:`SendCall`,
:class:`Stop`, :class:`Reconnect`. A driver only performs them: it runs handlers, sends calls,
sleeps, subscribes when told to, and never decides anything itself. The core marks a
cancelled item's :class:`~shardcar.events.ShardingContext` itself (so ``ctx.cancelled`` is
right at once); ``CancelItem`` tells a driver to interrupt the handler where it can (asyncio
tasks). The core is thread-safe: one lock, held only inside a
method, never while a driver performs outputs.
"""

from __future__ import annotations

import dataclasses
import enum
import random
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import grpc

from ._common import is_transport_failure, log, truncate_utf8
from .errors import (
    InvalidJobConfigError,
    JobNotFoundError,
    ShardcarError,
    SidecarUnavailableError,
)
from .events import (
    Event,
    Lease,
    Registered,
    Revoke,
    ShardingContext,
    Shutdown,
    ShutdownKind,
    Trigger,
    contexts_for,
)

__all__ = [
    "Clock",
    "SystemClock",
    "SYSTEM_CLOCK",
    "ProtocolCore",
    "Outcome",
    "Rpc",
    "AnswerCall",
    "StartItem",
    "CancelItem",
    "SendCall",
    "Stop",
    "Reconnect",
    "Output",
    "ReconnectPolicy",
    "is_transport_failure",
    "is_transient",
]

Key = Tuple[str, int]

# How many (execution, item) pairs of the current stream are remembered, to recognise a
# repeated trigger after its item finished.
_SEEN_LIMIT = 4096


class Clock:
    """The two clocks of the host: ``monotonic()`` and ``wall()`` (seconds since the epoch)."""

    def monotonic(self) -> float:
        raise NotImplementedError

    def wall(self) -> float:
        raise NotImplementedError


class SystemClock(Clock):
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


SYSTEM_CLOCK = SystemClock()


class Rpc(str, enum.Enum):
    """The three answers a worker sends."""

    COMPLETE = "complete"
    REPORT_FAILURE = "report_failure"
    DECLINE = "decline"


class Outcome(str, enum.Enum):
    """How an item's handler ended."""

    COMPLETE = "complete"  # returned
    FAILURE = "failure"  # raised
    STOPPED = "stopped"  # did not run to an outcome (cancelled before or while it ran)


@dataclass(frozen=True)
class AnswerCall:
    """One answer to send. ``id`` stays the same across resends; ``attempt`` counts them.

    ``text`` is ``ReportFailure.error`` or ``Decline.reason`` (at most 16384 bytes of UTF-8).
    """

    id: int
    rpc: Rpc
    instance_id: str
    execution_id: str
    items: Tuple[int, ...]
    text: str
    generation: int
    attempt: int = 1


@dataclass(frozen=True)
class StartItem:
    """Run this item's handler now."""

    ctx: ShardingContext


@dataclass(frozen=True)
class CancelItem:
    """This item's handler is cancelled (its context already says so): interrupt it if possible."""

    ctx: ShardingContext
    reason: str


@dataclass(frozen=True)
class SendCall:
    """Send this answer, then report its result with :meth:`ProtocolCore.answer_result`."""

    call: AnswerCall


@dataclass(frozen=True)
class Stop:
    """The job stops: its stream has ended after a ``Shutdown`` or a requested stop (``error``
    ``None``), or with an error that ends the worker (``Worker.run`` raises ``error``)."""

    reason: str
    error: Optional[ShardcarError] = None


@dataclass(frozen=True)
class Reconnect:
    """Subscribe again after ``delay`` seconds (``nominal`` before jitter)."""

    delay: float
    nominal: float
    reason: str


Output = Union[StartItem, CancelItem, SendCall, Stop, Reconnect]


# Statuses of a first subscription that are tried again until the first-connect deadline: the
# sidecar may be starting, restarting or busy. UNAVAILABLE is :class:`SidecarUnavailableError`.
_TRANSIENT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


def is_transient(error: ShardcarError) -> bool:
    """Whether a first subscription that failed with ``error`` is worth trying again
    (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED)."""
    return isinstance(error, SidecarUnavailableError) or error.code in _TRANSIENT_CODES


class ReconnectPolicy:
    """When a job subscribes again after its stream ended, and when it gives up. No I/O.

    :meth:`fatal` is asked first (after a requested stop, before a remote ``Shutdown``):

    * The sidecar refused the job, at any time (INVALID_ARGUMENT:
      :class:`~shardcar.InvalidJobConfigError`; NOT_FOUND: :class:`~shardcar.JobNotFoundError`):
      the job was removed or its config is refused, trying again cannot help.
    * Before the first registration, every error but a transient one (:func:`is_transient`:
      UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED), e.g. ALREADY_EXISTS (the
      instance id is live elsewhere).
    * The first connection has a deadline, ``connect_timeout`` from the first subscription: a
      job never registered by then stops with :class:`~shardcar.SidecarUnavailableError` (the
      stream's own one when it ended with UNAVAILABLE), whether its stream ended with a
      transient error or normally (the sidecar may be restarting).

    Otherwise (:meth:`next_delay`) it reconnects after a backoff: ``backoff_initial``, doubling
    up to ``backoff_max``, back to ``backoff_initial`` after each registration; the delay is
    drawn by ``jitter(low, high)`` from ``[nominal / 2, nominal]``. Once registered there is no
    deadline: every other end of a stream is retried forever.
    """

    def __init__(
        self,
        *,
        connect_timeout: float = 10.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        target: str = "",
        jitter: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.target = target
        self._jitter = jitter
        self._deadline: Optional[float] = None
        self._registered = False
        self._nominal = 0.0  # the last delay before jitter; 0: start over

    @property
    def registered(self) -> bool:
        """Whether any stream of the job has been registered."""
        return self._registered

    def connecting(self, now: float) -> None:
        """A subscription starts; the first one starts the connect deadline."""
        if self._deadline is None:
            self._deadline = now + self.connect_timeout

    def on_registered(self) -> None:
        self._registered = True
        self._nominal = 0.0

    def fatal(
        self, error: Optional[ShardcarError], now: float, reason: str = ""
    ) -> Optional[ShardcarError]:
        """The error that ends the job, of a stream that ended at ``now`` with ``error``
        (``None``: the sidecar ended it normally), or ``None`` to go on. ``reason`` says what
        ended the stream, for the deadline's error."""
        if isinstance(error, (InvalidJobConfigError, JobNotFoundError)):
            return error
        if self._registered:
            return None
        if error is not None and not is_transient(error):
            return error
        if not self._past_deadline(now):
            return None
        if isinstance(error, SidecarUnavailableError):
            return error
        unavailable = SidecarUnavailableError(
            f"no registration from the sidecar at {self.target!r} within "
            f"{self.connect_timeout}s: {reason}"
        )
        unavailable.__cause__ = error
        return unavailable

    def next_delay(self) -> Tuple[float, float]:
        """The next reconnect delay: ``(with jitter, nominal)``; each call doubles the next."""
        if self._nominal == 0:
            self._nominal = self.backoff_initial
        else:
            self._nominal = min(self._nominal * 2, self.backoff_max)
        return self._jitter(self._nominal / 2, self._nominal), self._nominal

    def _past_deadline(self, now: float) -> bool:
        return self._deadline is not None and now >= self._deadline


@dataclass
class _Lease:
    received: float  # monotonic
    valid_for: float
    expires_wall: Optional[float]
    sequence: int


@dataclass
class _Run:
    """An item whose handler has been started and has not returned yet."""

    ctx: ShardingContext
    generation: int
    cancelled: bool = False


@dataclass
class _Pending:
    """An answer whose result is not known yet (in flight), or that waits to be sent again."""

    call: AnswerCall
    retry_at: Optional[float] = None  # None: in flight


class ProtocolCore:
    """The protocol of one job registration (see the module docs). Thread-safe."""

    def __init__(
        self,
        job_name: str,
        clock: Clock = SYSTEM_CLOCK,
        *,
        stop_on_drain: bool = False,
        retry_initial: float = 0.1,
        retry_max: float = 5.0,
        reconnect: Optional[ReconnectPolicy] = None,
        max_concurrent_executions: Optional[int] = None,
        resident: bool = False,
    ) -> None:
        self.job_name = job_name
        #: Whether this registration holds a resident job's items (see the module docs).
        self.resident = resident
        # What the worker told the sidecar (None: not checked). A trigger that arrives while
        # that many executions already run is still run, and logged: the sidecar sent too many.
        self.max_concurrent_executions = max_concurrent_executions
        self.clock = clock
        #: Whether a drain (the sidecar restarts) stops the job as a remote shutdown does,
        #: instead of subscribing again once the stream has ended.
        self.stop_on_drain = stop_on_drain
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.reconnect = reconnect if reconnect is not None else ReconnectPolicy()
        # Held only inside a method of this class, never while outputs are performed.
        self._lock = threading.RLock()
        self._generation = 0
        self._open = False
        self._instance_id = ""
        self._lease: Optional[_Lease] = None
        self._lapse_logged = False
        # The kind of the `Shutdown` received on the current stream, if any.
        self._shutdown: Optional[ShutdownKind] = None
        self._stopping = False  # the worker was asked to stop
        self._stopped = False  # `Stop` was produced
        self._stop_error: Optional[ShardcarError] = None  # the error of a fatal `Stop`
        self._runs: Dict[Key, _Run] = {}
        self._seen: "OrderedDict[Key, None]" = OrderedDict()
        self._pending: Dict[int, _Pending] = {}
        self._next_call = 0

    # -- queries ---------------------------------------------------------------------------------
    @property
    def generation(self) -> int:
        """The current stream's number (0 before the first)."""
        return self._generation

    @property
    def instance_id(self) -> str:
        return self._instance_id

    @property
    def stopped(self) -> bool:
        """Whether :class:`Stop` was produced."""
        return self._stopped

    @property
    def stop_error(self) -> Optional[ShardcarError]:
        """The error the job stopped with (``Worker.run`` raises it), if any."""
        return self._stop_error

    @property
    def stream_open(self) -> bool:
        return self._open

    def lease_valid(self) -> bool:
        with self._lock:
            return self._lease_end(*self._now()) is not None

    @property
    def winding_down(self) -> Optional[str]:
        """Why no new work starts on the current stream (the worker was asked to stop, or the
        sidecar sent ``Shutdown``), or ``None``. Running items are still to finish and be
        answered; a streaming dataflow item stops fetching."""
        with self._lock:
            if self._stopping:
                return "the worker is stopping"
            if self._shutdown is not None:
                return "the sidecar sent Shutdown"
            return None

    def running(self) -> int:
        """How many handlers have been started and not returned."""
        with self._lock:
            return len(self._runs)

    def running_executions(self) -> List[str]:
        """The executions of the current stream with a handler running and not cancelled, oldest
        first (more than one when the sidecar sent FAILOVER or MISFIRE work beside a run)."""
        with self._lock:
            return self._active_executions()

    def idle(self) -> bool:
        """No handler running and no answer of the current stream unsettled (for draining)."""
        with self._lock:
            return not self._runs and not (
                self._open
                and any(p.call.generation == self._generation for p in self._pending.values())
            )

    def next_deadline(self) -> Optional[float]:
        """When :meth:`tick` has something to do next (monotonic clock), or ``None``."""
        with self._lock:
            now, wall = self._now()
            deadlines = [p.retry_at for p in self._pending.values() if p.retry_at is not None]
            if self._active_runs():
                end = self._lease_end(now, wall)
                deadlines.append(now if end is None else end)
            return min(deadlines) if deadlines else None

    def timer_wait(self, cap: float = 0.5) -> float:
        """How long a driver's timer may sleep before calling :meth:`tick` (at most ``cap``)."""
        deadline = self.next_deadline()
        if deadline is None:
            return cap
        return min(cap, max(0.0, deadline - self.clock.monotonic()) + 0.001)

    # -- inputs: streams -------------------------------------------------------------------------
    def stream_opened(self) -> List[Output]:
        """A new ``Subscribe`` stream: everything of an earlier one is over."""
        with self._lock:
            out: List[Output] = []
            if self._open:
                out += self._end_stream("the stream was replaced by a new one")
            self.reconnect.connecting(self.clock.monotonic())
            self._generation += 1
            self._open = True
            self._instance_id = ""
            self._lease = None
            self._lapse_logged = False
            self._shutdown = None
            self._seen.clear()
            return out

    def stream_ended(
        self, reason: str = "", error: Optional[ShardcarError] = None
    ) -> List[Output]:
        """The stream ended: the sidecar closed it (``error`` ``None``), the call failed with
        ``error`` (the connection broke, the sidecar refused the subscription), or the worker
        closed it (``reason`` says so). Ends with :class:`Stop` or :class:`Reconnect` (nothing
        more once stopped)."""
        with self._lock:
            now = self.clock.monotonic()
            if not reason:
                reason = str(error) if error is not None else "stream ended by the sidecar"
            out: List[Output] = []
            if self._open:
                out += self._end_stream(reason)
            if self._stopped:
                return out
            # The order of the README of clients/protocol-cases: a requested stop, the fatal
            # errors (refusals, the first-connect deadline), a remote Shutdown (or a drain with
            # stop_on_drain), else a reconnect (after a drain too: the sidecar is restarting).
            if self._stopping:
                log.info(
                    "job %s: stream ended after stop requested; the worker stops", self.job_name
                )
                self._stopped = True
                return out + [Stop("stop requested")]
            fatal = self.reconnect.fatal(error, now, reason)
            if fatal is not None:
                log.warning("job %s: %s; the worker stops", self.job_name, fatal)
                self._stopped = True
                self._stop_error = fatal
                return out + [Stop(str(fatal), fatal)]
            kind = self._shutdown
            if kind is ShutdownKind.REMOTE or (kind is not None and self.stop_on_drain):
                log.info(
                    "job %s: stream ended after the sidecar sent Shutdown (%s); the worker stops",
                    self.job_name,
                    kind.value,
                )
                self._stopped = True
                return out + [Stop(f"the sidecar sent Shutdown ({kind.value})")]
            if kind is ShutdownKind.DRAIN:
                reason = f"the sidecar drained ({reason}); subscribing again until it is back"
            delay, nominal = self.reconnect.next_delay()
            log.warning("job %s: %s; reconnecting in %.2fs", self.job_name, reason, delay)
            return out + [Reconnect(delay, nominal, reason)]

    def request_stop(self) -> List[Output]:
        """The worker is stopping: no new work on any stream; running items finish and are
        answered. :class:`Stop` follows once the stream has ended (at once if none is open)."""
        with self._lock:
            self._stopping = True
            if not self._open and not self._stopped:
                self._stopped = True
                return [Stop("stop requested")]
            if self.resident:
                return self._give_back("the worker is stopping")
            return []

    # -- inputs: events --------------------------------------------------------------------------
    def on_event(self, event: Event) -> List[Output]:
        """One event of the current stream (``Assignment`` changes nothing here)."""
        with self._lock:
            now, wall = self._now()
            out = self._check_lapse(now, wall)
            if isinstance(event, Registered):
                self._instance_id = event.instance_id
                self.reconnect.on_registered()
                log.info("job %s: registered as %s", self.job_name, event.instance_id)
                out += self._check_kind(event)
            elif isinstance(event, Lease):
                self._on_lease(event, now, wall)
            elif isinstance(event, Trigger):
                out += self._on_trigger(event, now, wall)
            elif isinstance(event, Revoke):
                out += self._on_revoke(event)
            elif isinstance(event, Shutdown):
                self._shutdown = event.kind
                log.info(
                    "job %s: the sidecar sent Shutdown (%s, %s): no new work; running items finish",
                    self.job_name,
                    event.kind.value,
                    event.reason or "no reason given",
                )
                if self.resident:
                    out += self._give_back("the sidecar sent Shutdown")
            return out

    def _check_kind(self, registered: Registered) -> List[Output]:
        """A registration of the wrong kind for its job's effective config stops: a resident
        handler would hold a cron job's runs forever, a plain one end every hold at once."""
        config = registered.config
        if config is None or config.resident == self.resident or self._stopped:
            return []
        if self.resident:
            why = (f"job {self.job_name!r} is not resident (its stored config says "
                   f"resident=False): register its handler with @worker.job, or subscribe with "
                   f"a resident JobConfig and overwrite=True to make it resident")
        else:
            why = (f"job {self.job_name!r} is resident (its stored config says resident=True): "
                   f"register its handler with @worker.resident")
        error = InvalidJobConfigError(why, field="resident")
        log.warning("job %s: %s; the worker stops", self.job_name, why)
        self._stopping = True
        self._stopped = True
        self._stop_error = error
        return [Stop(why, error)]

    def _give_back(self, why: str) -> List[Output]:
        """Cancels every hold of a resident job, to be declined once its handler returned."""
        out: List[Output] = []
        for run in list(self._runs.values()):
            out += self._cancel(run, f"{why}: the resident item is given back")
        if out:
            log.info("job %s: %s; giving back %d held item(s)", self.job_name, why, len(out))
        return out

    def _on_lease(self, lease: Lease, now: float, wall: float) -> None:
        self._lease = _Lease(now, lease.valid_for, lease.expires_at_wall, lease.sequence)
        if self._lease_end(now, wall) is None:
            log.warning(
                "job %s: lease %d read after it expired (it waited while the process was "
                "paused): void",
                self.job_name,
                lease.sequence,
            )
        else:
            self._lapse_logged = False

    def _on_trigger(self, trigger: Trigger, now: float, wall: float) -> List[Output]:
        contexts = [
            ctx
            for ctx in contexts_for(trigger, self.job_name, self._instance_id)
            if (ctx.execution_id, ctx.sharding_item) not in self._seen
        ]
        if not contexts:
            log.debug("job %s: repeated trigger %s ignored", self.job_name, trigger.execution_id)
            return []
        for ctx in contexts:
            self._remember((ctx.execution_id, ctx.sharding_item))
        refusal = self._refusal(now, wall)
        if refusal is not None and self.resident and self._stopping and self._open:
            log.info(
                "job %s: hold %s of items %s not run (the worker is stopping); given back when "
                "the stream ends",
                self.job_name,
                trigger.execution_id,
                [c.sharding_item for c in contexts],
            )
            return []
        if refusal is not None:
            return self._decline(trigger.execution_id, [c.sharding_item for c in contexts], refusal)
        out: List[Output] = []
        busy: List[int] = []
        limit = self.max_concurrent_executions
        active = self._active_executions()
        if limit is not None and len(active) >= limit:
            log.warning(
                "job %s: trigger %s (%s) arrived while %d execution(s) run %s, but the worker "
                "subscribed with max_concurrent_executions=%d; running it anyway",
                self.job_name,
                trigger.execution_id,
                trigger.source.name,
                len(active),
                active,
                limit,
            )
        running_items = {run.ctx.sharding_item for run in self._runs.values()}
        for ctx in contexts:
            if ctx.sharding_item in running_items:
                # A handler of an earlier execution of this item (cancelled: revoked, lapsed,
                # or from a stream that ended) has not returned yet: never run an item twice.
                busy.append(ctx.sharding_item)
                continue
            self._runs[(ctx.execution_id, ctx.sharding_item)] = _Run(ctx, self._generation)
            out.append(StartItem(ctx))
        if busy:
            out += self._decline(
                trigger.execution_id,
                busy,
                "the handler of an earlier run of the item has not returned yet",
            )
        return out

    def _refusal(self, now: float, wall: float) -> Optional[str]:
        """Why a trigger cannot run now, or ``None`` when it can."""
        if self._stopping:
            return "the worker is stopping"
        if self._shutdown is not None:
            return "the sidecar sent Shutdown: no new work"
        if self._lease_end(now, wall) is None:
            if self._lease is None:
                return "the trigger arrived without a valid lease (none received)"
            return "the trigger arrived without a valid lease (it ran out)"
        return None

    def _on_revoke(self, revoke: Revoke) -> List[Output]:
        revoked = set(revoke.items)
        reason = "revoked by the sidecar" + (f": {revoke.reason}" if revoke.reason else "")
        out: List[Output] = []
        for run in list(self._runs.values()):
            if run.generation == self._generation and run.ctx.sharding_item in revoked:
                out += self._cancel(run, reason)
        if out:
            log.info("job %s: %s; cancelled %d running item(s)", self.job_name, reason, len(out))
        return out

    # -- inputs: handlers and answers ------------------------------------------------------------
    def handler_done(
        self, execution_id: str, item: int, outcome: Outcome, error: str = ""
    ) -> List[Output]:
        """An item's handler returned (``COMPLETE``), raised (``FAILURE`` with ``error``), or
        never ran to an outcome (``STOPPED``)."""
        with self._lock:
            run = self._runs.pop((execution_id, item), None)
            if run is None:
                return []
            now, wall = self._now()
            out = self._check_lapse(now, wall)
            ctx = run.ctx
            if run.generation != self._generation or not self._open:
                log.info(
                    "job %s item %d of %s: answer not sent (%s): its stream has ended",
                    self.job_name,
                    item,
                    execution_id,
                    ctx.cancel_reason or "stream ended",
                )
                return out
            if not run.cancelled and self._lease_end(now, wall) is None:
                # The lease ran out before this input could notice (no check, no tick).
                run.cancelled = True
                ctx._cancel("lease expired without renewal")
            if self.resident and self._stopping and (run.cancelled or outcome is Outcome.STOPPED):
                log.info(
                    "job %s item %d of %s: hold given back when the stream ends (%s)",
                    self.job_name,
                    item,
                    execution_id,
                    ctx.cancel_reason or "the worker is stopping",
                )
                return out
            if run.cancelled or outcome is Outcome.STOPPED:
                reason = ctx.cancel_reason or "the handler stopped without an outcome"
                log.info(
                    "job %s item %d of %s: answer not sent (%s); declining it",
                    self.job_name,
                    item,
                    execution_id,
                    reason,
                )
                return out + self._decline(execution_id, [item], reason)
            if outcome is Outcome.COMPLETE:
                return out + self._send(Rpc.COMPLETE, execution_id, [item], "")
            return out + self._send(
                Rpc.REPORT_FAILURE, execution_id, [item], error or "the handler failed"
            )

    def answer_result(self, call_id: int, status: str, details: str = "") -> List[Output]:
        """The result of a :class:`SendCall`: ``"OK"`` or the gRPC status name of the failure."""
        with self._lock:
            pending = self._pending.get(call_id)
            if pending is None or pending.retry_at is not None:
                return []  # settled, dropped with its stream, or not in flight
            del self._pending[call_id]
            call = pending.call
            what = f"{call.rpc.value} of {call.execution_id} items {list(call.items)}"
            if status == "OK":
                log.debug("job %s: %s accepted", self.job_name, what)
                return []
            if is_transport_failure(status, details):
                if call.generation == self._generation and self._open:
                    delay = min(self.retry_initial * 2 ** (call.attempt - 1), self.retry_max)
                    now, _ = self._now()
                    pending.retry_at = now + delay
                    self._pending[call_id] = pending
                    log.warning(
                        "job %s: answer not delivered: %s (transport error %s: %s; the sidecar "
                        "neither accepted nor refused it); sending it again in %.2fs",
                        self.job_name,
                        what,
                        status,
                        details,
                        delay,
                    )
                else:
                    log.info(
                        "job %s: answer not delivered: %s (transport error %s: %s); dropped: "
                        "its stream has ended",
                        self.job_name,
                        what,
                        status,
                        details,
                    )
                return []
            log.warning(
                "job %s: answer rejected by the sidecar: %s (%s: %s); not sent again",
                self.job_name,
                what,
                status,
                details,
            )
            return []

    # -- inputs: time ----------------------------------------------------------------------------
    def check(
        self, execution_id: str, item: int
    ) -> Tuple[List[Output], Optional[bool], Optional[float]]:
        """A handler asks whether it is cancelled: ``(outputs, cancelled, lease_left)``.

        The lease is evaluated now, on the core's clock. ``cancelled`` is ``None`` when the item
        is not running (its handler returned); ``lease_left`` is how long the lease lasts (seconds,
        ``None`` without a valid one).
        """
        with self._lock:
            now, wall = self._now()
            out = self._check_lapse(now, wall)
            run = self._runs.get((execution_id, item))
            end = self._lease_end(now, wall)
            left = None if end is None else end - now
            return out, (None if run is None else run.cancelled), left

    def tick(self) -> List[Output]:
        """Time passed: a lease that ran out cancels the work; answers due are sent again."""
        with self._lock:
            now, wall = self._now()
            out = self._check_lapse(now, wall)
            for call_id, pending in list(self._pending.items()):
                if pending.retry_at is None or pending.retry_at > now:
                    continue
                if pending.call.generation != self._generation or not self._open:
                    del self._pending[call_id]
                    continue
                call = dataclasses.replace(pending.call, attempt=pending.call.attempt + 1)
                self._pending[call_id] = _Pending(call)
                out.append(SendCall(call))
            return out

    def cancel_all(self, reason: str) -> List[Output]:
        """Cancels every running item (the worker is forced to stop); each is declined once its
        handler returns, if its stream is still open."""
        with self._lock:
            out: List[Output] = []
            for run in list(self._runs.values()):
                out += self._cancel(run, reason)
            return out

    # -- internals -------------------------------------------------------------------------------
    def _now(self) -> Tuple[float, float]:
        return self.clock.monotonic(), self.clock.wall()

    def _lease_end(self, now: float, wall: float) -> Optional[float]:
        """When the current lease runs out (monotonic), or ``None`` if it is not valid now."""
        lease = self._lease
        if lease is None or not self._open:
            return None
        end = lease.received + lease.valid_for
        if lease.expires_wall is not None:
            end = min(end, now + (lease.expires_wall - wall))
        return end if now < end else None

    def _active_runs(self) -> List[_Run]:
        return [
            r for r in self._runs.values() if not r.cancelled and r.generation == self._generation
        ]

    def _active_executions(self) -> List[str]:
        seen: Dict[str, None] = {}
        for run in self._active_runs():
            seen.setdefault(run.ctx.execution_id, None)
        return list(seen)

    def _check_lapse(self, now: float, wall: float) -> List[Output]:
        """Rule 1: once the lease has run out, every running item is cancelled."""
        active = self._active_runs()
        if not active or self._lease_end(now, wall) is not None:
            return []
        out: List[Output] = []
        for run in active:
            out += self._cancel(run, "lease expired without renewal")
        if not self._lapse_logged:
            self._lapse_logged = True
            log.warning(
                "job %s: lease expired; cancelled %d running item(s)", self.job_name, len(out)
            )
        return out

    def _cancel(self, run: _Run, reason: str) -> List[Output]:
        if run.cancelled:
            return []
        run.cancelled = True
        run.ctx._cancel(reason)
        return [CancelItem(run.ctx, reason)]

    def _end_stream(self, reason: str) -> List[Output]:
        self._open = False
        self._lease = None
        out: List[Output] = []
        for run in list(self._runs.values()):
            out += self._cancel(run, f"stream to the sidecar ended: {reason}")
        # Answers waiting to be sent again are dropped; those in flight stay until their result
        # arrives (to be logged), but are never sent again.
        dropped = [p for p in self._pending.values() if p.retry_at is not None]
        for p in dropped:
            del self._pending[p.call.id]
        if dropped:
            log.info(
                "job %s: stream ended (%s); dropped %d answer(s) waiting to be sent again",
                self.job_name,
                reason,
                len(dropped),
            )
        return out

    def _remember(self, key: Key) -> None:
        self._seen[key] = None
        while len(self._seen) > _SEEN_LIMIT:
            self._seen.popitem(last=False)

    def _decline(self, execution_id: str, items: Sequence[int], reason: str) -> List[Output]:
        log.info(
            "job %s: declining items %s of %s: %s", self.job_name, list(items), execution_id, reason
        )
        return self._send(Rpc.DECLINE, execution_id, items, reason)

    def _send(self, rpc: Rpc, execution_id: str, items: Sequence[int], text: str) -> List[Output]:
        if not self._open:
            return []
        self._next_call += 1
        call = AnswerCall(
            id=self._next_call,
            rpc=rpc,
            instance_id=self._instance_id,
            execution_id=execution_id,
            items=tuple(items),
            text=truncate_utf8(text),
            generation=self._generation,
        )
        self._pending[call.id] = _Pending(call)
        return [SendCall(call)]
