"""Small helpers for the integration tests: run a sync Worker in a thread (or either worker,
:class:`Running`), collect calls, run a worker in a child process."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import shardcar.aio
from shardcar import ShardingContext, Worker, WorkerOptions

from conftest import stop_process


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


CHILD_SCRIPT = Path(__file__).resolve().with_name("child_worker.py")

Event = Dict[str, Any]


class ChildWorker:
    """A worker in a child process (``child_worker.py``); its stdout is read by a thread.

    Tests wait for what it printed (:meth:`wait_for`), never for fixed times; they freeze it
    with :meth:`pause` and continue it with :meth:`resume`. :meth:`kill` (continue, then
    SIGKILL) is what the ``spawn_child`` fixture calls at the end of every test.
    """

    def __init__(self, args: Sequence[str]) -> None:
        self.args = list(args)
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(CHILD_SCRIPT), *self.args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self.events: List[Event] = []
        self.lines: List[str] = []
        self.eof = False
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"ev": "raw", "line": line.rstrip("\n")}
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self.events.append(event)
                self._cond.notify_all()
        with self._cond:
            self.eof = True
            self._cond.notify_all()

    def wait_for(
        self, predicate: Callable[[Event], bool], timeout: float, what: str, start: int = 0
    ) -> Tuple[int, Event]:
        """The first event at index ``start`` or later that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            index = start
            while True:
                while index < len(self.events):
                    if predicate(self.events[index]):
                        return index, self.events[index]
                    index += 1
                if self.eof:
                    raise AssertionError(f"worker exited before {what}:\n{self.output()}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n"
                                         f"{self.output()}")
                self._cond.wait(remaining)

    def snapshot(self) -> List[Event]:
        with self._cond:
            return list(self.events)

    def logs(self, start: int = 0) -> List[str]:
        return [e["msg"] for e in self.snapshot()[start:] if e.get("ev") == "log"]

    def pause(self) -> None:
        """SIGSTOP; returns once every thread of the worker has stopped."""
        stop_process(self.proc)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker did not exit within {timeout}s:\n{self.output()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._reader.join(timeout=5)

    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines[-400:])


class Running:
    """A sync or asyncio worker run in a thread (the asyncio one in its own event loop, created
    there as grpc.aio requires) until :meth:`stop`."""

    def __init__(self, api: str, target: str, register: Callable[[Any], None],
                 options: Optional[WorkerOptions] = None) -> None:
        self.api = api
        self.target = target
        self.register = register
        self.options = options or WorkerOptions(connect_timeout=5, drain_timeout=5)
        self.error: Optional[BaseException] = None
        self.worker: Any = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            if self.api == "sync":
                self.worker = Worker(self.target, options=self.options)
                self.register(self.worker)
                self.ready.set()
                self.worker.run(handle_signals=False)
            else:
                asyncio.run(self._amain())
        except BaseException as exc:  # handed to the test thread
            self.error = exc
        finally:
            self.ready.set()

    async def _amain(self) -> None:
        worker = shardcar.aio.Worker(self.target, options=self.options)
        self.register(worker)
        self.worker, self.loop = worker, asyncio.get_running_loop()
        self.ready.set()
        try:
            await worker.run(handle_signals=False)
        finally:
            await worker.close()

    def start(self) -> "Running":
        self.thread.start()
        assert self.ready.wait(10), "the worker did not start"
        return self

    def stop(self) -> None:
        worker = self.worker
        if worker is not None and self.thread.is_alive():
            if self.api == "sync":
                worker.stop()
            elif self.loop is not None:
                try:
                    self.loop.call_soon_threadsafe(worker.stop)
                except RuntimeError:  # the loop has already ended
                    pass
        self.thread.join(20)
        assert not self.thread.is_alive(), "run() did not return after stop()"
        if self.api == "sync" and worker is not None:
            worker.close()
