#!/usr/bin/env python3
"""An "orders" worker: each shard item owns a region of the order book.

Run a sidecar (`shardcar run`), then one or more copies of this worker; the sidecar spreads the
four items over the live workers and fires the job every five seconds:

    pip install -e clients/python
    python examples/python/orders_worker.py            # or --target unix:///tmp/shardcar.sock

Start a second copy and watch the items move; stop one with Ctrl-C (it drains, then leaves) and
the other takes its items over. `--asyncio` runs the same worker on shardcar.aio.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import sys
import threading
import time

from shardcar import Assignment, JobConfig, ShardingContext, Worker, WorkerOptions

REGIONS = {0: "north", 1: "south", 2: "east", 3: "west"}


def job_config(cron: str) -> JobConfig:
    return JobConfig(
        job_name="orders",
        cron=cron,
        sharding_total_count=len(REGIONS),
        sharding_item_parameters=REGIONS,
        job_parameter="batch=50",
        failover=True,
        description="process pending orders, one region per shard item",
    )


def pending_orders(region: str) -> list:
    return [f"{region}-{random.randrange(10_000):04d}" for _ in range(random.randrange(1, 4))]


_say_lock = threading.Lock()


def say(line: str) -> None:
    """Prints one whole line: handlers run on several threads, and print() writes the text and
    its newline separately, so two threads' lines could run into each other."""
    text = f"[pid {os.getpid()}] {line}\n"
    with _say_lock:
        sys.stdout.write(text)
        sys.stdout.flush()


def describe(ctx: ShardingContext) -> str:
    return (f"{ctx.source.value.lower()} run {ctx.execution_id[:8]} item {ctx.sharding_item}/"
            f"{ctx.sharding_total_count} ({ctx.sharding_parameter}) token {ctx.fencing_token}")


def run_sync(args: argparse.Namespace) -> None:
    worker = Worker(target=args.target, options=WorkerOptions(item_concurrency=4))

    @worker.on_assignment
    def assigned(a: Assignment) -> None:
        say(f"assigned items {list(a.item_numbers)}{' (leader)' if a.leader else ''}")

    @worker.job(job_config(args.cron))
    def process(ctx: ShardingContext) -> None:
        say(describe(ctx))
        for order in pending_orders(ctx.sharding_parameter):
            if ctx.wait(args.work_seconds):  # sleeps, but wakes at once when revoked
                say(f"item {ctx.sharding_item} revoked, stopping ({ctx.cancel_reason})")
                return
            say(f"  processed order {order} (fencing token {ctx.fencing_token})")

    worker.run()
    say("drained, bye")


def run_async(args: argparse.Namespace) -> None:
    from shardcar.aio import Worker as AsyncWorker

    async def main() -> None:
        worker = AsyncWorker(target=args.target, options=WorkerOptions(item_concurrency=4))

        @worker.on_assignment
        def assigned(a: Assignment) -> None:
            say(f"assigned items {list(a.item_numbers)}{' (leader)' if a.leader else ''}")

        @worker.job(job_config(args.cron))
        async def process(ctx: ShardingContext) -> None:
            say(describe(ctx))
            for order in pending_orders(ctx.sharding_parameter):
                await asyncio.sleep(args.work_seconds)  # cancelled when revoked
                say(f"  processed order {order} (fencing token {ctx.fencing_token})")

        await worker.run()
        say("drained, bye")

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=None,
                        help="sidecar address (default $SHARDCAR_TARGET or 127.0.0.1:50061)")
    parser.add_argument("--cron", default="0/5 * * * * ?", help="Quartz cron with seconds")
    parser.add_argument("--work-seconds", type=float, default=0.2, help="time per order")
    parser.add_argument("--asyncio", action="store_true", help="use shardcar.aio")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    started = time.monotonic()
    (run_async if args.asyncio else run_sync)(args)
    say(f"ran {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    sys.exit(main())
