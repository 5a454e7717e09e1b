"""The asyncio client: :class:`Worker` with ``async def`` handlers.

Same behaviour as :mod:`shardcar.worker`, on ``grpc.aio``, driving the same protocol core
(:mod:`shardcar._core`): each item runs as a task (at most ``item_concurrency`` at once per job,
whichever execution it belongs to; up to ``max_concurrent_executions`` executions run at once);
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
    Optional,
    Sequence,
    Set,
    Tuple,
    TypeVar,
)

import grpc
import grpc.aio

from ._common import JobSpec, answer_request, channel_options, failure_text, log
from ._core import AnswerCall, CancelItem, Outcome, Output, Reconnect, SendCall, StartItem, Stop
from ._driver import (
    AssignmentCallback,
    RunnerBase,
    SubscriptionBase,
    WorkerBase,
    _item_concurrency,
    refuse_resident,
    rpc_status,
)
from ._proto import shardcar_pb2_grpc as pb_grpc
from .dataflow import AsyncDataflow, AsyncDataflowJob, AsyncJobLike, with_streaming
from .errors import ShardcarError
from .events import Assignment, Event, ShardingContext

__all__ = ["Worker", "AsyncHandler", "AsyncDataflowJob"]

AsyncHandler = Callable[[ShardingContext], Awaitable[None]]
Key = Tuple[str, int]
AsyncDataflowJobT = TypeVar("AsyncDataflowJobT", bound=AsyncJobLike)


class _Subscription(SubscriptionBase):
    """One ``Subscribe`` stream, for a job runner (private: it enforces no lease; the runner's
    protocol core does): ``async for`` it for typed events, answer through it. Answers raise
    :class:`~shardcar.AnswerRejectedError` when refused and
    :class:`~shardcar.AnswerTransportError` when they failed in transport.
    """

    async def __aiter__(self) -> AsyncIterator[Event]:
        try:
            async for msg in self._call:
                event = self._event(msg)
                if event is not None:
                    yield event
        except grpc.RpcError as err:
            error = self._stream_error(err)
            if error is not None:
                raise error from None
        except asyncio.CancelledError:
            if self._closed:
                return
            raise

    async def complete(self, execution_id: str, items: Sequence[int]) -> None:
        """Reports items done."""
        await self._answer(self._stub.Complete, self._complete_request(execution_id, items))

    async def report_failure(self, execution_id: str, item: int, error: str) -> None:
        """Reports one item failed with ``error`` (cut to 16384 bytes of UTF-8)."""
        await self._answer(
            self._stub.ReportFailure, self._failure_request(execution_id, item, error)
        )

    async def decline(self, execution_id: str, items: Sequence[int] = (), reason: str = "") -> None:
        """Gives items back without an outcome (empty ``items``: all of the execution)."""
        await self._answer(self._stub.Decline, self._decline_request(execution_id, items, reason))

    async def _answer(self, method: Any, req: Any) -> None:
        try:
            await method(req, timeout=self._timeout)
        except grpc.RpcError as err:
            raise self._answer_error(err) from None

    async def __aenter__(self) -> "_Subscription":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class Worker(WorkerBase[AsyncHandler]):
    """The asyncio twin of :class:`shardcar.Worker`: the same ``target`` and
    :class:`~shardcar.WorkerOptions`, ``async def`` handlers, ``await worker.run()``.

    Create it inside the event loop that runs it (``grpc.aio`` channels belong to one loop).
    ``item_concurrency`` bounds the item tasks of a job (a semaphore); a cancelled item's task
    is cancelled (``asyncio.CancelledError`` at its next ``await``).
    """

    def _setup(self) -> None:
        self._channel: Optional[grpc.aio.Channel] = None
        self._stub: Optional[pb_grpc.WorkerServiceStub] = None
        self._stop: Optional[asyncio.Event] = None

    def _ensure_channel(self) -> pb_grpc.WorkerServiceStub:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(
                self.target, options=channel_options(self.target, self.options.channel_options)
            )
            self._stub = pb_grpc.WorkerServiceStub(self._channel)
        return self._stub

    def _runner(
        self, config: JobSpec, handler: AsyncHandler, overwrite: bool, n: int, executions: int
    ) -> Any:
        return _JobRunner(self, config, handler, overwrite, n, executions)

    def _subscribe(
        self,
        job: JobSpec,
        *,
        overwrite: bool = False,
        max_concurrent_executions: Optional[int] = None,
    ) -> _Subscription:
        """Opens one event stream for ``job``, for a runner (as the sync worker's)."""
        request = self._subscribe_request(job, overwrite, max_concurrent_executions)
        return _Subscription(
            self._ensure_channel(), request, self.target, self.options.answer_timeout
        )

    def dataflow(
        self,
        config: JobSpec,
        *,
        streaming: Optional[bool] = None,
        overwrite: bool = False,
        item_concurrency: Optional[int] = None,
        max_concurrent_executions: Optional[int] = None,
        max_concurrency: Optional[int] = None,
    ) -> Callable[[AsyncDataflowJobT], AsyncDataflowJobT]:
        """Decorator: a dataflow job with ``async def fetch(ctx)`` and ``async def
        process(ctx, data)``; the same semantics as :meth:`shardcar.Worker.dataflow`. A
        cancelled item's task is also cancelled (``asyncio.CancelledError`` at its next
        ``await``)."""
        refuse_resident(config, "dataflow")
        spec = with_streaming(config, streaming)
        concurrency = _item_concurrency(item_concurrency, max_concurrency)

        def register(job: AsyncDataflowJobT) -> AsyncDataflowJobT:
            handler = AsyncDataflow(job, streaming)
            runner = self._register(
                spec, handler, overwrite, concurrency, max_concurrent_executions
            )
            handler.bind(runner)
            return job

        return register

    async def run(self, *, handle_signals: bool = True) -> None:
        """Runs every job until :meth:`stop`, SIGINT or SIGTERM (then drains), like the sync one.

        Returns by itself when every job has stopped (after a remote shutdown). Cancelling
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
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            for runner in self._jobs:
                runner.start()
            pending: Set["asyncio.Future[Any]"] = {stopped, *(r.done for r in self._jobs)}
            while not self._stop.is_set() and not self._finished():
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            await self._drain()
        except asyncio.CancelledError:
            self._force = True
            raise
        finally:
            stopped.cancel()
            for runner in self._jobs:
                await runner.close()
            for sig in installed:
                loop.remove_signal_handler(sig)
        self._raise_fatal()

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
        deadline = time.monotonic() + self.options.drain_timeout
        for runner in self._jobs:
            runner.begin_drain()
        for runner in self._jobs:
            await runner.wait_idle(deadline, lambda: self._force)


class _JobRunner(RunnerBase[AsyncHandler]):
    """One job of an asyncio :class:`Worker`: the driver of its :class:`ProtocolCore`.

    A stream task (subscribe, feed events, sleep when told to reconnect), a timer task, one
    task per item and one per answer call. Outputs are performed on the event loop (handed over
    with ``call_soon_threadsafe`` when a context is checked from another thread, e.g. a
    handler's ``run_in_executor`` function).
    """

    worker: Worker

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._tasks: Dict[Key, "asyncio.Task[Tuple[Outcome, str]]"] = {}
        self._calls: Set["asyncio.Task[None]"] = set()
        # asyncio objects are created in start(), inside the loop that runs them.
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread = 0
        self._timer_wake: Optional[asyncio.Event] = None
        self._sem: Optional[asyncio.Semaphore] = None
        self._sub: Optional[_Subscription] = None
        self._background: List["asyncio.Task[None]"] = []
        self._closing = False
        self.done: "asyncio.Future[None]"

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self.done = loop.create_future()
        self._timer_wake = asyncio.Event()
        self._sem = asyncio.Semaphore(self.item_concurrency)
        self._background = [
            loop.create_task(self._stream_loop()),
            loop.create_task(self._timer_loop()),
        ]

    # -- outputs (Stop, Reconnect: the stream task reads them itself) ---------------------------
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
                task = loop.create_task(self._run_item(ctx))
                self._tasks[(ctx.execution_id, ctx.sharding_item)] = task
                task.add_done_callback(functools.partial(self._item_done, ctx))
            elif isinstance(out, CancelItem):
                running = self._tasks.get((out.ctx.execution_id, out.ctx.sharding_item))
                if running is not None:
                    running.cancel()
            elif isinstance(out, SendCall):
                call_task = loop.create_task(self._send(out.call))
                self._calls.add(call_task)
                call_task.add_done_callback(self._calls.discard)
            elif isinstance(out, Stop) and out.error is not None and not self.done.done():
                # Stopped with an error while its stream is open (a registration of the wrong
                # kind): run() wakes, drains and raises it.
                self.done.set_result(None)
        if self._timer_wake is not None:
            self._timer_wake.set()

    async def _send(self, call: AnswerCall) -> None:
        name, request = answer_request(call)
        stub = self.worker._ensure_channel()
        code, details = "OK", ""
        try:
            await getattr(stub, name)(request, timeout=self.worker.options.answer_timeout)
        except grpc.RpcError as err:
            code, details = rpc_status(err)
        except asyncio.CancelledError:
            raise  # the worker is closing: the result no longer matters
        except Exception as exc:  # e.g. the channel was closed: it never reached the sidecar
            code, details = "CANCELLED", str(exc)
        self._perform(self.core.answer_result(call.id, code, details))

    # -- stream ---------------------------------------------------------------------------------
    async def _stream_loop(self) -> None:
        try:
            while not self.core.stopped:
                sub = self.worker._subscribe(
                    self.config,
                    overwrite=self.overwrite,
                    max_concurrent_executions=self.max_concurrent_executions,
                )
                self._sub = sub
                self._perform(self.core.stream_opened())
                error: Optional[ShardcarError] = None
                outputs: List[Output] = []
                try:
                    async for event in sub:
                        self._observe(event)
                        self._perform(self.core.on_event(event))
                        if isinstance(event, Assignment):
                            await self._assigned(event)
                except ShardcarError as err:
                    error = err
                finally:
                    sub.close()
                    if self._sub is sub:
                        self._sub = None
                    closed = "worker stopped" if self._closing else ""
                    outputs = self.core.stream_ended(closed, None if closed else error)
                    self._perform(outputs)
                for out in outputs:
                    if isinstance(out, Reconnect):
                        await asyncio.sleep(out.delay)
        finally:
            if not self.done.done():
                self.done.set_result(None)

    async def _assigned(self, event: Assignment) -> None:
        callbacks: List[AssignmentCallback] = self.worker._assignment_callbacks
        for callback in callbacks:
            try:
                result = callback(event)
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("job %s: on_assignment callback failed", self.job_name)

    # -- time -----------------------------------------------------------------------------------
    async def _timer_loop(self) -> None:
        wake = self._timer_wake
        assert wake is not None
        while not self._closing:
            self._perform(self.core.tick())
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), self.core.timer_wait())
            except asyncio.TimeoutError:
                pass

    # -- items ----------------------------------------------------------------------------------
    async def _run_item(self, ctx: ShardingContext) -> Tuple[Outcome, str]:
        assert self._sem is not None
        if self.resident:
            # A hold lasts until it is cancelled: bounded, the items beyond the bound would
            # wait, held by nobody.
            return await self._call_handler(ctx)
        async with self._sem:
            return await self._call_handler(ctx)

    async def _call_handler(self, ctx: ShardingContext) -> Tuple[Outcome, str]:
        if ctx.cancelled:  # checked now: the lease may have run out while it waited
            return Outcome.STOPPED, ""
        try:
            with self._handler_span(ctx):
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
        if self._loop is not None:
            self._perform(self.core.request_stop())  # the stream's end stops the job
        self.cancel_running("worker stopped")
        if self._sub is not None:
            self._sub.close()
        tasks: List["asyncio.Future[Any]"] = list(self._tasks.values()) + list(self._calls)
        for task in self._background + list(self._calls):
            task.cancel()
        tasks += self._background
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
