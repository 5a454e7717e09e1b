"""The synchronous client: :class:`Worker` (decorated handlers, threads).

``Worker.job`` registers a handler for a job; ``Worker.run`` subscribes every job and calls the
handler once per item of every trigger in a thread pool (``item_concurrency`` per job, shared
by the job's concurrent executions: see ``max_concurrent_executions``). What it does with each
event, answer and lease is decided by the protocol core (:mod:`shardcar._core`); this module is
its driver: a stream thread, a timer thread, the handler pool, and the gRPC calls (sent
asynchronously, their results fed back to the core). On Ctrl-C / SIGTERM it drains (running
items finish and are answered); after a sidecar's remote ``Shutdown`` the job stops once the
sidecar has ended the stream, and after a drain it subscribes again. Every handler runs under
a lease: there is no public way to take triggers without one.
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
from ._driver import (
    RunnerBase,
    SubscriptionBase,
    WorkerBase,
    _item_concurrency,
    refuse_resident,
    rpc_status,
)
from ._proto import shardcar_pb2_grpc as pb_grpc
from .dataflow import SyncDataflow, SyncJobLike, with_streaming
from .errors import ShardcarError
from .events import Assignment, Event, ShardingContext

__all__ = ["Worker", "Handler"]

Handler = Callable[[ShardingContext], None]
AssignmentCallback = Callable[[Assignment], None]
DataflowJobT = TypeVar("DataflowJobT", bound=SyncJobLike)


class _Subscription(SubscriptionBase):
    """One ``Subscribe`` stream, for a job runner (private: it enforces no lease; the runner's
    protocol core does): iterate it for typed events, answer through it.

    Iteration raises a :class:`ShardcarError` subclass when the stream fails, and simply ends
    when the sidecar closes it or :meth:`close` is called. There is no reconnect here; the
    runner does that.

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

    def __enter__(self) -> "_Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Worker(WorkerBase[Handler]):
    """A worker process's connection to its local sidecar, with handlers per job.

    ``Worker(target=None, *, options=None)``. ``target``: ``host:port`` or ``unix:///path``;
    default ``$SHARDCAR_TARGET``, else ``127.0.0.1:50061``. ``options``: a
    :class:`~shardcar.WorkerOptions` (concurrency, instance id, timeouts, backoff, drains,
    tracing), whose fields and defaults are documented there, once for both workers. The
    keywords of 0.1 (``max_concurrency=``, ``connect_timeout=``, ``drain_timeout=``,
    ``exit_on_shutdown=``, ...) still work, with a ``DeprecationWarning``.

    ``@worker.job(config)`` registers a handler (``@worker.resident(config)`` one that holds
    the items of a resident job), :meth:`run` runs every job until stopped. The
    first subscription that fails for ``connect_timeout`` raises
    :class:`SidecarUnavailableError` from :meth:`run`; once registered, lost streams and sidecar
    drains are followed by new subscriptions for as long as the worker runs, unless the sidecar
    refuses the job (:class:`InvalidJobConfigError`, :class:`JobNotFoundError`) or shuts the
    instance down remotely.
    """

    def _setup(self) -> None:
        self._channel = grpc.insecure_channel(
            self.target, options=channel_options(self.target, self.options.channel_options)
        )
        self._stub = pb_grpc.WorkerServiceStub(self._channel)
        self._stop = threading.Event()
        self._wake = threading.Event()

    def _runner(
        self, config: JobSpec, handler: Handler, overwrite: bool, n: int, executions: int
    ) -> Any:
        return _JobRunner(self, config, handler, overwrite, n, executions)

    def _subscribe(
        self,
        job: JobSpec,
        *,
        overwrite: bool = False,
        max_concurrent_executions: Optional[int] = None,
    ) -> _Subscription:
        """Opens one event stream for ``job``, for a runner (no handlers, no reconnect, no lease
        enforced here: the runner's core does that). ``max_concurrent_executions`` is sent to
        the sidecar; ``None`` leaves it unset (one execution at a time)."""
        request = self._subscribe_request(job, overwrite, max_concurrent_executions)
        return _Subscription(self._stub, request, self.target, self.options.answer_timeout)

    def dataflow(
        self,
        config: JobSpec,
        *,
        streaming: Optional[bool] = None,
        overwrite: bool = False,
        item_concurrency: Optional[int] = None,
        max_concurrent_executions: Optional[int] = None,
        max_concurrency: Optional[int] = None,
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
        it existed) decides. See :mod:`shardcar.dataflow`. ``overwrite``, ``item_concurrency``
        and ``max_concurrent_executions`` as for :meth:`job`.
        """
        refuse_resident(config, "dataflow")
        spec = with_streaming(config, streaming)
        concurrency = _item_concurrency(item_concurrency, max_concurrency)

        def register(job: DataflowJobT) -> DataflowJobT:
            handler = SyncDataflow(job, streaming)
            runner = self._register(
                spec, handler, overwrite, concurrency, max_concurrent_executions
            )
            handler.bind(runner)
            return job

        return register

    # -- running --------------------------------------------------------------------------------
    def run(self, *, handle_signals: bool = True) -> None:
        """Runs every registered job until :meth:`stop`, Ctrl-C or SIGTERM, then drains.

        A first Ctrl-C drains (no new work; running items finish and are answered, up to
        ``WorkerOptions.drain_timeout``); a second one cancels them and returns at once. Returns
        by itself when every job has stopped (after a remote shutdown, or a sidecar drain with
        ``stop_on_drain``).

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
        deadline = time.monotonic() + self.options.drain_timeout
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
        self._sub: Optional[_Subscription] = None
        self._closing = threading.Event()
        self._timer_wake = threading.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.item_concurrency, thread_name_prefix=f"shardcar-{self.job_name}"
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
                    if self.resident:
                        self._hold(ctx)
                    else:
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
                request, timeout=self.worker.options.answer_timeout
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
            sub = self.worker._subscribe(
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
    def _hold(self, ctx: ShardingContext) -> None:
        """A resident item's hold, on a thread of its own: a hold lasts until it is cancelled,
        so a bounded pool would leave the items beyond its size waiting, held by nobody."""
        if self._closing.is_set():
            raise RuntimeError("the worker is closing")
        thread = threading.Thread(
            target=self._run_item,
            args=(ctx,),
            name=f"shardcar-{self.job_name}-hold-{ctx.sharding_item}",
            daemon=True,
        )
        thread.start()

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
