"""The asyncio client: :class:`Worker` with ``async def`` handlers and :class:`Subscription`.

Same behaviour as :mod:`shardcar.worker`, on ``grpc.aio``: each item runs as a task (at most
``max_concurrency`` at once per job); revoke, lease expiry, a lost stream or a forced stop cancel
the task (``asyncio.CancelledError`` inside the handler) and its answer is not sent.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import AsyncIterator, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence

import grpc
import grpc.aio

from ._common import (
    Backoff,
    JobSpec,
    channel_options,
    failure_text,
    job_name_of,
    log,
    resolve_target,
    subscribe_request,
)
from ._proto import shardcar_pb2 as pb
from ._proto import shardcar_pb2_grpc as pb_grpc
from ._state import JobState
from .errors import (
    AnswerRejectedError,
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
    Revoke,
    ShardingContext,
    Shutdown,
    Trigger,
    event_from_proto,
)

__all__ = ["Worker", "Subscription", "AsyncHandler"]

AsyncHandler = Callable[[ShardingContext], Awaitable[None]]
AssignmentCallback = Callable[[Assignment], object]


class Subscription:
    """One ``Subscribe`` stream: ``async for`` it for typed events, answer through it.

    Like :class:`shardcar.Subscription`: no reconnect, leases tracked but not enforced.
    """

    def __init__(
        self, stub: pb_grpc.WorkerStub, request: pb.SubscribeRequest, target: str, timeout: float
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
        """Reports items done. Raises :class:`AnswerRejectedError` if the sidecar refuses."""
        req = pb.CompleteRequest(
            instance_id=self._require_instance(), execution_id=execution_id, items=list(items)
        )
        try:
            await self._stub.Complete(req, timeout=self._timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err, target=self._target, during="answer") from None

    async def report_failure(self, execution_id: str, item: int, error: str) -> None:
        """Reports one item failed with ``error``."""
        req = pb.ReportFailureRequest(
            instance_id=self._require_instance(),
            execution_id=execution_id,
            item=item,
            error=error,
        )
        try:
            await self._stub.ReportFailure(req, timeout=self._timeout)
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
    """

    def __init__(
        self,
        target: Optional[str] = None,
        *,
        max_concurrency: int = 8,
        instance_id: str = "",
        labels: Optional[Mapping[str, str]] = None,
        connect_timeout: float = 10.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        drain_timeout: float = 30.0,
        answer_timeout: float = 10.0,
        exit_on_shutdown: bool = False,
        options: Optional[Mapping[str, object]] = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.target = resolve_target(target)
        self.max_concurrency = max_concurrency
        self.instance_id = instance_id
        self.labels = dict(labels or {})
        self.connect_timeout = connect_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.drain_timeout = drain_timeout
        self.answer_timeout = answer_timeout
        self.exit_on_shutdown = exit_on_shutdown
        self._options = options
        self._channel: Optional[grpc.aio.Channel] = None
        self._stub: Optional[pb_grpc.WorkerStub] = None
        self._jobs: List[_JobRunner] = []
        self._assignment_callbacks: List[AssignmentCallback] = []
        self._stop: Optional[asyncio.Event] = None
        self._force = False

    def _ensure_channel(self) -> pb_grpc.WorkerStub:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(
                self.target, options=channel_options(self.target, self._options)
            )
            self._stub = pb_grpc.WorkerStub(self._channel)
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
            job, overwrite=overwrite, instance_id=self.instance_id, labels=self.labels
        )
        return Subscription(self._ensure_channel(), req, self.target, self.answer_timeout)

    async def run(self, *, handle_signals: bool = True) -> None:
        """Runs every job until :meth:`stop`, SIGINT or SIGTERM (then drains), like the sync one.

        Cancelling the task that awaits ``run`` cancels running items and returns promptly.
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
            runner.state.stop()
        for runner in self._jobs:
            await runner.wait_idle(deadline, lambda: self._force)


class _JobRunner:
    """One job of an asyncio :class:`Worker`: a stream task, a lease task, item tasks."""

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
        self.state = JobState(self.job_name)
        self.max_concurrency = max_concurrency
        self._tasks: Dict[int, asyncio.Task] = {}  # id(ctx) -> its item task
        # asyncio objects are created in start(), inside the loop that runs them.
        self._lease_changed: Optional[asyncio.Event] = None
        self._sem: Optional[asyncio.Semaphore] = None
        self._sub: Optional[Subscription] = None
        self._background: List[asyncio.Task] = []
        self._ever_registered = False
        self._shutdown_requested = False
        self._closing = False
        self.done: "asyncio.Future[None]"

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        self._lease_changed = asyncio.Event()
        self._sem = asyncio.Semaphore(self.max_concurrency)
        self._background = [
            loop.create_task(self._stream_loop()),
            loop.create_task(self._lease_loop()),
        ]

    def _cancel(self, contexts: Sequence[ShardingContext]) -> None:
        for ctx in contexts:
            task = self._tasks.get(id(ctx))
            if task is not None:
                task.cancel()

    async def _stream_loop(self) -> None:
        backoff = Backoff(self.worker.backoff_initial, self.worker.backoff_max)
        first_deadline = time.monotonic() + self.worker.connect_timeout
        try:
            while not self._closing:
                sub = self.worker.subscribe(self.config, overwrite=self.overwrite)
                self._cancel(self.state.new_stream(sub))
                self._sub = sub
                reason = "stream ended by the sidecar"
                try:
                    async for event in sub:
                        if isinstance(event, Registered):
                            self._ever_registered = True
                            backoff.reset()
                        if await self._on_event(event):
                            reason = "shutdown requested by the sidecar"
                            self._shutdown_requested = True
                            break
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
                    self._cancel(self.state.stream_lost(reason))
                if self.fatal is not None or self._closing or self._shutdown_requested:
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

    def _is_fatal(self, err: ShardcarError) -> bool:
        if isinstance(err, (InvalidJobConfigError, JobNotFoundError)):
            return True
        if isinstance(err, InstanceConflictError):
            return not self._ever_registered
        return not isinstance(err, SidecarUnavailableError) and not self._ever_registered

    async def _on_event(self, event: Event) -> bool:
        start: List[ShardingContext] = []
        if isinstance(event, Registered):
            self.state.registered(event.instance_id)
            log.info("job %s: registered as %s", self.job_name, event.instance_id)
        elif isinstance(event, Lease):
            start = self.state.on_lease(event)
            assert self._lease_changed is not None
            self._lease_changed.set()
        elif isinstance(event, Trigger):
            start = self.state.on_trigger(event)
        elif isinstance(event, Revoke):
            self._cancel(self.state.on_revoke(event.items, event.reason))
        elif isinstance(event, Shutdown):
            log.info("job %s: sidecar sent Shutdown (%s)", self.job_name, event.reason)
            self.state.draining = True
        elif isinstance(event, Assignment):
            for callback in self.worker._assignment_callbacks:
                try:
                    result = callback(event)
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    log.exception("job %s: on_assignment callback failed", self.job_name)
        loop = asyncio.get_running_loop()
        for ctx in start:
            self._tasks[id(ctx)] = loop.create_task(self._run_item(ctx))
        if isinstance(event, Shutdown) and self.worker.exit_on_shutdown:
            await self.wait_idle(time.monotonic() + self.worker.drain_timeout, lambda: self._closing)
            return True
        return False

    async def _lease_loop(self) -> None:
        assert self._lease_changed is not None
        while not self._closing:
            cancelled, deadline = self.state.check_lease()
            if cancelled:
                log.warning(
                    "job %s: lease expired; cancelled %d running item(s)",
                    self.job_name,
                    len(cancelled),
                )
                self._cancel(cancelled)
            timeout = 0.5
            if deadline is not None:
                timeout = min(timeout, max(0.0, deadline - time.monotonic()) + 0.001)
            self._lease_changed.clear()
            try:
                await asyncio.wait_for(self._lease_changed.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    async def _run_item(self, ctx: ShardingContext) -> None:
        error: Optional[BaseException] = None
        assert self._sem is not None
        try:
            async with self._sem:
                if not ctx.cancelled:
                    await self.handler(ctx)
        except asyncio.CancelledError:
            if not ctx.cancelled:
                ctx._cancel("cancelled")
        except Exception as exc:  # the handler's failure is reported, not raised
            error = exc
            if not ctx.cancelled:
                log.warning(
                    "job %s item %d failed: %s", self.job_name, ctx.sharding_item, exc,
                    exc_info=True,
                )
        finally:
            self._tasks.pop(id(ctx), None)
        run = self.state.finish(ctx)
        if run is None:
            log.info(
                "job %s item %d of %s: answer not sent (%s)",
                self.job_name,
                ctx.sharding_item,
                ctx.execution_id,
                ctx.cancel_reason or "stream or lease no longer current",
            )
            return
        sub = run.token
        assert isinstance(sub, Subscription)
        try:
            if error is None:
                await sub.complete(ctx.execution_id, [ctx.sharding_item])
            else:
                await sub.report_failure(ctx.execution_id, ctx.sharding_item, failure_text(error))
        except AnswerRejectedError as err:
            log.warning("job %s item %d: %s", self.job_name, ctx.sharding_item, err)
        except ShardcarError as err:
            log.warning("job %s item %d: answer not delivered: %s", self.job_name, ctx.sharding_item, err)

    async def wait_idle(self, deadline: float, forced: Callable[[], bool]) -> None:
        while self.state.running and not forced():
            if time.monotonic() >= deadline:
                log.warning("job %s: drain timeout; cancelling running items", self.job_name)
                break
            await asyncio.sleep(0.05)

    def cancel_running(self, reason: str) -> None:
        self._cancel(self.state.cancel_all(reason))

    async def close(self) -> None:
        self._closing = True
        self.cancel_running("worker stopped")
        if self._sub is not None:
            self._sub.close()
        tasks = list(self._tasks.values()) + self._background
        for task in self._background:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
