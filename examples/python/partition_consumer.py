#!/usr/bin/env python3
"""A per-partition consumer: a resident job whose items are the partitions of a log.

Each partition is held by one worker at a time, for as long as it is that worker's: the handler
reads the partition's checkpoint, then polls the partition and processes what it got until the
sidecar takes the partition back (another worker joined, this one is stopping, its lease ran
out); after each batch it writes the checkpoint with the hold's fencing token, and the store
refuses a token lower than the last one it kept, so a holder that lost the partition can never
overwrite its successor's progress.

    pip install -e clients/python
    shardcar run &                                    # standalone sidecar on 127.0.0.1:50061
    python examples/python/partition_consumer.py      # terminal 1: holds all six partitions
    python examples/python/partition_consumer.py --asyncio   # terminal 2: three move to it

Ctrl-C gives a worker's partitions back at once; the other worker picks them up where their
checkpoints say. The log is made up (message ``n`` of partition ``p`` is ``p{p}-{n}``), the
checkpoints are files in ``--checkpoints`` (shared by every worker on the host).
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from shardcar import Assignment, JobConfig, ShardingContext, Worker

PARTITIONS = 6


def job_config() -> JobConfig:
    return JobConfig(
        job_name="partitions",
        sharding_total_count=PARTITIONS,
        sharding_item_parameters={p: f"topic-{p}" for p in range(PARTITIONS)},
        description="one consumer per partition, handed over without overlap",
    )


def say(line: str) -> None:
    print(f"[pid {os.getpid()}] {line}", flush=True)


class Checkpoints:
    """Each partition's next offset, fenced: a write carries the writer's fencing token and is
    refused when the store already holds a larger one (a newer holder's)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def _locked(self, partition: int):
        lock = open(self.directory / f"{partition}.lock", "w")
        fcntl.flock(lock, fcntl.LOCK_EX)
        return lock

    def _read(self, partition: int) -> Tuple[int, int]:
        try:
            data = json.loads((self.directory / f"{partition}.json").read_text())
            return int(data["offset"]), int(data["token"])
        except (OSError, ValueError, KeyError):
            return 0, -1

    def read(self, partition: int) -> int:
        with self._locked(partition):
            return self._read(partition)[0]

    def write(self, partition: int, offset: int, token: Optional[int]) -> bool:
        """Keeps ``offset`` unless a larger token wrote the checkpoint; ``False`` if refused."""
        token = -1 if token is None else token
        with self._locked(partition):
            if self._read(partition)[1] > token:
                return False
            path = self.directory / f"{partition}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"offset": offset, "token": token}))
            os.replace(tmp, path)
            return True


def poll(partition: int, offset: int, limit: int) -> List[str]:
    """The made-up log: a few messages from ``offset`` on."""
    return [f"p{partition}-{n}" for n in range(offset, offset + limit)]


def held(ctx: ShardingContext) -> str:
    return (f"partition {ctx.sharding_item} ({ctx.sharding_parameter}) token {ctx.fencing_token}"
            f"{f' restart {ctx.attempt}' if ctx.attempt else ''}")


def run_sync(args: argparse.Namespace, store: Checkpoints) -> None:
    worker = Worker(target=args.target)

    @worker.on_assignment
    def assigned(a: Assignment) -> None:
        say(f"owns partitions {list(a.item_numbers)}")

    @worker.resident(job_config())
    def consume(ctx: ShardingContext) -> None:
        partition = ctx.sharding_item
        offset = store.read(partition)
        say(f"holding {held(ctx)} from offset {offset}")
        # ctx.wait sleeps between polls and returns True as soon as the hold is cancelled.
        while not ctx.wait(args.poll_seconds):
            batch = poll(partition, offset, args.batch)
            offset += len(batch)  # "processing" the batch
            if not store.write(partition, offset, ctx.fencing_token):
                say(f"partition {partition}: checkpoint refused, a newer holder has it")
                return
        say(f"released partition {partition} at offset {offset}: {ctx.cancel_reason}")

    worker.run()
    say("stopped, bye")


def run_async(args: argparse.Namespace, store: Checkpoints) -> None:
    from shardcar.aio import Worker as AsyncWorker

    async def main() -> None:
        worker = AsyncWorker(target=args.target)

        @worker.on_assignment
        def assigned(a: Assignment) -> None:
            say(f"owns partitions {list(a.item_numbers)}")

        @worker.resident(job_config())
        async def consume(ctx: ShardingContext) -> None:
            partition = ctx.sharding_item
            offset = store.read(partition)
            say(f"holding {held(ctx)} from offset {offset}")
            try:
                # A cancelled hold's task is cancelled too: the wait raises CancelledError (or
                # returns True); either way the loop ends.
                while not await ctx.wait_async(args.poll_seconds):
                    batch = poll(partition, offset, args.batch)
                    offset += len(batch)
                    if not store.write(partition, offset, ctx.fencing_token):
                        say(f"partition {partition}: checkpoint refused, a newer holder has it")
                        return
            finally:
                if ctx.cancelled:
                    say(f"released partition {partition} at offset {offset}: {ctx.cancel_reason}")

        await worker.run()
        say("stopped, bye")

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=None,
                        help="sidecar address (default $SHARDCAR_TARGET or 127.0.0.1:50061)")
    parser.add_argument("--checkpoints", type=Path,
                        default=Path(tempfile.gettempdir()) / "shardcar-partitions",
                        help="directory of the partitions' checkpoints")
    parser.add_argument("--poll-seconds", type=float, default=0.5, help="time between polls")
    parser.add_argument("--batch", type=int, default=5, help="messages per poll")
    parser.add_argument("--asyncio", action="store_true", help="use shardcar.aio")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    store = Checkpoints(args.checkpoints)
    (run_async if args.asyncio else run_sync)(args, store)


if __name__ == "__main__":
    sys.exit(main())
