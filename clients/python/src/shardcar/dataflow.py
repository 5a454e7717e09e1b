"""Dataflow jobs: ElasticJob's ``DataflowJob`` (``fetchData`` / ``processData``) for shardcar.

A dataflow job is an object with ``fetch(ctx) -> list`` and ``process(ctx, data)`` (``async
def`` both on the asyncio worker), registered with ``@worker.dataflow(config)``. Every item of
every trigger runs it as ElasticJob's ``DataflowJobExecutor`` does:

* **one-off** (the default): ``fetch`` once; ``process`` that data if it is not empty.
* **streaming** (the job prop ``streaming.process`` is ``"true"``): ``fetch``; while it returns
  data, ``process`` it and ``fetch`` again. Before each further fetch the loop ends if the item
  is no longer eligible to run: it was cancelled (revoke, lease lapse, its stream ended, a
  forced stop), the worker is stopping or the sidecar sent ``Shutdown``, or a resharding since
  the trigger gave the item to another instance.

The item is answered ``Complete`` when the loop ends by itself (no data, stopping, handed
over) and ``ReportFailure`` when ``fetch`` or ``process`` raises; a cancelled item is declined
as every cancelled item is, never answered (the data fetched after the cancellation is not
processed).

``streaming.process`` is read at the start of every item from the job's effective config, the
one the sidecar reported when the worker (last) subscribed: ZooKeeper's when the job already
existed, so a change made there reaches the worker at its next subscription.
``@worker.dataflow(config, streaming=True)`` writes the prop into the config the worker sends
(stored when it creates the job, or with ``overwrite=True``).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import (
    TYPE_CHECKING,
    Any,
    List,
    Mapping,
    Optional,
    Protocol,
    Sized,
    Type,
    TypeVar,
    Union,
)

from ._common import JobSpec, log
from .config import JobConfig
from .events import ShardingContext

if TYPE_CHECKING:  # the drivers import this module
    from ._driver import RunnerBase

__all__ = [
    "STREAMING_PROCESS_KEY",
    "DataflowJob",
    "AsyncDataflowJob",
    "is_streaming",
    "with_streaming",
]

#: The job prop that turns streaming on (ElasticJob's ``DataflowJobProperties.STREAM_PROCESS_KEY``).
STREAMING_PROCESS_KEY = "streaming.process"

T = TypeVar("T")


class DataflowJob(Protocol[T]):
    """What ``@shardcar.Worker.dataflow`` takes: an instance, or a class it instantiates once
    without arguments.

    ``fetch`` returns the next batch of the item's data (a list, or any sized sequence; ``None``
    or empty means none); ``process`` handles one batch. Either one raising reports the item
    failed.
    """

    def fetch(self, ctx: ShardingContext) -> Optional[List[T]]: ...

    def process(self, ctx: ShardingContext, data: List[T]) -> None: ...


class AsyncDataflowJob(Protocol[T]):
    """The asyncio form of :class:`DataflowJob` (``shardcar.aio.Worker.dataflow``): both
    methods are ``async def``."""

    async def fetch(self, ctx: ShardingContext) -> Optional[List[T]]: ...

    async def process(self, ctx: ShardingContext, data: List[T]) -> None: ...


#: A dataflow job as the decorators take it: an instance or a class.
SyncJobLike = Union[DataflowJob[Any], Type[DataflowJob[Any]]]
AsyncJobLike = Union[AsyncDataflowJob[Any], Type[AsyncDataflowJob[Any]]]


def is_streaming(props: Mapping[str, str]) -> bool:
    """Whether ``props`` turn streaming on: ``streaming.process`` is ``"true"`` in any case,
    as Java's ``Boolean.parseBoolean`` reads it (anything else, or no such prop, is off)."""
    return str(props.get(STREAMING_PROCESS_KEY, "")).lower() == "true"


def with_streaming(config: JobSpec, streaming: Optional[bool]) -> JobSpec:
    """``config`` with ``streaming.process`` set to ``"true"`` / ``"false"`` (unchanged for
    ``None``). A bare job name carries no config to write it into: ``ValueError``."""
    if streaming is None:
        return config
    if not isinstance(config, JobConfig):
        raise ValueError(
            f"streaming={streaming!r} needs a JobConfig to write the {STREAMING_PROCESS_KEY!r} "
            f"prop into; a job joined by name ({config!r}) follows the prop of its stored config"
        )
    props = dict(config.props)
    props[STREAMING_PROCESS_KEY] = "true" if streaming else "false"
    return dataclasses.replace(config, props=props)


def _instance(job: Any) -> Any:
    return job() if inspect.isclass(job) else job


def _methods(job: Any) -> None:
    for name in ("fetch", "process"):
        if not callable(getattr(job, name, None)):
            raise TypeError(f"a dataflow job needs a {name}() method; {job!r} has none")


def _no_data(data: Optional[Sized]) -> bool:
    return data is None or len(data) == 0


class _Dataflow:
    """What the sync and asyncio dataflow handlers share: the streaming decision and the
    checks between batches. ``bind`` gives it the job's runner once registered."""

    def __init__(self, job: Any, streaming: Optional[bool]) -> None:
        self.job = job
        self.explicit = streaming
        self._runner: Optional["RunnerBase[Any]"] = None
        self._warned: Optional[JobConfig] = None

    def bind(self, runner: "RunnerBase[Any]") -> None:
        self._runner = runner

    def _require_runner(self) -> "RunnerBase[Any]":
        if self._runner is None:
            raise RuntimeError("dataflow handler used before it was registered")
        return self._runner

    def streaming(self) -> bool:
        """The mode of an item starting now: the effective config's prop (the local config's
        before any registration)."""
        runner = self._require_runner()
        effective = runner.effective_config
        config = effective if effective is not None else runner.config
        mode = is_streaming(config.props) if isinstance(config, JobConfig) else False
        if (
            self.explicit is not None
            and effective is not None
            and mode != self.explicit
            and self._warned is not effective
        ):
            self._warned = effective
            log.warning(
                "job %s: @dataflow(streaming=%s) but the job's stored config has %s=%r (a "
                "config is written only when the job is created, or with overwrite=True): the "
                "stored one is followed",
                runner.job_name,
                self.explicit,
                STREAMING_PROCESS_KEY,
                effective.props.get(STREAMING_PROCESS_KEY),
            )
        return mode

    def stop_reason(self, ctx: ShardingContext) -> Optional[str]:
        """Why a streaming item fetches no more (checked before every further fetch), or
        ``None`` while it is still eligible to run."""
        if ctx.cancelled:
            return ctx.cancel_reason or "cancelled"
        runner = self._require_runner()
        winding_down = runner.core.winding_down
        if winding_down is not None:
            return winding_down
        if runner.handed_over(ctx):
            return "a resharding gave the item to another instance"
        return None

    def ended(self, ctx: ShardingContext, batches: int, why: str) -> None:
        level = log.debug if why == "no more data" else log.info
        level(
            "job %s item %d of %s: dataflow ended after %d batch(es): %s",
            ctx.job_name,
            ctx.sharding_item,
            ctx.execution_id,
            batches,
            why,
        )


class SyncDataflow(_Dataflow):
    """The handler of a dataflow job on the sync :class:`shardcar.Worker`."""

    def __init__(self, job: Any, streaming: Optional[bool]) -> None:
        job = _instance(job)
        _methods(job)
        for name in ("fetch", "process"):
            if inspect.iscoroutinefunction(getattr(job, name)):
                raise TypeError(
                    f"{name}() of {job!r} is async: register it on shardcar.aio.Worker, or make "
                    "fetch and process plain functions"
                )
        super().__init__(job, streaming)

    def __call__(self, ctx: ShardingContext) -> None:
        streaming = self.streaming()
        batches = 0
        while True:
            data = self.job.fetch(ctx)
            if _no_data(data):
                return self.ended(ctx, batches, "no more data")
            if ctx.cancelled:  # stop now: the data is not processed
                return self.ended(ctx, batches, f"cancelled: {ctx.cancel_reason}")
            self.job.process(ctx, data)
            batches += 1
            if not streaming:
                return self.ended(ctx, batches, "one-off")
            why = self.stop_reason(ctx)
            if why is not None:
                return self.ended(ctx, batches, why)


class AsyncDataflow(_Dataflow):
    """The handler of a dataflow job on :class:`shardcar.aio.Worker` (``async`` methods)."""

    def __init__(self, job: Any, streaming: Optional[bool]) -> None:
        job = _instance(job)
        _methods(job)
        for name in ("fetch", "process"):
            if not inspect.iscoroutinefunction(getattr(job, name)):
                raise TypeError(
                    f"{name}() of {job!r} is not async: shardcar.aio.Worker needs async def "
                    "fetch and process (plain ones belong on shardcar.Worker)"
                )
        super().__init__(job, streaming)

    async def __call__(self, ctx: ShardingContext) -> None:
        streaming = self.streaming()
        batches = 0
        while True:
            data = await self.job.fetch(ctx)
            if _no_data(data):
                return self.ended(ctx, batches, "no more data")
            if ctx.cancelled:  # stop now: the data is not processed
                return self.ended(ctx, batches, f"cancelled: {ctx.cancel_reason}")
            await self.job.process(ctx, data)
            batches += 1
            if not streaming:
                return self.ended(ctx, batches, "one-off")
            why = self.stop_reason(ctx)
            if why is not None:
                return self.ended(ctx, batches, why)
