"""shardcar: Python workers for ElasticJob-style sharded, scheduled jobs via a local sidecar.

Quick start::

    from shardcar import Worker, JobConfig, ShardingContext

    worker = Worker(target="127.0.0.1:50061")   # or unix:///path; env SHARDCAR_TARGET
    @worker.job(JobConfig(job_name="orders", cron="0/5 * * * * ?", sharding_total_count=4))
    def handle(ctx: ShardingContext) -> None:
        ...                                     # one call per item; raise to report failure
    worker.run()                                # blocks; Ctrl-C drains cleanly

Everything else a worker can be told is a :class:`WorkerOptions`:
``Worker(target, options=WorkerOptions(item_concurrency=4, drain_timeout=60))``.

``@worker.dataflow(config, streaming=True)`` registers a dataflow job instead (ElasticJob's
``DataflowJob``: ``fetch(ctx) -> list`` and ``process(ctx, data)``; see :mod:`shardcar.dataflow`).
``@worker.resident(config)`` registers a resident job: ``handler(ctx)`` holds one item (a
partition, a key range) until ``ctx.cancelled``, and the item is handed to its next holder only
once it has returned.
``shardcar.aio.Worker`` is the asyncio twin (``async def`` handlers, ``await worker.run()``).
"""

from .config import ERROR_HANDLER_TYPES, JobConfig, RetryPolicy, ShardingStrategy
from .dataflow import STREAMING_PROCESS_KEY, AsyncDataflowJob, DataflowJob
from .errors import (
    AnswerRejectedError,
    AnswerTransportError,
    ExecutionFencedError,
    ExecutionNotFoundError,
    InstanceConflictError,
    InvalidJobConfigError,
    JobNotFoundError,
    PermissionDeniedError,
    RpcError,
    ShardcarError,
    SidecarShutdownError,
    SidecarUnavailableError,
)
from .events import (
    Assignment,
    Event,
    Lease,
    Registered,
    Revoke,
    ShardingContext,
    ShardItem,
    Shutdown,
    ShutdownKind,
    Trigger,
    TriggerSource,
)
from .options import InstanceSuffix, WorkerOptions
from .worker import Handler, Worker

__version__ = "0.1.0"

__all__ = [
    "Worker",
    "WorkerOptions",
    "InstanceSuffix",
    "Handler",
    "JobConfig",
    "RetryPolicy",
    "ERROR_HANDLER_TYPES",
    "ShardingStrategy",
    "DataflowJob",
    "AsyncDataflowJob",
    "STREAMING_PROCESS_KEY",
    "ShardingContext",
    "TriggerSource",
    "ShardItem",
    "Event",
    "Registered",
    "Assignment",
    "Trigger",
    "Revoke",
    "Shutdown",
    "ShutdownKind",
    "Lease",
    "ShardcarError",
    "SidecarUnavailableError",
    "InvalidJobConfigError",
    "JobNotFoundError",
    "InstanceConflictError",
    "AnswerRejectedError",
    "AnswerTransportError",
    "ExecutionNotFoundError",
    "ExecutionFencedError",
    "PermissionDeniedError",
    "SidecarShutdownError",
    "RpcError",
]
