"""The per-job bookkeeping shared by the sync and asyncio workers, free of I/O.

It decides, for every stream event, which items start, which running items are cancelled, and
whether a finished item's answer may be sent. The callers (``worker.py``, ``aio.py``) own the
threads or tasks and perform what it returns. Rules it enforces:

* an answer is sent only for an item that was not cancelled, whose stream (``generation``) is
  still the current one, and while the lease is valid;
* a lease that runs out cancels every running item, and no new work starts until a renewal;
  triggers arriving meanwhile wait for it (items revoked meanwhile are dropped);
* a new stream (reconnect) cancels everything from the old one.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from .events import Lease, ShardingContext, Trigger, contexts_for

Key = Tuple[str, int]


@dataclass
class ItemRun:
    ctx: ShardingContext
    generation: int
    token: object  # the caller's handle for the stream (a Subscription) that started it


class JobState:
    """Bookkeeping for one job's current stream. Not thread-safe: callers serialize access."""

    def __init__(self, job_name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.job_name = job_name
        self.clock = clock
        self.generation = 0
        self.instance_id = ""
        self.token: object = None
        self.lease: Optional[Lease] = None
        self.lease_lapsed = False
        self.draining = False  # no new work on this stream (Shutdown received, or stopping)
        self.stopping = False  # the worker is stopping: no new work on any stream
        self.running: Dict[Key, ItemRun] = {}
        self.pending: List[Trigger] = []

    # -- stream lifecycle -------------------------------------------------------------------
    def new_stream(self, token: object) -> List[ShardingContext]:
        """A new stream starts: everything of the old one is cancelled and forgotten."""
        cancelled = self._cancel_all("stream to the sidecar was replaced")
        self.generation += 1
        self.token = token
        self.instance_id = ""
        self.lease = None
        self.lease_lapsed = False
        self.draining = self.stopping
        self.pending.clear()
        return cancelled

    def stop(self) -> None:
        """No new work from now on (running items may finish and be answered)."""
        self.stopping = True
        self.draining = True
        self.pending.clear()

    def stream_lost(self, reason: str) -> List[ShardingContext]:
        """The stream ended: running items are cancelled, their answers will not be sent."""
        cancelled = self._cancel_all(reason)
        self.generation += 1
        self.token = None
        self.lease = None
        self.pending.clear()
        return cancelled

    def registered(self, instance_id: str) -> None:
        self.instance_id = instance_id

    # -- leases -----------------------------------------------------------------------------
    def lease_valid(self) -> bool:
        return self.lease is not None and self.clock() < self.lease.expires_at

    def on_lease(self, lease: Lease) -> List[ShardingContext]:
        """A renewal: returns the contexts of triggers that waited for it (to start now)."""
        self.lease = lease
        self.lease_lapsed = False
        waiting, self.pending = self.pending, []
        started: List[ShardingContext] = []
        for trigger in waiting:
            started.extend(self.on_trigger(trigger))
        return started

    def check_lease(self) -> Tuple[List[ShardingContext], Optional[float]]:
        """Cancels everything once the lease has run out; returns (cancelled, next deadline)."""
        if self.lease is None:
            return [], None
        if self.clock() < self.lease.expires_at:
            return [], self.lease.expires_at
        if self.lease_lapsed:
            return [], None
        self.lease_lapsed = True
        return self._cancel_all("lease expired without renewal"), None

    # -- work ---------------------------------------------------------------------------------
    def on_trigger(self, trigger: Trigger) -> List[ShardingContext]:
        """Returns the contexts to start now (none while draining or without a valid lease)."""
        if self.draining:
            return []
        if not self.lease_valid():
            self.pending.append(trigger)
            return []
        started = []
        for ctx in contexts_for(trigger, self.job_name, self.instance_id):
            key = (ctx.execution_id, ctx.sharding_item)
            if key in self.running:
                continue  # a repeated trigger for an item already running
            self.running[key] = ItemRun(ctx, self.generation, self.token)
            started.append(ctx)
        return started

    def on_revoke(self, items: Tuple[int, ...], reason: str) -> List[ShardingContext]:
        """Cancels running items among ``items`` and removes them from waiting triggers."""
        revoked = set(items)
        cancelled = []
        for run in self.running.values():
            if run.ctx.sharding_item in revoked and not run.ctx.cancelled:
                run.ctx._cancel(f"revoked by the sidecar: {reason}" if reason else "revoked")
                cancelled.append(run.ctx)
        kept = []
        for trigger in self.pending:
            rest = tuple(si for si in trigger.items if si.item not in revoked)
            if rest:
                kept.append(dataclasses.replace(trigger, items=rest))
        self.pending = kept
        return cancelled

    def finish(self, ctx: ShardingContext) -> Optional[ItemRun]:
        """An item's handler is done: returns its run if the answer may be sent, else ``None``."""
        self.check_lease()
        run = self.running.pop((ctx.execution_id, ctx.sharding_item), None)
        if run is None or run.ctx is not ctx:
            return None
        if ctx.cancelled or run.generation != self.generation or not self.lease_valid():
            return None
        return run

    def cancel_all(self, reason: str) -> List[ShardingContext]:
        return self._cancel_all(reason)

    def _cancel_all(self, reason: str) -> List[ShardingContext]:
        cancelled = []
        for run in self.running.values():
            if not run.ctx.cancelled:
                run.ctx._cancel(reason)
                cancelled.append(run.ctx)
        return cancelled
