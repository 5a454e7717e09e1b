"""A worker process for the fault tests (``test_faults.py``): the test starts it, reads what it
does from its stdout (one JSON object a line), and freezes or resumes it with SIGSTOP/SIGCONT.

    python child_worker.py --target T --job J --cron C [--asyncio] --first MODE [--release-file F]
        [--items N] [--failover] [--item-concurrency N] [--max-concurrent-executions N]
        [--stop-on-drain]

The handler of the first item it is given behaves as ``--first`` says; every later item
returns at once. Every item prints ``{"ev": "start", ...}``. Modes of the first item:

* ``busy``: ``time.sleep`` then ``ctx.cancelled``, never yielding (an ``async def`` handler
  blocks its event loop on purpose, so only the check itself can notice a lapse);
* ``wait``: ``ctx.wait(1)`` (``await ctx.wait_async(1)`` with ``--asyncio``);
* ``release``: works until ``--release-file`` exists, then returns (is answered);
* ``quick``: returns at once.

``busy`` and ``wait`` check once, print ``{"ev": "working"}`` and then sleep (``busy``, no
check at all) or wait in short steps (``wait``) until ``--release-file`` exists: the test
freezes the process in that window and creates the file before it resumes it, so the window
cannot close before the freeze however late the test reads the line. Their first check after
it prints ``{"ev": "check", "gap": seconds since the window began, "cancelled": ...}``; they
go on checking until cancelled, then print ``{"ev": "stopped"}``. ``--items``, ``--failover``
set the job's ``sharding_total_count`` (default 1) and ``failover``; ``--item-concurrency`` and
``--max-concurrent-executions`` the worker's executor size (default 8) and its
``max_concurrent_executions`` (default: the executor size); ``--stop-on-drain`` makes a
sidecar's drain stop the worker (default: it subscribes again). Records of the ``shardcar``
logger are printed as ``{"ev": "log", "msg": ...}``; ``{"ev": "exit"}`` when ``run()``
returned.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from shardcar import JobConfig, ShardingContext, Worker, WorkerOptions

_OUT = threading.Lock()
STEP = 0.02  # how often a handler in its window looks for the release file
GIVE_UP = 120.0  # never loop for ever, whatever happens


def emit(**fields: Any) -> None:
    fields.setdefault("t", time.time())
    with _OUT:
        sys.stdout.write(json.dumps(fields, default=str) + "\n")
        sys.stdout.flush()


class JsonLog(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:  # noqa: A003 - logging's name
        emit(ev="log", level=record.levelname, msg=record.getMessage())


class Items:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def begin(self, ctx: ShardingContext) -> int:
        with self.lock:
            self.count += 1
            n = self.count
        fire = ctx.fire_time.timestamp() if ctx.fire_time is not None else None
        emit(ev="start", n=n, exec=ctx.execution_id, item=ctx.sharding_item, fire=fire,
             source=ctx.source.name)
        return n


STARTED = time.monotonic()


def released(path: str) -> bool:
    if time.monotonic() - STARTED > GIVE_UP:
        return True  # never loop for ever, whatever happens
    return os.path.exists(path)


def busy(ctx: ShardingContext, release: str) -> None:
    """``ctx.cancelled`` checks that never yield (an ``async def`` handler blocks its event loop
    here on purpose: no task of the worker runs between the pause and the check)."""
    if ctx.cancelled:
        emit(ev="stopped", reason=f"before the window: {ctx.cancel_reason}")
        return
    before = time.monotonic()  # before the print: the freeze may land while it is written
    emit(ev="working")
    while not released(release):  # the test freezes the process in here
        time.sleep(STEP)
    slept = time.monotonic() - before
    emit(ev="check", gap=slept, cancelled=ctx.cancelled)
    keep_checking(ctx)


def wait_sync(ctx: ShardingContext, release: str) -> None:
    if ctx.wait(0):
        emit(ev="stopped", reason=f"before the window: {ctx.cancel_reason}")
        return
    before = time.monotonic()  # before the print: the freeze may land while it is written
    emit(ev="working")
    while True:  # the test freezes the process in here
        # The file is looked at before the check, so that the check that ends the window
        # comes after the freeze wherever in this loop it landed.
        done = released(release)
        cancelled = ctx.wait(0 if done else STEP)
        if cancelled or done:
            break
    emit(ev="check", gap=time.monotonic() - before, cancelled=cancelled)
    keep_checking(ctx)


async def wait_async(ctx: ShardingContext, release: str) -> None:
    if await ctx.wait_async(0):
        emit(ev="stopped", reason=f"before the window: {ctx.cancel_reason}")
        return
    before = time.monotonic()  # before the print: the freeze may land while it is written
    emit(ev="working")
    try:
        while True:  # the test freezes the process in here
            done = released(release)  # before the check, as in wait_sync
            cancelled = await ctx.wait_async(0 if done else STEP)
            if cancelled or done:
                break
    except asyncio.CancelledError:
        # The worker cancelled the task first: the asyncio form of "cancelled".
        emit(ev="check", gap=time.monotonic() - before, cancelled="CancelledError")
        emit(ev="stopped", reason=ctx.cancel_reason)
        raise
    emit(ev="check", gap=time.monotonic() - before, cancelled=cancelled)
    keep_checking(ctx)


def keep_checking(ctx: ShardingContext) -> None:
    began = time.monotonic()
    while not ctx.cancelled:
        if time.monotonic() - began > GIVE_UP:
            emit(ev="gave_up")
            return
        time.sleep(0.01)
    emit(ev="stopped", reason=ctx.cancel_reason)


def until_released(ctx: ShardingContext, path: str) -> None:
    while not released(path) and not ctx.cancelled:
        time.sleep(0.02)
    emit(ev="released", exec=ctx.execution_id, item=ctx.sharding_item, cancelled=ctx.cancelled)


async def until_released_async(ctx: ShardingContext, path: str) -> None:
    while not released(path) and not ctx.cancelled:
        await asyncio.sleep(0.02)
    emit(ev="released", exec=ctx.execution_id, item=ctx.sharding_item, cancelled=ctx.cancelled)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--cron", default="* * * * * ?")
    parser.add_argument("--asyncio", action="store_true")
    parser.add_argument("--first", choices=["busy", "wait", "release", "quick"], default="quick")
    parser.add_argument("--release-file", default="")
    parser.add_argument("--items", type=int, default=1)
    parser.add_argument("--failover", action="store_true")
    parser.add_argument("--item-concurrency", type=int, default=8)
    parser.add_argument("--max-concurrent-executions", type=int, default=None)
    parser.add_argument("--stop-on-drain", action="store_true")
    args = parser.parse_args()
    options = WorkerOptions(connect_timeout=20, item_concurrency=args.item_concurrency,
                            max_concurrent_executions=args.max_concurrent_executions,
                            stop_on_drain=args.stop_on_drain)

    logger = logging.getLogger("shardcar")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(JsonLog())
    config = JobConfig(job_name=args.job, cron=args.cron, sharding_total_count=args.items,
                       failover=args.failover)
    items = Items()
    emit(ev="ready", pid=os.getpid())

    if not args.asyncio:
        worker = Worker(args.target, options=options)

        @worker.job(config)
        def handle(ctx: ShardingContext) -> None:
            if items.begin(ctx) != 1 or args.first == "quick":
                return
            if args.first == "busy":
                busy(ctx, args.release_file)
            elif args.first == "wait":
                wait_sync(ctx, args.release_file)
            else:
                until_released(ctx, args.release_file)

        worker.run()
        worker.close()
    else:
        from shardcar.aio import Worker as AsyncWorker

        async def run() -> None:
            worker = AsyncWorker(args.target, options=options)

            @worker.job(config)
            async def handle(ctx: ShardingContext) -> None:
                if items.begin(ctx) != 1 or args.first == "quick":
                    return
                if args.first == "busy":
                    busy(ctx, args.release_file)  # blocks the event loop on purpose
                elif args.first == "wait":
                    await wait_async(ctx, args.release_file)
                else:
                    await until_released_async(ctx, args.release_file)

            await worker.run()
            await worker.close()

        asyncio.run(run())
    emit(ev="exit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
