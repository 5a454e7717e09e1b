#!/usr/bin/env python3
"""Many jobs firing at one instant, seen from workers written against the proto alone.

Starts a ZooKeeper (scripts/zk.sh, a free loopback port) and one sidecar at its default
settings, subscribes JOBS jobs of ITEMS items each, all firing every second, from one Python
process that keeps the worker contract itself (leases from receipt and ``expires_at``, a trigger
without a valid lease declined, every item answered once, never a resend), and prints how long
each trigger took from its fire instant to its receipt here: median, p99 and n, per instant and
over the run, and the CPU each process used over the measured window. The figure includes this
process's own overhead (Python reading ~JOBS streams), as any worker's would; ``--processes N``
deals the jobs over N worker processes instead (this program again), as N worker programs of
JOBS/N jobs each would.

ZooKeeper runs as in the project's other benchmarks (docs/benchmarks.md): its JVM with its own
defaults (full JIT, as a production server runs) and no fsync, unless ZK_JVM_FLAGS or
ZK_FORCE_SYNC are set (scripts/zk.sh); the warm-up lets its JIT compiler settle first.

    python3 benches/proto_scale.py [--jobs 1000] [--items 2] [--seconds 20] [--warmup 45]
        [--streams-per-connection 20] [--processes 1] [--sidecar target/release/shardcar] [-- SIDECAR_ARGS...]

Needs grpcio and protobuf (the Python client's dependencies: ``.venv`` has them) and a built
sidecar (``cargo build --release --bin shardcar``). Everything it starts is stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "clients/python/src"))

import grpc  # noqa: E402
from shardcar._proto import shardcar_pb2 as pb  # noqa: E402
from shardcar._proto import shardcar_pb2_grpc as pbg  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode} before it served")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not serve on port {port} within {timeout:.0f} s")


class Lease:
    """A worker's lease (rule 1): valid until the earlier of valid_for after receipt and
    expires_at on this host's clock."""

    def __init__(self) -> None:
        self.until = 0.0  # time.time()

    def renew(self, lease: pb.Lease) -> None:
        now = time.time()
        valid_for = lease.valid_for.seconds + lease.valid_for.nanos / 1e9
        expires = lease.expires_at.seconds + lease.expires_at.nanos / 1e9
        if now >= expires:
            return  # read after it ended: void
        self.until = min(now + valid_for, expires)

    def valid(self) -> bool:
        return time.time() < self.until


class Worker:
    def __init__(self, stub: pbg.WorkerServiceStub, job: str, items: int, record) -> None:
        self.stub, self.job, self.items, self.record = stub, job, items, record
        self.lease = Lease()
        self.instance_id = ""
        self.answers: set[asyncio.Task] = set()

    async def run(self) -> None:
        config = pb.JobConfig(job_name=self.job, cron="* * * * * ?", sharding_total_count=self.items)
        request = pb.SubscribeRequest(
            job_name=self.job,
            config=config,
            overwrite=True,
            instance_suffix=f"{os.getpid()}-{self.job}",
        )
        async for event in self.stub.Subscribe(request):
            kind = event.WhichOneof("event")
            if kind == "lease":
                self.lease.renew(event.lease)
            elif kind == "registered":
                self.instance_id = event.registered.instance_id
            elif kind == "trigger":
                received = time.time()
                t = event.trigger
                items = [i.item for i in t.items]
                if not self.lease.valid():
                    self.answer(self.stub.Decline, pb.DeclineRequest(
                        instance_id=self.instance_id, execution_id=t.execution_id, items=items,
                        reason="the trigger arrived without a valid lease"))
                    continue
                fire = t.fire_time.seconds + t.fire_time.nanos / 1e9
                self.record(t.fire_time.seconds, (received - fire) * 1000.0)
                self.answer(self.stub.Complete, pb.CompleteRequest(
                    instance_id=self.instance_id, execution_id=t.execution_id, items=items))
            elif kind == "revoke":
                # Answers go out at once, so a revoked run is already answered or declined here.
                pass
            elif kind == "shutdown":
                return

    def answer(self, call, request) -> None:
        task = asyncio.ensure_future(call(request))
        self.answers.add(task)
        task.add_done_callback(self.answers.discard)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(args, target: str, jobs: range, start: float,
                  pids: dict[str, list[int]]) -> tuple[dict[int, list[float]], dict[str, float]]:
    """Runs the workers of `jobs` from `start` (time.time()) for the warm-up and the window:
    the triggers' latencies by instant after the warm-up, and the share of one core each named
    group of `pids` used over the window."""
    per_instant: dict[int, list[float]] = {}

    def record(second: int, ms: float) -> None:
        if second >= start + args.warmup:
            per_instant.setdefault(second, []).append(ms)

    channels = []
    workers = []
    for n, j in enumerate(jobs):
        if n % args.streams_per_connection == 0:
            channels.append(grpc.aio.insecure_channel(
                target, options=[("grpc.use_local_subchannel_pool", 1)]))
        stub = pbg.WorkerServiceStub(channels[-1])
        workers.append(Worker(stub, f"pscale-{j}", args.items, record))
    tasks = [asyncio.ensure_future(w.run()) for w in workers]
    await asyncio.sleep(max(0.0, start + args.warmup - time.time()))
    cpu = await window_cpu(args, pids)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in channels:
        await c.close()
    last = int(start + args.warmup + args.seconds)
    return {s: v for s, v in per_instant.items() if s < last}, cpu


async def window_cpu(args, pids: dict[str, list[int]]) -> dict[str, float]:
    """Sleeps through the measured window; the share of one core each named group of `pids`
    used over it."""
    def used(group: list[int]) -> float:
        return sum(cpu_seconds(pid) for pid in group)

    before, began = {name: used(group) for name, group in pids.items()}, time.monotonic()
    await asyncio.sleep(args.seconds + 1)
    spent = time.monotonic() - began
    return {name: (used(group) - before[name]) / spent for name, group in pids.items()}


async def measure_in_processes(args, target: str, pids: dict[str, list[int]]) -> tuple[dict[int, list[float]], dict[str, float]]:
    """The same as `measure`, with the jobs dealt over `--processes` worker processes (this
    program again, with `--slice`), each printing its latencies as JSON."""
    start = time.time()
    children = []
    per = -(-args.jobs // args.processes)
    for first in range(0, args.jobs, per):
        children.append(subprocess.Popen(
            [sys.executable, __file__, "--slice", f"{first}:{min(first + per, args.jobs)}",
             "--target", target, "--start", repr(start), "--items", str(args.items),
             "--seconds", str(args.seconds), "--warmup", str(args.warmup),
             "--streams-per-connection", str(args.streams_per_connection)],
            stdout=subprocess.PIPE, text=True))
    try:
        await asyncio.sleep(max(0.0, start + args.warmup - time.time()))
        cpu = await window_cpu(
            args, {**pids, f"the {len(children)} worker processes": [c.pid for c in children]})
        per_instant: dict[int, list[float]] = {}
        for c in children:
            out, _ = await asyncio.to_thread(c.communicate)
            if c.returncode != 0:
                raise SystemExit(f"a worker process exited with {c.returncode}")
            for second, values in json.loads(out).items():
                per_instant.setdefault(int(second), []).extend(values)
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
    return per_instant, cpu


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = max(0, min(len(values) - 1, int(round(p / 100.0 * len(values) + 0.5)) - 1))
    return values[k]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--items", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=45)
    parser.add_argument("--streams-per-connection", type=int, default=20)
    parser.add_argument("--processes", type=int, default=1,
                        help="worker processes the jobs are dealt over (default 1: this one)")
    parser.add_argument("--sidecar", default=str(ROOT / "target/release/shardcar"))
    # A worker process of --processes: its jobs, the sidecar and the common start.
    parser.add_argument("--slice", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=float, help=argparse.SUPPRESS)
    parser.add_argument("sidecar_args", nargs="*", help="more arguments for `shardcar run`")
    args = parser.parse_args()
    if args.slice:
        first, end = (int(x) for x in args.slice.split(":"))
        per_instant, _ = asyncio.run(measure(args, args.target, range(first, end), args.start, {}))
        print(json.dumps(per_instant))
        return 0
    if args.processes < 1:
        print(f"--processes {args.processes}: give 1 or more", file=sys.stderr)
        return 64
    if not Path(args.sidecar).is_file():
        print(f"no sidecar at {args.sidecar}: cargo build --release --bin shardcar", file=sys.stderr)
        return 64
    work = Path(tempfile.mkdtemp(prefix="shardcar-proto-scale-"))
    zk_port, grpc_port = free_port(), free_port()
    procs: list[subprocess.Popen] = []

    def stop_all(*_: object) -> None:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()

    signal.signal(signal.SIGTERM, lambda *_: (stop_all(), sys.exit(1)))
    try:
        zk_log = open(work / "zk.log", "w")
        zk_env = {"ZK_JVM_FLAGS": "", "ZK_FORCE_SYNC": "no", **os.environ}
        procs.append(subprocess.Popen(
            [str(ROOT / "scripts/zk.sh"), "run", str(work / "zk"), str(zk_port)],
            stdout=zk_log, stderr=subprocess.STDOUT, start_new_session=True, env=zk_env))
        wait_port(zk_port, procs[-1], "ZooKeeper")
        car_log = open(work / "sidecar.log", "w")
        procs.append(subprocess.Popen(
            [args.sidecar, "run", "--zk", f"127.0.0.1:{zk_port}", "--namespace", "proto-scale",
             "--listen", f"127.0.0.1:{grpc_port}", "--log-level", "warn", *args.sidecar_args],
            stdout=car_log, stderr=subprocess.STDOUT, start_new_session=True))
        wait_port(grpc_port, procs[-1], "the sidecar")
        target = f"127.0.0.1:{grpc_port}"
        pids = {"the sidecar": [procs[1].pid], "ZooKeeper": [procs[0].pid]}
        if args.processes == 1:
            pids["this process"] = [os.getpid()]
            per_instant, cpu = asyncio.run(measure(args, target, range(args.jobs), time.time(), pids))
        else:
            per_instant, cpu = asyncio.run(measure_in_processes(args, target, pids))
    finally:
        stop_all()
    every = [v for vs in per_instant.values() for v in vs]
    if not every:
        print("no trigger received in the measured window", file=sys.stderr)
        return 1
    expected = args.jobs * len(per_instant)
    print(f"{args.jobs} jobs x {args.items} items, every second, {len(per_instant)} instants, "
          f"{args.processes} worker process{'es' if args.processes > 1 else ''}; "
          f"sidecar settings: default{(' + ' + ' '.join(args.sidecar_args)) if args.sidecar_args else ''}")
    for second, vs in sorted(per_instant.items()):
        print(f"  instant {second}: n={len(vs)} median={statistics.median(vs):.2f} ms "
              f"p99={pct(vs, 99):.2f} ms max={max(vs):.2f} ms")
    print(f"fire instant -> trigger received (Python worker): median={statistics.median(every):.2f} ms "
          f"p99={pct(every, 99):.2f} ms n={len(every)} (of {expected} fires)")
    print(f"cpu over the measured window, as a share of one core ({os.cpu_count()} cores here): "
          + ", ".join(f"{name} {100 * share:.0f}%" for name, share in cpu.items()))
    print(f"ZooKeeper: JVM flags {zk_env['ZK_JVM_FLAGS'] or '(its defaults)'}, fsync {zk_env['ZK_FORCE_SYNC']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
