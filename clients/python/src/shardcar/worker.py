"""The synchronous client: :class:`Worker` (decorated handlers, threads) and :class:`Subscription`.

``Worker.job`` registers a handler for a job; ``Worker.run`` subscribes every job and calls the
handler once per item of every trigger in a thread pool (``max_concurrency`` per job). What it
does with each event, answer and lease is decided by the protocol core (:mod:`shardcar._core`);
this module is its driver: a stream thread, a timer thread, the handler pool, and the gRPC
calls (sent asynchronously, their results fed back to the core). On Ctrl-C / SIGTERM it drains
(running items finish and are answered); after a sidecar ``Shutdown`` it stops once the sidecar
has ended the stream. ``Worker.subscribe`` gives the raw event stream for callers who want to
drive things themselves.
"""

from __future__ import annotations

import concurrent.futures
import functools
import signal
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import grpc

from ._common import (
    Backoff,
    JobSpec,
    answer_request,
    channel_options,
    failure_text,
    job_name_of,
    log,
    make_instance_suffix,
    new_instance_token,
    resolve_target,
    resolve_unique_instance,
    subscribe_request,
    truncate_utf8,
)
from ._core import (
    AnswerCall,
    CancelItem,
    Outcome,
    Output,
    ProtocolCore,
    SendCall,
    StartItem,
    Stop,
)
from ._proto import shardcar_pb2 as pb
from ._proto import shardcar_pb2_grpc as pb_grpc
from .errors import (
    InstanceConflictError,
    InvalidJobConfigError,
    JobNotFoundError,
    ShardcarError,
    SidecarUnavailableError,
    from_rpc_error,
)
from .events import (
    Assignment,
    Event,
    Lease,
    Registered,
    ShardingContext,
    event_from_proto,
)

__all__ = ["Worker", "Subscription", "Handler"]

Handler = Callable[[ShardingContext], None]
AssignmentCallback = Callable[[Assignment], None]


class Subscription:
    """One ``Subscribe`` stream: iterate it for typed events, answer through it.

    Iteration raises a :class:`ShardcarError` subclass when the stream fails, and simply ends
    when the sidecar closes it or :meth:`close` is called. There is no reconnect here; the
    :class:`Worker` does that. Leases are tracked (``lease``, ``lease_valid``) but not enforced:
    a caller of this API must stop its work when ``lease_valid`` turns false, and follow the
    contract in ``shardcar.proto`` itself.

    The answer methods raise :class:`~shardcar.AnswerRejectedError` (and subclasses) when the
    sidecar refuses, and :class:`~shardcar.AnswerTransportError` when the call failed in
    transport: then the sidecar neither accepted nor refused it, and it may be sent again while
    this stream is open.
    """

    def __init__(
        self,
        stub: pb_grpc.WorkerServiceStub,
        request: pb.SubscribeRequest,
        target: str,
        timeout: float,
    ) -> None:
        self.job_name = request.job_name
        self.instance_id: Optional[str] = None
        self.lease: Optional[Lease] = None
        self._stub = stub
        self._target = target
        self._timeout = timeout
        self._closed = False
        self._call = stub.Subscribe(request)

    @property
    def lease_valid(self) -> bool:
        return self.lease is not None and self.lease.valid

    def __iter__(self) -> Iterator[Event]:
        try:
            for msg in self._call:
                event = event_from_proto(msg, self.job_name)
                if isinstance(event, Registered):
                    self.instance_id = event.instance_id
                elif isinstance(event, Lease):
                    self.lease = event
                if event is not None:
                    yield event
        except grpc.RpcError as err:
            if self._closed and err.code() == grpc.StatusCode.CANCELLED:
                return
            raise from_rpc_error(err, target=self._target, during="subscribe") from None

    def complete(self, execution_id: str, items: Sequence[int]) -> None:
        """Reports items of ``execution_id`` done."""
        req = pb.CompleteRequest(
            instance_id=self._require_instance(), execution_id=execution_id, items=list(items)
        )
        self._answer(self._stub.Complete, req)

    def report_failure(self, execution_id: str, item: int, error: str) -> None:
        """Reports one item of ``execution_id`` failed with ``error`` (cut to 16384 bytes)."""
        req = pb.ReportFailureRequest(
            instance_id=self._require_instance(),
            execution_id=execution_id,
            item=item,
            error=truncate_utf8(error),
        )
        self._answer(self._stub.ReportFailure, req)

    def decline(self, execution_id: str, items: Sequence[int] = (), reason: str = "") -> None:
        """Gives items of ``execution_id`` back without an outcome (empty ``items``: all).

        For a trigger that came without a valid lease, or items stopped by a lease lapse or a
        ``Revoke``. Always accepted for this instance's executions, and safe to repeat.
        """
        req = pb.DeclineRequest(
            instance_id=self._require_instance(),
            execution_id=execution_id,
            items=list(items),
            reason=truncate_utf8(reason),
        )
        self._answer(self._stub.Decline, req)

    def _answer(self, method: Any, req: Any) -> None:
        try:
            method(req, timeout=self._timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err, target=self._target, during="answer") from None

    def close(self) -> None:
        """Ends the stream; the sidecar removes the instance at once."""
        self._closed = True
        self._call.cancel()

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_instance(self) -> str:
        if self.instance_id is None:
            raise ShardcarError("no Registered event received yet on this stream")
        return self.instance_id


class Worker:
    """A worker process's connection to its local sidecar, with handlers per job.

    ``target``: ``host:port`` or ``unix:///path``; default ``$SHARDCAR_TARGET`` or
    ``127.0.0.1:50061``. ``max_concurrency``: items run at once per job (overridable per job).
    ``connect_timeout``: how long the first connection may keep failing before :meth:`run`
    raises :class:`SidecarUnavailableError`; once registered, reconnects are retried forever
    (``backoff_initial``, ``backoff_max``; the same bounds pace resent answers).
    ``drain_timeout``: on stop, how long running items may take to finish and be answered.
    ``answer_timeout``: deadline of each answer call (a call that exceeds it is sent again).
    ``exit_on_shutdown``: when the sidecar sends ``Shutdown``, the job stops once the sidecar
    has ended its stream (default); ``False`` reconnects instead, for a sidecar that is
    restarted in place.

    The instance id (what the sidecar and ElasticJob call this worker) is ``instance_id`` when
    given, used as it is. Otherwise it is ``{sidecar ip}@-@{suffix}``: with
    ``unique_instance=True`` the suffix is ``{pid}-{8 random hex}``, chosen when the worker is
    created and kept across reconnects (``instance_suffix``), so that workers whose pids are
    not unique on the host (containers sharing one sidecar are all pid 1) get distinct ids;
    with ``False`` it is the pid. ``None`` (the default) chooses ``True`` in a container (pid 1,
    ``/.dockerenv`` or ``/run/.containerenv`` exists, or ``KUBERNETES_SERVICE_HOST`` is set)
    and ``False`` elsewhere.
    """

    def __init__(
        self,
        target: Optional[str] = None,
        *,
        max_concurrency: int = 8,
        instance_id: str = "",
        unique_instance: Optional[bool] = None,
        labels: Optional[Mapping[str, str]] = None,
        connect_timeout: float = 10.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        drain_timeout: float = 30.0,
        answer_timeout: float = 10.0,
        exit_on_shutdown: bool = True,
        options: Optional[Mapping[str, object]] = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.target = resolve_target(target)
        self.max_concurrency = max_concurrency
        self.instance_id = instance_id
        self.unique_instance = resolve_unique_instance(unique_instance, instance_id)
        self._instance_token = new_instance_token()
        self.labels = dict(labels or {})
        self.connect_timeout = connect_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.drain_timeout = drain_timeout
        self.answer_timeout = answer_timeout
        self.exit_on_shutdown = exit_on_shutdown
        self._channel = grpc.insecure_channel(
            self.target, options=channel_options(self.target, options)
        )
        self._stub = pb_grpc.WorkerServiceStub(self._channel)
        self._jobs: List[_JobRunner] = []
        self._assignment_callbacks: List[AssignmentCallback] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._force = False

    @property
    def instance_suffix(self) -> str:
        """The ``instance_suffix`` this worker subscribes with: ``{pid}-{8 random hex}``, the
        same on every (re)connect of this worker; ``""`` when ``unique_instance`` is off (the
        instance id is then ``instance_id``, or ``{sidecar ip}@-@{pid}``)."""
        return make_instance_suffix(self._instance_token) if self.unique_instance else ""

    # -- registration ---------------------------------------------------------------------------
    def job(
        self,
        config: JobSpec,
        *,
        overwrite: bool = False,
        max_concurrency: Optional[int] = None,
    ) -> Callable[[Handler], Handler]:
        """Decorator: ``handler(ctx)`` runs once per item of every trigger of this job.

        Returning reports the item complete; raising reports it failed with the exception text.
        ``config`` may be a bare job name to join a job that already exists.
        """

        def register(handler: Handler) -> Handler:
            name = job_name_of(config)
            if any(r.job_name == name for r in self._jobs):
                raise ValueError(f"job {name!r} already has a handler on this worker")
            self._jobs.append(
                _JobRunner(self, config, handler, overwrite, max_concurrency or self.max_concurrency)
            )
            return handler

        return register

    def on_assignment(self, callback: AssignmentCallback) -> AssignmentCallback:
        """Decorator: ``callback(assignment)`` runs on every ``Assignment`` of every job."""
        self._assignment_callbacks.append(callback)
        return callback

    def subscribe(self, job: JobSpec, *, overwrite: bool = False) -> Subscription:
        """Opens a raw event stream for ``job`` (no handlers, no reconnect, leases not enforced)."""
        req = subscribe_request(
            job,
            overwrite=overwrite,
            instance_id=self.instance_id,
            labels=self.labels,
            instance_suffix=self.instance_suffix,
        )
        return Subscription(self._stub, req, self.target, self.answer_timeout)

    # -- running --------------------------------------------------------------------------------
    def run(self, *, handle_signals: bool = True) -> None:
        """Runs every registered job until :meth:`stop`, Ctrl-C or SIGTERM, then drains.

        A first Ctrl-C drains (no new work; running items finish and are answered, up to
        ``drain_timeout``); a second one cancels them and returns at once. Returns by itself
        when every job has stopped (after a sidecar ``Shutdown``, see ``exit_on_shutdown``).

        Raises :class:`SidecarUnavailableError` when the sidecar cannot be reached within
        ``connect_timeout``, :class:`InvalidJobConfigError` / :class:`JobNotFoundError` when it
        refuses a job.
        """
        if not self._jobs:
            raise ShardcarError("no jobs registered: decorate a handler with @worker.job(...)")
        restore = self._install_signals() if handle_signals else {}
        try:
            for runner in self._jobs:
                runner.start()
            while not self._stop.is_set():
                self._wake.wait(0.25)
                self._wake.clear()
                if any(r.fatal for r in self._jobs) or all(r.finished for r in self._jobs):
                    break
            self._drain()
        finally:
            self._stop.set()
            for runner in self._jobs:
                runner.close()
            for sig, handler in restore.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for runner in self._jobs:
            if runner.fatal is not None:
                raise runner.fatal

    def stop(self, *, force: bool = False) -> None:
        """Asks :meth:`run` to return: drain first, or cancel running items with ``force``."""
        self._force = self._force or force
        self._stop.set()
        self._wake.set()
        if force:
            for runner in self._jobs:
                runner.cancel_running("worker forced to stop")

    def close(self) -> None:
        """Stops and closes the channel."""
        self.stop(force=True)
        self._channel.close()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drain(self) -> None:
        deadline = time.monotonic() + self.drain_timeout
        for runner in self._jobs:
            runner.begin_drain()
        for runner in self._jobs:
            if not self._force:
                runner.wait_idle(deadline, lambda: self._force)
        for runner in self._jobs:
            runner.close()

    def _install_signals(self) -> Dict[signal.Signals, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: object) -> None:
            if self._stop.is_set():
                log.warning("second stop signal: cancelling running items")
                self.stop(force=True)
            else:
                log.info("stop signal: draining (again to force)")
                self.stop()

        restore: Dict[signal.Signals, Any] = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            restore[sig] = signal.signal(sig, on_signal)
        return restore


class _JobRunner:
    """One job of a :class:`Worker`: the driver of its :class:`ProtocolCore`.

    A stream thread (subscribe, feed events), a timer thread (lease deadline, resends), a
    handler pool, and answer calls sent with ``future()`` whose results are fed back from
    gRPC's callback threads. Outputs are performed outside the core's lock.
    """

    def __init__(
        self,
        worker: Worker,
        config: JobSpec,
        handler: Handler,
        overwrite: bool,
        max_concurrency: int,
    ) -> None:
        self.worker = worker
        self.config = config
        self.job_name = job_name_of(config)
        self.handler = handler
        self.overwrite = overwrite
        self.max_concurrency = max_concurrency
        self.fatal: Optional[ShardcarError] = None
        self.finished = False
        self.core = ProtocolCore(
            self.job_name,
            exit_on_shutdown=worker.exit_on_shutdown,
            retry_initial=worker.backoff_initial,
            retry_max=worker.backoff_max,
        )
        self._sub: Optional[Subscription] = None
        self._closing = threading.Event()
        self._timer_wake = threading.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_concurrency, thread_name_prefix=f"shardcar-{self.job_name}"
        )
        self._threads: List[threading.Thread] = []
        self._ever_registered = False

    def start(self) -> None:
        for target, name in ((self._stream_loop, "stream"), (self._timer_loop, "timer")):
            t = threading.Thread(target=target, name=f"shardcar-{self.job_name}-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    # -- outputs --------------------------------------------------------------------------------
    def _perform(self, outputs: List[Output]) -> None:
        for out in outputs:
            if isinstance(out, StartItem):
                ctx = out.ctx
                ctx._probe = functools.partial(self._probe, ctx)
                try:
                    self._pool.submit(self._run_item, ctx)
                except RuntimeError:  # the pool is shut down: the worker is closing
                    self._perform(self.core.handler_done(
                        ctx.execution_id, ctx.sharding_item, Outcome.STOPPED))
            elif isinstance(out, CancelItem):
                pass  # the core marked the context; a thread cannot be interrupted
            elif isinstance(out, SendCall):
                self._send(out.call)
            elif isinstance(out, Stop):
                self.finished = True
                self.worker._wake.set()
        if outputs:
            self._timer_wake.set()

    def _probe(self, ctx: ShardingContext) -> Tuple[Optional[bool], Optional[float]]:
        outputs, cancelled, lease_left = self.core.check(ctx.execution_id, ctx.sharding_item)
        self._perform(outputs)
        return cancelled, lease_left

    def _send(self, call: AnswerCall) -> None:
        name, request = answer_request(call)
        try:
            future = getattr(self.worker._stub, name).future(
                request, timeout=self.worker.answer_timeout
            )
        except Exception as exc:  # e.g. the channel is closed: never reached the sidecar
            self._perform(self.core.answer_result(call.id, "CANCELLED", str(exc)))
            return
        future.add_done_callback(lambda f: self._on_answered(call, f))

    def _on_answered(self, call: AnswerCall, future: Any) -> None:
        if future.cancelled():
            code, details = "CANCELLED", "the call was cancelled"
        else:
            err = future.exception()
            if err is None:
                code, details = "OK", ""
            elif isinstance(err, grpc.RpcError) and hasattr(err, "code"):
                code, details = err.code().name, err.details() or ""
            else:
                code, details = "UNKNOWN", str(err)
        self._perform(self.core.answer_result(call.id, code, details))

    # -- stream ---------------------------------------------------------------------------------
    def _stream_loop(self) -> None:
        backoff = Backoff(self.worker.backoff_initial, self.worker.backoff_max)
        first_deadline = time.monotonic() + self.worker.connect_timeout
        while not self._closing.is_set() and not self.core.stopped:
            sub = self.worker.subscribe(self.config, overwrite=self.overwrite)
            self._sub = sub
            self._perform(self.core.stream_opened())
            if self._closing.is_set():
                sub.close()
            reason = "stream ended by the sidecar"
            try:
                for event in sub:
                    if isinstance(event, Registered):
                        self._ever_registered = True
                        backoff.reset()
                        log.info("job %s: registered as %s", self.job_name, event.instance_id)
                    self._perform(self.core.on_event(event))
                    if isinstance(event, Assignment):
                        self._assigned(event)
            except ShardcarError as err:
                reason = str(err)
                if self._is_fatal(err) or (
                    not self._ever_registered and time.monotonic() >= first_deadline
                ):
                    self.fatal = err
            finally:
                sub.close()
                self._sub = None
                if self._closing.is_set():
                    reason = "worker stopped"
                self._perform(self.core.stream_ended(reason))
            if self.fatal is not None or self._closing.is_set() or self.core.stopped:
                break
            if not self._ever_registered and time.monotonic() >= first_deadline:
                self.fatal = SidecarUnavailableError(
                    f"no registration from the sidecar at {self.worker.target!r} within "
                    f"{self.worker.connect_timeout}s: {reason}"
                )
                break
            delay = backoff.next()
            log.warning("job %s: %s; reconnecting in %.2fs", self.job_name, reason, delay)
            self._closing.wait(delay)
        self.finished = True
        self.worker._wake.set()

    def _assigned(self, event: Assignment) -> None:
        for callback in self.worker._assignment_callbacks:
            try:
                callback(event)
            except Exception:
                log.exception("job %s: on_assignment callback failed", self.job_name)

    def _is_fatal(self, err: ShardcarError) -> bool:
        if isinstance(err, (InvalidJobConfigError, JobNotFoundError)):
            return True
        if isinstance(err, InstanceConflictError):
            return not self._ever_registered
        return not isinstance(err, SidecarUnavailableError) and not self._ever_registered

    # -- time -----------------------------------------------------------------------------------
    def _timer_loop(self) -> None:
        while not self._closing.is_set():
            self._perform(self.core.tick())
            deadline = self.core.next_deadline()
            timeout = 0.5
            if deadline is not None:
                timeout = min(timeout, max(0.0, deadline - time.monotonic()) + 0.001)
            self._timer_wake.wait(timeout)
            self._timer_wake.clear()

    # -- items ----------------------------------------------------------------------------------
    def _run_item(self, ctx: ShardingContext) -> None:
        outcome, error = Outcome.COMPLETE, ""
        if ctx.cancelled:  # checked now: the lease may have run out while it waited for a slot
            outcome = Outcome.STOPPED
        else:
            try:
                self.handler(ctx)
            except BaseException as exc:  # reported, not raised (a pool thread would drop it)
                outcome, error = Outcome.FAILURE, failure_text(exc)
                if not ctx.cancelled:
                    log.warning(
                        "job %s item %d failed: %s", self.job_name, ctx.sharding_item, exc,
                        exc_info=True,
                    )
        self._perform(self.core.handler_done(ctx.execution_id, ctx.sharding_item, outcome, error))

    # -- stopping -------------------------------------------------------------------------------
    def begin_drain(self) -> None:
        self._perform(self.core.request_stop())

    def wait_idle(self, deadline: float, forced: Callable[[], bool]) -> None:
        while not self.core.idle() and not forced():
            if time.monotonic() >= deadline:
                log.warning("job %s: drain timeout; cancelling running items", self.job_name)
                break
            time.sleep(0.02)

    def cancel_running(self, reason: str) -> None:
        self._perform(self.core.cancel_all(reason))

    def close(self) -> None:
        self._closing.set()
        self._timer_wake.set()
        self._perform(self.core.cancel_all("worker stopped"))
        sub = self._sub
        if sub is not None:
            sub.close()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=5)
        self._pool.shutdown(wait=False)
