"""Typed events of a worker stream and the per-item :class:`ShardingContext`.

The sidecar streams ``WorkerEvent`` messages; :func:`event_from_proto` turns each into one of the
frozen dataclasses below, which is what ``Worker.subscribe`` yields.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Dict, Optional, Tuple, Union

from ._proto import shardcar_pb2 as pb
from .config import JobConfig

__all__ = [
    "TriggerSource",
    "ShardItem",
    "Registered",
    "Assignment",
    "Trigger",
    "Revoke",
    "Shutdown",
    "Lease",
    "Event",
    "ShardingContext",
    "event_from_proto",
]


class TriggerSource(str, enum.Enum):
    """Why an execution started (ElasticJob's execution sources, plus manual triggers)."""

    CRON = "CRON"
    MISFIRE = "MISFIRE"
    FAILOVER = "FAILOVER"
    MANUAL = "MANUAL"

    @classmethod
    def from_proto(cls, value: int) -> "TriggerSource":
        return cls(pb.TriggerSource.Name(value))


@dataclass(frozen=True)
class ShardItem:
    item: int
    parameter: str = ""


@dataclass(frozen=True)
class Registered:
    """First event of a stream: the instance id and the job's effective config."""

    instance_id: str
    config: Optional[JobConfig]


@dataclass(frozen=True)
class Assignment:
    """The items this instance owns now; ``epoch`` grows with every resharding."""

    job_name: str
    items: Tuple[ShardItem, ...]
    leader: bool
    epoch: int

    @property
    def item_numbers(self) -> Tuple[int, ...]:
        return tuple(i.item for i in self.items)


@dataclass(frozen=True)
class Trigger:
    """Run these items now; answer each with ``Complete`` or ``ReportFailure``."""

    execution_id: str
    task_id: str
    items: Tuple[ShardItem, ...]
    job_parameter: str
    sharding_total_count: int
    source: TriggerSource
    fire_time: Optional[datetime]
    fencing_tokens: Dict[int, int]


@dataclass(frozen=True)
class Revoke:
    """Stop working on these items now; answers for them will be refused."""

    items: Tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class Shutdown:
    """The sidecar is ending the stream (remote shutdown or drain)."""

    reason: str


@dataclass(frozen=True)
class Lease:
    """Work is allowed until ``expires_at`` (``time.monotonic()`` clock): receipt + ``valid_for``."""

    valid_for: float
    sequence: int
    expires_at: float

    @property
    def valid(self) -> bool:
        return time.monotonic() < self.expires_at


Event = Union[Registered, Assignment, Trigger, Revoke, Shutdown, Lease]


def event_from_proto(msg: pb.WorkerEvent, job_name: str) -> Optional[Event]:
    """Converts one ``WorkerEvent``; ``None`` for an event kind this client does not know."""
    kind = msg.WhichOneof("event")
    if kind == "registered":
        r = msg.registered
        return Registered(
            instance_id=r.instance_id,
            config=JobConfig.from_proto(r.config) if r.HasField("config") else None,
        )
    if kind == "assignment":
        a = msg.assignment
        return Assignment(
            job_name=job_name,
            items=tuple(ShardItem(i.item, i.parameter) for i in a.items),
            leader=a.leader,
            epoch=a.epoch,
        )
    if kind == "trigger":
        t = msg.trigger
        fire_time = None
        if t.HasField("fire_time"):
            fire_time = datetime.fromtimestamp(
                t.fire_time.seconds + t.fire_time.nanos / 1e9, tz=timezone.utc
            )
        return Trigger(
            execution_id=t.execution_id,
            task_id=t.task_id,
            items=tuple(ShardItem(i.item, i.parameter) for i in t.items),
            job_parameter=t.job_parameter,
            sharding_total_count=t.sharding_total_count,
            source=TriggerSource.from_proto(t.source),
            fire_time=fire_time,
            fencing_tokens=dict(t.fencing_tokens),
        )
    if kind == "revoke":
        return Revoke(items=tuple(msg.revoke.items), reason=msg.revoke.reason)
    if kind == "shutdown":
        return Shutdown(reason=msg.shutdown.reason)
    if kind == "lease":
        valid_for = msg.lease.valid_for.seconds + msg.lease.valid_for.nanos / 1e9
        return Lease(
            valid_for=valid_for,
            sequence=msg.lease.sequence,
            expires_at=time.monotonic() + valid_for,
        )
    return None


@dataclass
class ShardingContext:
    """What a handler gets for one item of one execution (ElasticJob's ``ShardingContext``).

    ``cancelled`` turns true when the item is revoked, the lease runs out, the stream is lost or
    the worker is forced to stop; a handler that sees it should return soon, and its answer is
    not sent either way. Sync handlers can sleep with :meth:`wait`, which wakes on cancellation.
    """

    job_name: str
    task_id: str
    execution_id: str
    sharding_total_count: int
    job_parameter: str
    sharding_item: int
    sharding_parameter: str
    source: TriggerSource
    fencing_token: Optional[int]
    fire_time: Optional[datetime] = None
    instance_id: str = ""
    cancel_event: threading.Event = field(default_factory=threading.Event, repr=False)
    cancel_reason: str = field(default="", repr=False)

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Sleeps up to ``timeout`` seconds; returns ``True`` as soon as the item is cancelled."""
        return self.cancel_event.wait(timeout)

    def _cancel(self, reason: str) -> None:
        if not self.cancel_event.is_set():
            self.cancel_reason = reason
            self.cancel_event.set()


def contexts_for(trigger: Trigger, job_name: str, instance_id: str) -> Tuple[ShardingContext, ...]:
    """One context per item of ``trigger``."""
    return tuple(
        ShardingContext(
            job_name=job_name,
            task_id=trigger.task_id,
            execution_id=trigger.execution_id,
            sharding_total_count=trigger.sharding_total_count,
            job_parameter=trigger.job_parameter,
            sharding_item=si.item,
            sharding_parameter=si.parameter,
            source=trigger.source,
            fencing_token=trigger.fencing_tokens.get(si.item),
            fire_time=trigger.fire_time,
            instance_id=instance_id,
        )
        for si in trigger.items
    )
