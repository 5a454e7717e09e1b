"""The synchronous client: :class:`Worker` (decorated handlers, threads) and :class:`Subscription`.

``Worker.job`` registers a handler for a job; ``Worker.run`` subscribes every job and calls the
handler once per item of every trigger in a thread pool (``max_concurrency`` per job, shared by
the job's concurrent executions: see ``max_concurrent_executions``). What it
does with each event, answer and lease is decided by the protocol core (:mod:`shardcar._core`);
this module is its driver: a stream thread, a timer thread, the handler pool, and the gRPC
calls (sent asynchronously, their results fed back to the core). On Ctrl-C / SIGTERM it drains
(running items finish and are answered); after a sidecar's remote ``Shutdown`` the job stops
once the sidecar has ended the stream, and after a drain it subscribes again.
``Worker.subscribe`` gives the raw event stream for callers who want to drive things
themselves.
"""

from __future__ import annotations

import concurrent.futures
import functools
import signal
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TypeVar

import grpc

from ._common import JobSpec, answer_request, channel_options, failure_text, log
from ._core import AnswerCall, Outcome, Output, Reconnect, SendCall, StartItem, Stop
from ._driver import RunnerBase, SubscriptionBase, WorkerBase, rpc_status
from ._proto import shardcar_pb2_grpc as pb_grpc
from .dataflow import SyncDataflow, SyncJobLike, with_streaming
from .errors import ShardcarError
from .events import Assignment, Event, ShardingContext

__all__ = ["Worker", "Subscription", "Handler"]

Handler = Callable[[ShardingContext], None]
AssignmentCallback = Callable[[Assignment], None]
DataflowJobT = TypeVar("DataflowJobT", bound=SyncJobLike)


class Subscription(SubscriptionBase):
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

    def __iter__(self) -> Iterator[Event]:
        try:
            for msg in self._call:
                event = self._event(msg)
                if event is not None:
                    yield event
        except grpc.RpcError as err:
            error = self._stream_error(err)
            if error is not None:
                raise error from None

    def complete(self, execution_id: str, items: Sequence[int]) -> None:
        """Reports items of ``execution_id`` done."""
        self._answer(self._stub.Complete, self._complete_request(execution_id, items))

    def report_failure(self, execution_id: str, item: int, error: str) -> None:
        """Reports one item of ``execution_id`` failed with ``error`` (cut to 16384 bytes)."""
        self._answer(self._stub.ReportFailure, self._failure_request(execution_id, item, error))

    def decline(self, execution_id: str, items: Sequence[int] = (), reason: str = "") -> None:
        """Gives items of ``execution_id`` back without an outcome (empty ``items``: all).

        For a trigger that came without a valid lease, or items stopped by a lease lapse or a
        ``Revoke``. Always accepted for this instance's executions, and safe to repeat.
        """
        self._answer(self._stub.Decline, self._decline_request(execution_id, items, reason))

    def _answer(self, method: Any, req: Any) -> None:
        try:
            method(req, timeout=self._timeout)
        except grpc.RpcError as err:
            raise self._answer_error(err) from None

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Worker(WorkerBase[Handler]):
    """A worker process's connection to its local sidecar, with handlers per job.

    ``target``: ``host:port`` or ``unix:///path``; default ``$SHARDCAR_TARGET`` or
    ``127.0.0.1:50061``. ``max_concurrency``: the executor size, items run at once per job, in
    one pool per job shared by all of the job's executions (overridable per job).
    ``max_concurrent_executions``: how many executions of a job the worker runs at once, as it
    tells the sidecar; default each job's executor size (at most 1024). A worker running fewer
    than that many is also sent FAILOVER runs (a crashed peer's items) and MISFIRE catch-ups,
    which run beside what runs, each answered on its own; cron fires and trigger-once requests
    still come only when it runs nothing. ``1`` keeps ElasticJob's one execution at a time. An
    execution needs at least one slot of the pool, so it must be from 1 to ``max_concurrency``
    (and 1024): ``ValueError`` otherwise. Overridable per job.
    ``connect_timeout``: how long the first connection may keep failing before :meth:`run`
    raises :class:`SidecarUnavailableError`; once registered, reconnects are retried forever
    (``backoff_initial``, ``backoff_max``; the same bounds pace resent answers), unless the
    sidecar refuses the job (:class:`InvalidJobConfigError`, :class:`JobNotFoundError`).
    ``drain_timeout``: on stop, how long running items may take to finish and be answered.
    ``answer_timeout``: deadline of each answer call (a call that exceeds it is sent again).
    ``stop_on_drain``: after a sidecar ``Shutdown`` the job takes no new work and finishes
    what runs; once the sidecar has ended its stream, a drain (the sidecar restarts) makes it
    subscribe again with the reconnect backoff until the sidecar is back (the default), and a
    remote shutdown stops it. ``True`` stops the job after a drain too.

    The instance id (what the sidecar and ElasticJob call this worker) is ``instance_id`` when
    given, used as it is. Otherwise it is ``{sidecar ip}@-@{suffix}``: with
    ``unique_instance=True`` the suffix is ``{pid}-{8 random hex}``, chosen when the worker is
    created and kept across reconnects (``instance_suffix``), so that workers whose pids are
    not unique on the host (containers sharing one sidecar are all pid 1) get distinct ids;
    with ``False`` it is the pid. ``None`` (the default) chooses ``True`` in a container (pid 1,
    ``/.dockerenv`` or ``/run/.containerenv`` exists, or ``KUBERNETES_SERVICE_HOST`` is set)
    and ``False`` elsewhere.

    ``tracing`` (with the ``otel`` extra, i.e. when opentelemetry is importable): each handler
    runs in a ``shardcar.handler`` span, a child of the sidecar's ``shardcar.execution`` span
    of its trigger (see :mod:`shardcar._tracing`); ``False`` turns that off. The spans go to
    ``tracer_provider``, default the global one (with none configured they are no-ops).
    """

    def _setup(self) -> None:
        self._channel = grpc.insecure_channel(
            self.target, options=channel_options(self.target, self._options)
        )
        self._stub = pb_grpc.WorkerServiceStub(self._channel)
        self._stop = threading.Event()
        self._wake = threading.Event()

    def _runner(
        self, config: JobSpec, handler: Handler, overwrite: bool, n: int, executions: int
    ) -> Any:
        return _JobRunner(self, config, handler, overwrite, n, executions)

    def subscribe(
        self,
        job: JobSpec,
        *,
        overwrite: bool = False,
        max_concurrent_executions: Optional[int] = None,
    ) -> Subscription:
        """Opens a raw event stream for ``job`` (no handlers, no reconnect, leases not enforced).

        ``max_concurrent_executions`` (1 to 1024) is sent to the sidecar; unset (``None``) it
        gives this stream one execution at a time. A caller that asks for more must run that
        many triggers at once and answer each on its own."""
        request = self._subscribe_request(job, overwrite, max_concurrent_executions)
        return Subscription(self._stub, request, self.target, self.answer_timeout)

    def dataflow(
        self,
        config: JobSpec,
        *,
        streaming: Optional[bool] = None,
        overwrite: bool = False,
        max_concurrency: Optional[int] = None,
        max_concurrent_executions: Optional[int] = None,
    ) -> Callable[[DataflowJobT], DataflowJobT]:
        """Decorator: a dataflow job (ElasticJob's ``DataflowJob``), an object or a class (made
        once, without arguments) with ``fetch(ctx) -> list`` and ``process(ctx, data)``, runs
        for every item of every trigger of this job.

        One-off: ``fetch`` once, ``process`` the data if there is any. Streaming (the job prop
        ``streaming.process`` is ``"true"``): ``process`` and ``fetch`` again while ``fetch``
        returns data and the item is still eligible: not cancelled (revoke, lease lapse, stream
        lost), the worker not stopping, no ``Shutdown``, the item not handed over by a
        resharding. The loop's end by itself is ``Complete``; ``fetch`` or ``process`` raising
        is ``ReportFailure``; a cancelled item is declined. ``streaming`` writes the prop into
        ``config`` (``None``: leave it as it is); the job's effective config (ZooKeeper's, when
        it existed) decides. See :mod:`shardcar.dataflow`.
        """
        spec = with_streaming(config, streaming)

        def register(job: DataflowJobT) -> DataflowJobT:
            handler = SyncDataflow(job, streaming)
            runner = self._register(
                spec, handler, overwrite, max_concurrency, max_concurrent_executions
            )
            handler.bind(runner)
            return job

        return register

    # -- running --------------------------------------------------------------------------------
    def run(self, *, handle_signals: bool = True) -> None:
        """Runs every registered job until :meth:`stop`, Ctrl-C or SIGTERM, then drains.

        A first Ctrl-C drains (no new work; running items finish and are answered, up to
        ``drain_timeout``); a second one cancels them and returns at once. Returns by itself
        when every job has stopped (after a remote shutdown, or a drain with ``stop_on_drain``).

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
            while not self._stop.is_set() and not self._finished():
                self._wake.wait(0.25)
                self._wake.clear()
            self._drain()
        finally:
            self._stop.set()
            for runner in self._jobs:
                runner.close()
            for sig, handler in restore.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._raise_fatal()

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


class _JobRunner(RunnerBase[Handler]):
    """One job of a :class:`Worker`: the driver of its :class:`ProtocolCore`.

    A stream thread (subscribe, feed events, sleep when told to reconnect), a timer thread
    (lease deadline, resends), a handler pool, and answer calls sent with ``future()`` whose
    results are fed back from gRPC's callback threads. Outputs are performed outside the
    core's lock.
    """

    worker: Worker

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._sub: Optional[Subscription] = None
        self._closing = threading.Event()
        self._timer_wake = threading.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.max_concurrency, thread_name_prefix=f"shardcar-{self.job_name}"
        )
        self._threads: List[threading.Thread] = []

    def start(self) -> None:
        for target, name in ((self._stream_loop, "stream"), (self._timer_loop, "timer")):
            t = threading.Thread(target=target, name=f"shardcar-{self.job_name}-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    # -- outputs (CancelItem: the core marked the context; a thread cannot be interrupted) -------
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
            elif isinstance(out, SendCall):
                self._send(out.call)
            elif isinstance(out, Stop):
                self.worker._wake.set()
        if outputs:
            self._timer_wake.set()

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
            code, details = ("OK", "") if err is None else rpc_status(err)
        self._perform(self.core.answer_result(call.id, code, details))

    # -- stream ---------------------------------------------------------------------------------
    def _stream_loop(self) -> None:
        while not self.core.stopped:
            sub = self.worker.subscribe(
                self.config,
                overwrite=self.overwrite,
                max_concurrent_executions=self.max_concurrent_executions,
            )
            self._sub = sub
            self._perform(self.core.stream_opened())
            if self._closing.is_set():
                sub.close()
            error: Optional[ShardcarError] = None
            outputs: List[Output] = []
            try:
                for event in sub:
                    self._observe(event)
                    self._perform(self.core.on_event(event))
                    if isinstance(event, Assignment):
                        self._assigned(event)
            except ShardcarError as err:
                error = err
            finally:
                sub.close()
                self._sub = None
                closed = "worker stopped" if self._closing.is_set() else ""
                outputs = self.core.stream_ended(closed, None if closed else error)
                self._perform(outputs)
            for out in outputs:
                if isinstance(out, Reconnect):
                    self._closing.wait(out.delay)
        self.worker._wake.set()

    def _assigned(self, event: Assignment) -> None:
        for callback in self.worker._assignment_callbacks:
            try:
                callback(event)
            except Exception:
                log.exception("job %s: on_assignment callback failed", self.job_name)

    # -- time -----------------------------------------------------------------------------------
    def _timer_loop(self) -> None:
        while not self._closing.is_set():
            self._perform(self.core.tick())
            self._timer_wake.wait(self.core.timer_wait())
            self._timer_wake.clear()

    # -- items ----------------------------------------------------------------------------------
    def _run_item(self, ctx: ShardingContext) -> None:
        outcome, error = Outcome.COMPLETE, ""
        if ctx.cancelled:  # checked now: the lease may have run out while it waited for a slot
            outcome = Outcome.STOPPED
        else:
            try:
                with self._handler_span(ctx):
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
        self._perform(self.core.request_stop())  # the stream's end stops the job
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
