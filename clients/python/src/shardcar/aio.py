"""The asyncio client: :class:`Worker` with ``async def`` handlers and :class:`Subscription`.

Same behaviour as :mod:`shardcar.worker`, on ``grpc.aio``, driving the same protocol core
(:mod:`shardcar._core`): each item runs as a task (at most ``max_concurrency`` at once per job);
revoke, lease expiry, a lost stream or a forced stop cancel the task (``asyncio.CancelledError``
inside the handler), and the item is declined instead of answered. ``ctx.cancelled`` and
``await ctx.wait_async(t)`` check the lease at the moment they are called, so a handler that
did not yield to the event loop (a blocking section, a paused process) still learns at once.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import threading
import time
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
)

import grpc
import grpc.aio

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

__all__ = ["Worker", "Subscription", "AsyncHandler"]

AsyncHandler = Callable[[ShardingContext], Awaitable[None]]
AssignmentCallback = Callable[[Assignment], object]
Key = Tuple[str, int]


class Subscription:
    """One ``Subscribe`` stream: ``async for`` it for typed events, answer through it.

    Like :class:`shardcar.Subscription`: no reconnect, leases tracked but not enforced; answers
    raise :class:`~shardcar.AnswerRejectedError` when refused and
    :class:`~shardcar.AnswerTransportError` when they failed in transport.
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

    async def __aiter__(self) -> AsyncIterator[Event]:
        try:
            async for msg in self._call:
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
        except asyncio.CancelledError:
            if self._closed:
                return
            raise

    async def complete(self, execution_id: str, items: Sequence[int]) -> None:
        """Reports items done."""
        req = pb.CompleteRequest(
            instance_id=self._require_instance(), execution_id=execution_id, items=list(items)
        )
        await self._answer(self._stub.Complete, req)

    async def report_failure(self, execution_id: str, item: int, error: str) -> None:
        """Reports one item failed with ``error`` (cut to 16384 bytes of UTF-8)."""
        req = pb.ReportFailureRequest(
            instance_id=self._require_instance(),
            execution_id=execution_id,
            item=item,
            error=truncate_utf8(error),
        )
        await self._answer(self._stub.ReportFailure, req)

    async def decline(self, execution_id: str, items: Sequence[int] = (), reason: str = "") -> None:
        """Gives items back without an outcome (empty ``items``: all of the execution)."""
        req = pb.DeclineRequest(
            instance_id=self._require_instance(),
            execution_id=execution_id,
            items=list(items),
            reason=truncate_utf8(reason),
        )
        await self._answer(self._stub.Decline, req)

    async def _answer(self, method: Any, req: Any) -> None:
        try:
            await method(req, timeout=self._timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err, target=self._target, during="answer") from None

    def close(self) -> None:
        """Ends the stream; the sidecar removes the instance at once."""
        self._closed = True
        self._call.cancel()

    async def __aenter__(self) -> "Subscription":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def _require_instance(self) -> str:
        if self.instance_id is None:
            raise ShardcarError("no Registered event received yet on this stream")
        return self.instance_id


class Worker:
    """The asyncio twin of :class:`shardcar.Worker`; same arguments, ``await worker.run()``.

    Create it inside the event loop that runs it (``grpc.aio`` channels belong to one loop).
    ``exit_on_shutdown`` (default ``True``): after a sidecar ``Shutdown`` the job stops once the
    sidecar has ended its stream; ``False`` reconnects instead. ``instance_id`` and
    ``unique_instance`` choose the instance id as for the sync worker.
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
        self._options = options
        self._channel: Optional[grpc.aio.Channel] = None
        self._stub: Optional[pb_grpc.WorkerServiceStub] = None
        self._jobs: List[_JobRunner] = []
        self._assignment_callbacks: List[AssignmentCallback] = []
        self._stop: Optional[asyncio.Event] = None
        self._force = False

    @property
    def instance_suffix(self) -> str:
        """The ``instance_suffix`` this worker subscribes with: ``{pid}-{8 random hex}``, the
        same on every (re)connect of this worker; ``""`` when ``unique_instance`` is off (the
        instance id is then ``instance_id``, or ``{sidecar ip}@-@{pid}``)."""
        return make_instance_suffix(self._instance_token) if self.unique_instance else ""

    def _ensure_channel(self) -> pb_grpc.WorkerServiceStub:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(
                self.target, options=channel_options(self.target, self._options)
            )
            self._stub = pb_grpc.WorkerServiceStub(self._channel)
        return self._stub

    def job(
        self,
        config: JobSpec,
        *,
        overwrite: bool = False,
        max_concurrency: Optional[int] = None,
    ) -> Callable[[AsyncHandler], AsyncHandler]:
        """Decorator for ``async def handler(ctx)``: one call per item of every trigger."""

        def register(handler: AsyncHandler) -> AsyncHandler:
            name = job_name_of(config)
            if any(r.job_name == name for r in self._jobs):
                raise ValueError(f"job {name!r} already has a handler on this worker")
            self._jobs.append(
                _JobRunner(self, config, handler, overwrite, max_concurrency or self.max_concurrency)
            )
            return handler

        return register

    def on_assignment(self, callback: AssignmentCallback) -> AssignmentCallback:
        """Decorator: ``callback(assignment)`` (plain or ``async``) on every ``Assignment``."""
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
        return Subscription(self._ensure_channel(), req, self.target, self.answer_timeout)

    async def run(self, *, handle_signals: bool = True) -> None:
        """Runs every job until :meth:`stop`, SIGINT or SIGTERM (then drains), like the sync one.

        Returns by itself when every job has stopped (after a sidecar ``Shutdown``). Cancelling
        the task that awaits ``run`` cancels running items and returns promptly.
        """
        if not self._jobs:
            raise ShardcarError("no jobs registered: decorate a handler with @worker.job(...)")
        self._ensure_channel()
        self._stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        installed: List[signal.Signals] = []
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(sig, self._on_signal)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError, ValueError):
                    pass
        try:
            for runner in self._jobs:
                runner.start()
            waiters = [asyncio.ensure_future(self._stop.wait())] + [r.done for r in self._jobs]
            while not self._stop.is_set():
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                if any(r.fatal for r in self._jobs) or all(r.done.done() for r in self._jobs):
                    break
            waiters[0].cancel()
            await self._drain()
        except asyncio.CancelledError:
            self._force = True
            raise
        finally:
            for runner in self._jobs:
                await runner.close()
            for sig in installed:
                loop.remove_signal_handler(sig)
        for runner in self._jobs:
            if runner.fatal is not None:
                raise runner.fatal

    def stop(self, *, force: bool = False) -> None:
        """Asks :meth:`run` to return: drain first, or cancel running items with ``force``."""
        self._force = self._force or force
        if self._stop is not None:
            self._stop.set()
        if force:
            for runner in self._jobs:
                runner.cancel_running("worker forced to stop")

    async def close(self) -> None:
        self.stop(force=True)
        if self._channel is not None:
            await self._channel.close()

    async def __aenter__(self) -> "Worker":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _on_signal(self) -> None:
        if self._stop is not None and self._stop.is_set():
            log.warning("second stop signal: cancelling running items")
            self.stop(force=True)
        else:
            log.info("stop signal: draining (again to force)")
            self.stop()

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.drain_timeout
        for runner in self._jobs:
            runner.begin_drain()
        for runner in self._jobs:
            await runner.wait_idle(deadline, lambda: self._force)


class _JobRunner:
    """One job of an asyncio :class:`Worker`: the driver of its :class:`ProtocolCore`.

    A stream task, a timer task, one task per item and one per answer call. Outputs are
    performed on the event loop (handed over with ``call_soon_threadsafe`` when a context is
    checked from another thread, e.g. a handler's ``run_in_executor`` function).
    """

    def __init__(
        self,
        worker: Worker,
        config: JobSpec,
        handler: AsyncHandler,
        overwrite: bool,
        max_concurrency: int,
    ) -> None:
        self.worker = worker
        self.config = config
        self.job_name = job_name_of(config)
        self.handler = handler
        self.overwrite = overwrite
        self.fatal: Optional[ShardcarError] = None
        self.core = ProtocolCore(
            self.job_name,
            exit_on_shutdown=worker.exit_on_shutdown,
            retry_initial=worker.backoff_initial,
            retry_max=worker.backoff_max,
        )
        self.max_concurrency = max_concurrency
        self._tasks: Dict[Key, "asyncio.Task[Tuple[Outcome, str]]"] = {}
        self._calls: Set["asyncio.Task[None]"] = set()
        # asyncio objects are created in start(), inside the loop that runs them.
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread = 0
        self._timer_wake: Optional[asyncio.Event] = None
        self._sem: Optional[asyncio.Semaphore] = None
        self._sub: Optional[Subscription] = None
        self._background: List["asyncio.Task[None]"] = []
        self._ever_registered = False
        self._closing = False
        self.done: "asyncio.Future[None]"

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self.done = loop.create_future()
        self._timer_wake = asyncio.Event()
        self._sem = asyncio.Semaphore(self.max_concurrency)
        self._background = [
            loop.create_task(self._stream_loop()),
            loop.create_task(self._timer_loop()),
        ]

    # -- outputs --------------------------------------------------------------------------------
    def _perform(self, outputs: List[Output]) -> None:
        if not outputs:
            return
        loop = self._loop
        assert loop is not None
        if threading.get_ident() != self._loop_thread:
            try:
                loop.call_soon_threadsafe(self._perform, outputs)
            except RuntimeError:  # the loop is closed
                pass
            return
        for out in outputs:
            if isinstance(out, StartItem):
                ctx = out.ctx
                ctx._probe = functools.partial(self._probe, ctx)
                key = (ctx.execution_id, ctx.sharding_item)
                task = loop.create_task(self._run_item(ctx))
                self._tasks[key] = task
                task.add_done_callback(functools.partial(self._item_done, ctx))
            elif isinstance(out, CancelItem):
                running = self._tasks.get((out.ctx.execution_id, out.ctx.sharding_item))
                if running is not None:
                    running.cancel()
            elif isinstance(out, SendCall):
                call_task = loop.create_task(self._send(out.call))
                self._calls.add(call_task)
                call_task.add_done_callback(self._calls.discard)
            elif isinstance(out, Stop):
                pass  # the stream task sees core.stopped and ends
        if self._timer_wake is not None:
            self._timer_wake.set()

    def _probe(self, ctx: ShardingContext) -> Tuple[Optional[bool], Optional[float]]:
        outputs, cancelled, lease_left = self.core.check(ctx.execution_id, ctx.sharding_item)
        self._perform(outputs)
        return cancelled, lease_left

    async def _send(self, call: AnswerCall) -> None:
        name, request = answer_request(call)
        stub = self.worker._ensure_channel()
        code, details = "OK", ""
        try:
            await getattr(stub, name)(request, timeout=self.worker.answer_timeout)
        except grpc.RpcError as err:
            code = err.code().name if hasattr(err, "code") else "UNKNOWN"
            details = (err.details() if hasattr(err, "details") else "") or ""
        except asyncio.CancelledError:
            raise  # the worker is closing: the result no longer matters
        except Exception as exc:  # e.g. the channel was closed: it never reached the sidecar
            code, details = "CANCELLED", str(exc)
        self._perform(self.core.answer_result(call.id, code, details))

    # -- stream ---------------------------------------------------------------------------------
    async def _stream_loop(self) -> None:
        backoff = Backoff(self.worker.backoff_initial, self.worker.backoff_max)
        first_deadline = time.monotonic() + self.worker.connect_timeout
        try:
            while not self._closing and not self.core.stopped:
                sub = self.worker.subscribe(self.config, overwrite=self.overwrite)
                self._sub = sub
                self._perform(self.core.stream_opened())
                reason = "stream ended by the sidecar"
                try:
                    async for event in sub:
                        if isinstance(event, Registered):
                            self._ever_registered = True
                            backoff.reset()
                            log.info("job %s: registered as %s", self.job_name, event.instance_id)
                        self._perform(self.core.on_event(event))
                        if isinstance(event, Assignment):
                            await self._assigned(event)
                except ShardcarError as err:
                    reason = str(err)
                    if self._is_fatal(err) or (
                        not self._ever_registered and time.monotonic() >= first_deadline
                    ):
                        self.fatal = err
                finally:
                    sub.close()
                    if self._sub is sub:
                        self._sub = None
                    if self._closing:
                        reason = "worker stopped"
                    self._perform(self.core.stream_ended(reason))
                if self.fatal is not None or self._closing or self.core.stopped:
                    break
                if not self._ever_registered and time.monotonic() >= first_deadline:
                    self.fatal = SidecarUnavailableError(
                        f"no registration from the sidecar at {self.worker.target!r} within "
                        f"{self.worker.connect_timeout}s: {reason}"
                    )
                    break
                delay = backoff.next()
                log.warning("job %s: %s; reconnecting in %.2fs", self.job_name, reason, delay)
                await asyncio.sleep(delay)
        finally:
            if not self.done.done():
                self.done.set_result(None)

    async def _assigned(self, event: Assignment) -> None:
        for callback in self.worker._assignment_callbacks:
            try:
                result = callback(event)
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("job %s: on_assignment callback failed", self.job_name)

    def _is_fatal(self, err: ShardcarError) -> bool:
        if isinstance(err, (InvalidJobConfigError, JobNotFoundError)):
            return True
        if isinstance(err, InstanceConflictError):
            return not self._ever_registered
        return not isinstance(err, SidecarUnavailableError) and not self._ever_registered

    # -- time -----------------------------------------------------------------------------------
    async def _timer_loop(self) -> None:
        wake = self._timer_wake
        assert wake is not None
        while not self._closing:
            self._perform(self.core.tick())
            deadline = self.core.next_deadline()
            timeout = 0.5
            if deadline is not None:
                timeout = min(timeout, max(0.0, deadline - time.monotonic()) + 0.001)
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    # -- items ----------------------------------------------------------------------------------
    async def _run_item(self, ctx: ShardingContext) -> Tuple[Outcome, str]:
        assert self._sem is not None
        async with self._sem:
            if ctx.cancelled:  # checked now: the lease may have run out while it waited
                return Outcome.STOPPED, ""
            try:
                await self.handler(ctx)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the handler's failure is reported, not raised
                if not ctx.cancelled:
                    log.warning(
                        "job %s item %d failed: %s", self.job_name, ctx.sharding_item, exc,
                        exc_info=True,
                    )
                return Outcome.FAILURE, failure_text(exc)
            return Outcome.COMPLETE, ""

    def _item_done(self, ctx: ShardingContext, task: "asyncio.Task[Tuple[Outcome, str]]") -> None:
        key = (ctx.execution_id, ctx.sharding_item)
        if self._tasks.get(key) is task:
            del self._tasks[key]
        if task.cancelled():
            outcome, error = Outcome.STOPPED, ""
        else:
            exc = task.exception()
            if exc is not None:  # a BaseException other than CancelledError
                outcome, error = Outcome.FAILURE, failure_text(exc)
            else:
                outcome, error = task.result()
        self._perform(self.core.handler_done(ctx.execution_id, ctx.sharding_item, outcome, error))

    # -- stopping -------------------------------------------------------------------------------
    def begin_drain(self) -> None:
        self._perform(self.core.request_stop())

    async def wait_idle(self, deadline: float, forced: Callable[[], bool]) -> None:
        while not self.core.idle() and not forced():
            if time.monotonic() >= deadline:
                log.warning("job %s: drain timeout; cancelling running items", self.job_name)
                break
            await asyncio.sleep(0.02)

    def cancel_running(self, reason: str) -> None:
        if self._loop is None:
            return
        self._perform(self.core.cancel_all(reason))

    async def close(self) -> None:
        self._closing = True
        self.cancel_running("worker stopped")
        if self._sub is not None:
            self._sub.close()
        tasks: List["asyncio.Future[Any]"] = list(self._tasks.values()) + list(self._calls)
        for task in self._background + list(self._calls):
            task.cancel()
        tasks += self._background
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
