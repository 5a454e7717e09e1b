"""What the sync (``worker.py``) and asyncio (``aio.py``) drivers share, none of it I/O.

The settings and job registry of a worker (:class:`WorkerBase`), the bookkeeping of a raw
subscription (:class:`SubscriptionBase`: requests, the events it tracks, error mapping), and
the part of a job runner that is not threads or tasks (:class:`RunnerBase`: its
:class:`~shardcar._core.ProtocolCore`, the handler's cancellation probe). The drivers add only
how things run: threads and blocking calls, or tasks and ``await``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import (
    Any,
    Callable,
    ContextManager,
    Generic,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
)

import grpc

from ._common import (
    JobSpec,
    check_max_concurrent_executions,
    job_name_of,
    make_instance_suffix,
    new_instance_token,
    resolve_max_concurrent_executions,
    resolve_target,
    sends_instance_suffix,
    subscribe_request,
    truncate_utf8,
)
from ._core import Output, ProtocolCore, ReconnectPolicy
from ._proto import shardcar_pb2 as pb
from ._tracing import item_tracer, no_span
from .config import JobConfig
from .errors import ShardcarError, from_rpc_error
from .options import WorkerOptions, deprecated, options_with_legacy
from .events import (
    Assignment,
    Event,
    Lease,
    Registered,
    ShardingContext,
    Trigger,
    event_from_proto,
)

H = TypeVar("H")  # a handler: sync or async
AssignmentCallback = Callable[[Assignment], object]


class SubscriptionBase:
    """One ``Subscribe`` stream: the events it tracks, the answers it builds, how it fails."""

    def __init__(self, stub: Any, request: pb.SubscribeRequest, target: str, timeout: float) -> None:
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

    def _event(self, msg: pb.SubscribeResponse) -> Optional[Event]:
        event = event_from_proto(msg, self.job_name)
        if isinstance(event, Registered):
            self.instance_id = event.instance_id
        elif isinstance(event, Lease):
            self.lease = event
        return event

    def _stream_error(self, err: grpc.RpcError) -> Optional[ShardcarError]:
        """The error a failed stream raises; ``None`` when :meth:`close` ended it."""
        if self._closed and err.code() == grpc.StatusCode.CANCELLED:
            return None
        return from_rpc_error(err, target=self._target, during="subscribe")

    def _answer_error(self, err: grpc.RpcError) -> ShardcarError:
        return from_rpc_error(err, target=self._target, during="answer")

    def _complete_request(self, execution_id: str, items: Sequence[int]) -> pb.CompleteRequest:
        return pb.CompleteRequest(
            instance_id=self._require_instance(), execution_id=execution_id, items=list(items)
        )

    def _failure_request(self, execution_id: str, item: int, error: str) -> pb.ReportFailureRequest:
        return pb.ReportFailureRequest(
            instance_id=self._require_instance(),
            execution_id=execution_id,
            item=item,
            error=truncate_utf8(error),
        )

    def _decline_request(
        self, execution_id: str, items: Sequence[int], reason: str
    ) -> pb.DeclineRequest:
        return pb.DeclineRequest(
            instance_id=self._require_instance(),
            execution_id=execution_id,
            items=list(items),
            reason=truncate_utf8(reason),
        )

    def close(self) -> None:
        """Ends the stream; the sidecar removes the instance at once."""
        self._closed = True
        self._call.cancel()

    def _require_instance(self) -> str:
        if self.instance_id is None:
            raise ShardcarError("no Registered event received yet on this stream")
        return self.instance_id


class WorkerBase(Generic[H]):
    """The target, options and registered jobs of a worker (see :class:`shardcar.Worker`)."""

    def __init__(
        self,
        target: Optional[str] = None,
        *,
        options: Optional[WorkerOptions] = None,
        **deprecated: Any,
    ) -> None:
        # Worker(...) -> WorkerBase.__init__ -> options_with_legacy: the user's call is 2 up.
        self.options = options_with_legacy(options, deprecated, stacklevel=2)
        self.target = resolve_target(target)
        self._sends_suffix = sends_instance_suffix(
            self.options.instance_suffix.value, self.options.instance_id
        )
        self._instance_token = new_instance_token()
        # None: tracing off, or opentelemetry not installed (imported here, never before).
        self._item_tracer = item_tracer(self.options.tracing, self.options.tracer_provider)
        self._jobs: List[Any] = []  # the driver's runners
        self._assignment_callbacks: List[AssignmentCallback] = []
        self._force = False
        self._setup()

    def _setup(self) -> None:
        """The driver's own state (channel, events), created by ``__init__``."""

    @property
    def instance_suffix(self) -> str:
        """The ``instance_suffix`` this worker subscribes with: ``{pid}-{8 random hex}``, the
        same on every (re)connect of this worker; ``""`` when it sends none (the instance id is
        then ``options.instance_id``, or ``{sidecar ip}@-@{pid}``)."""
        return make_instance_suffix(self._instance_token) if self._sends_suffix else ""

    def job(
        self,
        config: JobSpec,
        *,
        overwrite: bool = False,
        item_concurrency: Optional[int] = None,
        max_concurrent_executions: Optional[int] = None,
        max_concurrency: Optional[int] = None,
    ) -> Callable[[H], H]:
        """Decorator: ``handler(ctx)`` (``async def`` on the asyncio worker) runs once per item
        of every trigger of this job.

        Returning reports the item complete; raising reports it failed with the exception text.
        ``config`` may be a bare job name to join a job that already exists; ``overwrite``
        replaces the stored configuration of an existing job with ``config``.
        ``item_concurrency`` and ``max_concurrent_executions`` override the worker's
        :class:`~shardcar.WorkerOptions` for this job (``max_concurrency`` is the deprecated
        name of ``item_concurrency``).
        """
        concurrency = _item_concurrency(item_concurrency, max_concurrency)
        refuse_resident(config, "job")

        def register(handler: H) -> H:
            self._register(config, handler, overwrite, concurrency, max_concurrent_executions)
            return handler

        return register

    def resident(self, config: JobSpec, *, overwrite: bool = False) -> Callable[[H], H]:
        """Decorator: a resident job (``JobConfig.resident``, which this sets): ``handler(ctx)``
        (``async def`` on the asyncio worker) *holds* one item, from the sidecar's ``RESIDENT``
        trigger until ``ctx.cancelled``: consume the partition, serve the key range, and return
        soon once cancelled (``ctx.wait(t)`` / ``await ctx.wait_async(t)`` sleep until then).

        The hold is cancelled when the sidecar revokes it (the item moves to another worker, or
        is disabled), the lease runs out, the stream is lost, the sidecar sends ``Shutdown`` or
        the worker stops; once the handler has returned the item is declined, and only then (or
        once the lease has run out) does its next holder start. A handler that returns while
        not cancelled is answered ``Complete``, one that raises ``ReportFailure``: either way
        the sidecar starts the item again after a backoff (the job's ``retry`` backoffs, else
        1 s doubling up to 1 min; ``ctx.attempt`` counts the restarts). Each hold runs on its own
        thread (its own task on the asyncio worker), whatever ``item_concurrency`` says.

        ``config``: a :class:`~shardcar.JobConfig` (``ValueError`` naming the field when it has
        what a resident job cannot: a ``cron``, ``failover``, an execution timeout,
        ``monitor_execution=False``), or the name of a resident job that exists. ``overwrite`` as
        for :meth:`job`. ``run()`` raises :class:`~shardcar.InvalidJobConfigError` (field
        ``resident``) when the job exists and is not resident.
        """
        spec: JobSpec = config
        if isinstance(config, JobConfig) and not config.resident:
            spec = dataclasses.replace(config, resident=True)

        def register(handler: H) -> H:
            self._register(spec, handler, overwrite, None, None, resident=True)
            return handler

        return register

    def _register(
        self,
        config: JobSpec,
        handler: H,
        overwrite: bool,
        item_concurrency: Optional[int],
        max_concurrent_executions: Optional[int] = None,
        *,
        resident: bool = False,
    ) -> Any:
        """Adds a job's runner (one handler per job and worker); returns the runner. A resident
        runner has no pool bound and sends no ``max_concurrent_executions``: the sidecar holds
        every item a worker owns at once, each in an execution of its own."""
        name = job_name_of(config)
        if any(r.job_name == name for r in self._jobs):
            raise ValueError(f"job {name!r} already has a handler on this worker")
        if item_concurrency is not None and item_concurrency < 1:
            raise ValueError("item_concurrency must be at least 1")
        concurrency = item_concurrency or self.options.item_concurrency
        executions: Optional[int] = None
        if not resident:
            if max_concurrent_executions is None:
                max_concurrent_executions = self.options.max_concurrent_executions
            executions = resolve_max_concurrent_executions(max_concurrent_executions, concurrency)
        runner = self._runner(config, handler, overwrite, concurrency, executions)
        runner.resident = resident
        runner.core.resident = resident
        self._jobs.append(runner)
        return runner

    def on_assignment(self, callback: AssignmentCallback) -> AssignmentCallback:
        """Decorator: ``callback(assignment)`` runs on every ``Assignment`` of every job (the
        asyncio worker awaits it when it is ``async``)."""
        self._assignment_callbacks.append(callback)
        return callback

    def _runner(
        self, config: JobSpec, handler: H, overwrite: bool, concurrency: int, executions: int
    ) -> Any:
        raise NotImplementedError

    def _subscribe_request(
        self, job: JobSpec, overwrite: bool, max_concurrent_executions: Optional[int] = None
    ) -> pb.SubscribeRequest:
        if max_concurrent_executions is not None:
            check_max_concurrent_executions(max_concurrent_executions)
        return subscribe_request(
            job,
            overwrite=overwrite,
            instance_id=self.options.instance_id,
            labels=self.options.labels,
            instance_suffix=self.instance_suffix,
            max_concurrent_executions=max_concurrent_executions,
        )

    def _finished(self) -> bool:
        """Whether :meth:`run` returns now: a job stopped with an error, or every job stopped."""
        return any(r.fatal for r in self._jobs) or all(r.core.stopped for r in self._jobs)

    def _raise_fatal(self) -> None:
        for runner in self._jobs:
            if runner.fatal is not None:
                raise runner.fatal


class RunnerBase(Generic[H]):
    """One job of a worker: its :class:`ProtocolCore` and what a driver does with it."""

    def __init__(
        self,
        worker: WorkerBase[H],
        config: JobSpec,
        handler: H,
        overwrite: bool,
        item_concurrency: int,
        max_concurrent_executions: Optional[int] = 1,
    ) -> None:
        self.worker = worker
        self.config = config
        self.job_name = job_name_of(config)
        self.handler = handler
        self.overwrite = overwrite
        #: The executor size: handlers of this job (items of any of its executions) at once.
        self.item_concurrency = item_concurrency
        #: Executions of this job at once, as every ``SubscribeRequest`` of the job says
        #: (``None``: unset, for a resident job).
        self.max_concurrent_executions = max_concurrent_executions
        #: A resident job's runner (``Worker.resident``): each hold on its own thread or task.
        self.resident = False
        options = worker.options
        backoff_initial, backoff_max = options.reconnect_backoff
        self.core = ProtocolCore(
            self.job_name,
            max_concurrent_executions=max_concurrent_executions,
            stop_on_drain=options.stop_on_drain,
            retry_initial=backoff_initial,
            retry_max=backoff_max,
            reconnect=ReconnectPolicy(
                connect_timeout=options.connect_timeout,
                backoff_initial=backoff_initial,
                backoff_max=backoff_max,
                target=worker.target,
            ),
        )

        # What the stream said about the job, for handlers that ask (dataflow jobs): the
        # effective config of the latest ``Registered``, the latest ``Assignment`` of the
        # current stream, and the one each trigger arrived under. Written by the stream thread
        # or task only (``_observe``), read by handlers.
        self._effective_config: Optional[JobConfig] = None
        self._assignment: Optional[Assignment] = None
        self._trigger_assignments: "OrderedDict[str, Optional[Assignment]]" = OrderedDict()
        self._observed = threading.Lock()

    @property
    def fatal(self) -> Optional[ShardcarError]:
        """The error this job stopped with, if any."""
        return self.core.stop_error

    @property
    def effective_config(self) -> Optional[JobConfig]:
        """The job's config as the sidecar last reported it (``Registered``: ZooKeeper's when
        the job already existed); ``None`` before the first registration."""
        return self._effective_config

    def _observe(self, event: Event) -> None:
        """Notes what an event of the current stream says about the job; the drivers call it
        for every event, in order, before the core sees it."""
        with self._observed:
            if isinstance(event, Registered):
                if event.config is not None:
                    self._effective_config = event.config
                self._assignment = None  # a new stream: its own assignments follow
            elif isinstance(event, Assignment):
                self._assignment = event
            elif isinstance(event, Trigger):
                self._trigger_assignments[event.execution_id] = self._assignment
                while len(self._trigger_assignments) > _TRIGGER_ASSIGNMENTS_KEPT:
                    self._trigger_assignments.popitem(last=False)

    def handed_over(self, ctx: ShardingContext) -> bool:
        """Whether an ``Assignment`` since ``ctx``'s trigger arrived took its item from this
        instance (ElasticJob's ``isNeedSharding``, for a sidecar that reshards at once instead
        of at the next fire): the latest one does not hold the item, and either the one the
        trigger came under did, or the sharding changed since (another epoch: for an item run
        for another instance, a failover, which no assignment of this instance holds)."""
        with self._observed:
            latest = self._assignment
            if latest is None or ctx.execution_id not in self._trigger_assignments:
                return False
            if ctx.sharding_item in latest.item_numbers:
                return False
            then = self._trigger_assignments[ctx.execution_id]
            if then is None:
                return True
            return ctx.sharding_item in then.item_numbers or latest.epoch != then.epoch

    def _perform(self, outputs: List[Output]) -> None:
        raise NotImplementedError

    def _handler_span(self, ctx: ShardingContext) -> ContextManager[Any]:
        """The block a handler runs in: its span (see :mod:`shardcar._tracing`), or nothing."""
        tracer = self.worker._item_tracer
        return no_span() if tracer is None else tracer.span(ctx)

    def _probe(self, ctx: ShardingContext) -> Tuple[Optional[bool], Optional[float]]:
        """``ctx.cancelled`` and the lease left, decided by the core now."""
        outputs, cancelled, lease_left = self.core.check(ctx.execution_id, ctx.sharding_item)
        self._perform(outputs)
        return cancelled, lease_left


def refuse_resident(config: JobSpec, kind: str) -> None:
    """``ValueError`` for a resident config given to ``@worker.job`` or ``@worker.dataflow``."""
    if isinstance(config, JobConfig) and config.resident:
        raise ValueError(
            f"resident: job {config.job_name!r} is resident; register its handler with "
            f"@worker.resident(config), not @worker.{kind}(config)"
        )


def _item_concurrency(
    item_concurrency: Optional[int], max_concurrency: Optional[int]
) -> Optional[int]:
    """A job's ``item_concurrency``, or its deprecated name ``max_concurrency``, with a warning
    that points at the user's ``job()`` or ``dataflow()`` call (three frames up from here)."""
    if max_concurrency is None:
        return item_concurrency
    if item_concurrency is not None:
        raise TypeError("give item_concurrency, not also its deprecated name max_concurrency")
    deprecated("job(max_concurrency=...) is deprecated: use job(item_concurrency=...)", 3)
    return max_concurrency


# How many triggers' assignments a runner remembers (far more than can run at once).
_TRIGGER_ASSIGNMENTS_KEPT = 4096


def rpc_status(err: BaseException) -> Tuple[str, str]:
    """The gRPC status name and message of a failed call (``UNKNOWN`` when it has none)."""
    code = err.code() if isinstance(err, grpc.RpcError) and hasattr(err, "code") else None
    if code is None:
        return "UNKNOWN", str(err)
    return code.name, (err.details() if hasattr(err, "details") else "") or ""
