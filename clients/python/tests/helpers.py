"""Small helpers for the integration tests: run a sync Worker in a thread, collect calls."""

from __future__ import annotations

import threading
from typing import List, Optional

from shardcar import ShardingContext, Worker


class WorkerThread:
    """Runs ``worker.run()`` in a thread; ``stop()`` drains and re-raises what ``run`` raised."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.worker.run(handle_signals=False)
        except BaseException as exc:  # handed to the test thread
            self.error = exc

    def __enter__(self) -> "WorkerThread":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 20) -> None:
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker.run() did not return after stop()"
        self.worker.close()


class Calls:
    """Thread-safe record of handler invocations."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.contexts: List[ShardingContext] = []

    def add(self, ctx: ShardingContext) -> None:
        with self.lock:
            self.contexts.append(ctx)

    def snapshot(self) -> List[ShardingContext]:
        with self.lock:
            return list(self.contexts)

    def items(self) -> set:
        return {c.sharding_item for c in self.snapshot()}

    def executions(self) -> set:
        return {c.execution_id for c in self.snapshot()}
