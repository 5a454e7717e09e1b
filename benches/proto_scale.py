#!/usr/bin/env python3
"""Many jobs firing at one instant, seen from workers written against the proto alone.

Starts a ZooKeeper (scripts/zk.sh, a free loopback port) and one sidecar at its default
settings, subscribes JOBS jobs of ITEMS items each, all firing every second, from one Python
process that keeps the worker contract itself (leases from receipt and ``expires_at``, a trigger
without a valid lease declined, every item answered once, never a resend), and prints how long
each trigger took from its fire instant to its receipt here: median, p99 and n, per instant and
over the run, and the CPU each process used over the measured window. The figure includes this
process's own overhead (Python reading ~JOBS streams), as any worker's would.

ZooKeeper runs as in the project's other benchmarks (docs/benchmarks.md): its JVM with its own
defaults (full JIT, as a production server runs) and no fsync, unless ZK_JVM_FLAGS or
ZK_FORCE_SYNC are set (scripts/zk.sh); the warm-up lets its JIT compiler settle first.

    python3 benches/proto_scale.py [--jobs 1000] [--items 2] [--seconds 20] [--warmup 45]
        [--streams-per-connection 20] [--sidecar target/release/shardcar] [-- SIDECAR_ARGS...]

Needs grpcio and protobuf (the Python client's dependencies: ``.venv`` has them) and a built
sidecar (``cargo build --release --bin shardcar``). Everything it starts is stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
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


async def measure(args, target: str, pids: dict[str, int]) -> tuple[dict[int, list[float]], dict[str, float]]:
    """The triggers' latencies by instant, and each process's share of one core over the
    measured window."""
    per_instant: dict[int, list[float]] = {}
    start = time.time()

    def record(second: int, ms: float) -> None:
        if second >= start + args.warmup:
            per_instant.setdefault(second, []).append(ms)

    channels = []
    workers = []
    for j in range(args.jobs):
        if j % args.streams_per_connection == 0:
            channels.append(grpc.aio.insecure_channel(
                target, options=[("grpc.use_local_subchannel_pool", 1)]))
        stub = pbg.WorkerServiceStub(channels[-1])
        workers.append(Worker(stub, f"pscale-{j}", args.items, record))
    tasks = [asyncio.ensure_future(w.run()) for w in workers]
    await asyncio.sleep(args.warmup)
    before, began = {name: cpu_seconds(pid) for name, pid in pids.items()}, time.monotonic()
    await asyncio.sleep(args.seconds + 1)
    spent = time.monotonic() - began
    cpu = {name: (cpu_seconds(pid) - before[name]) / spent for name, pid in pids.items()}
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in channels:
        await c.close()
    last = int(start + args.warmup + args.seconds)
    return {s: v for s, v in per_instant.items() if s < last}, cpu


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
    parser.add_argument("--sidecar", default=str(ROOT / "target/release/shardcar"))
    parser.add_argument("sidecar_args", nargs="*", help="more arguments for `shardcar run`")
    args = parser.parse_args()
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
        pids = {"this process": os.getpid(), "the sidecar": procs[1].pid, "ZooKeeper": procs[0].pid}
        per_instant, cpu = asyncio.run(measure(args, f"127.0.0.1:{grpc_port}", pids))
    finally:
        stop_all()
    every = [v for vs in per_instant.values() for v in vs]
    if not every:
        print("no trigger received in the measured window", file=sys.stderr)
        return 1
    expected = args.jobs * len(per_instant)
    print(f"{args.jobs} jobs x {args.items} items, every second, {len(per_instant)} instants; "
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
