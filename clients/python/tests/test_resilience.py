"""Leases, reconnects, draining and ZooKeeper mode, against real sidecar processes: a lease that
runs out while the sidecar is frozen cancels the handler (sync and asyncio) and work resumes
once it is renewed; after a sidecar restart the worker subscribes again and never answers for
the old stream; Ctrl-C drains the example worker; two workers share a job's items through two
sidecars on one ZooKeeper."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import shardcar.aio
from shardcar import InstanceSuffix, JobConfig, ShardingContext, Worker, WorkerOptions

from conftest import REPO_ROOT, wait_until
from helpers import Calls, WorkerThread

EVERY_SECOND = "* * * * * ?"


def job(name: str, count: int = 1) -> JobConfig:
    return JobConfig(job_name=name, cron=EVERY_SECOND, sharding_total_count=count)


def _stop_sidecar_during_a_run(sidecar, worker, job_name):
    """Freezes the sidecar while a handler runs; returns (calls, outcome, runs before resume)."""
    started = threading.Event()
    outcome = {}
    calls = Calls()

    @worker.job(job(job_name))
    def handle(ctx: ShardingContext) -> None:
        calls.add(ctx)
        if started.is_set():
            return
        started.set()
        t0 = time.monotonic()
        outcome["cancelled"] = ctx.wait(30)
        outcome["after"] = time.monotonic() - t0
        outcome["reason"] = ctx.cancel_reason

    return started, calls, outcome


def test_lease_expiry_while_sidecar_is_stopped_cancels_the_handler(make_sidecar, caplog):
    caplog.set_level(logging.INFO, logger="shardcar")
    sidecar = make_sidecar(session_timeout="4s")  # lease: half of it, 2 s
    worker = Worker(sidecar.target, options=WorkerOptions(connect_timeout=5))
    started, calls, outcome = _stop_sidecar_during_a_run(sidecar, worker, "leased")
    with WorkerThread(worker) as wt:
        assert started.wait(15), "first trigger never arrived"
        sidecar.pause()
        try:
            wait_until(lambda: "cancelled" in outcome, 10, what="the handler to be cancelled")
            assert outcome["cancelled"] is True
            assert "lease" in outcome["reason"]
            assert outcome["after"] < 4
            runs_before = len(calls.executions())
            time.sleep(1.5)
            assert len(calls.executions()) == runs_before  # no new work without a lease
        finally:
            sidecar.resume()
    assert wt.error is None
    assert any("answer not sent (lease expired" in r.getMessage() for r in caplog.records)


def test_work_resumes_after_the_lease_is_renewed(make_sidecar):
    sidecar = make_sidecar(session_timeout="4s")
    worker = Worker(sidecar.target, options=WorkerOptions(connect_timeout=5))
    started, calls, outcome = _stop_sidecar_during_a_run(sidecar, worker, "renewed")
    with WorkerThread(worker):
        assert started.wait(15), "first trigger never arrived"
        sidecar.pause()
        try:
            wait_until(lambda: "cancelled" in outcome, 10, what="the handler to be cancelled")
            runs_before = len(calls.executions())
        finally:
            sidecar.resume()
        wait_until(lambda: len(calls.executions()) > runs_before, 10,
                   what="work to resume after the lease is renewed")


async def test_lease_expiry_cancels_asyncio_handler(make_sidecar):
    sidecar = make_sidecar(session_timeout="4s")
    worker = shardcar.aio.Worker(sidecar.target, options=WorkerOptions(connect_timeout=5))
    outcome = {}
    started = asyncio.Event()

    @worker.job(job("async-leased"))
    async def handle(ctx: ShardingContext) -> None:
        if started.is_set():
            return
        started.set()
        try:
            await asyncio.sleep(30)
            outcome["finished"] = True
        except asyncio.CancelledError:
            outcome["cancelled"] = ctx.cancel_reason
            raise

    task = asyncio.create_task(worker.run(handle_signals=False))
    try:
        await asyncio.wait_for(started.wait(), 15)
        sidecar.pause()
        deadline = time.monotonic() + 10
        while "cancelled" not in outcome:
            assert time.monotonic() < deadline, "async handler not cancelled by lease expiry"
            await asyncio.sleep(0.05)
        assert "lease" in outcome["cancelled"]
    finally:
        sidecar.resume()
        worker.stop()
        await asyncio.wait_for(task, 20)
        await worker.close()
    assert "finished" not in outcome


def test_reconnects_after_sidecar_restart_and_drops_old_executions(make_sidecar):
    sidecar = make_sidecar()
    # A unique instance id (pid and a random suffix) is chosen once: the reconnect reuses it.
    worker = Worker(sidecar.target, options=WorkerOptions(
        connect_timeout=5, reconnect_backoff=(0.1, 0.5), instance_suffix=InstanceSuffix.ALWAYS))
    calls = Calls()
    first = {}
    first_started = threading.Event()

    @worker.job(job("restarted"))
    def handle(ctx: ShardingContext) -> None:
        calls.add(ctx)
        if not first_started.is_set():
            first_started.set()
            first["cancelled"] = ctx.wait(30)
            first["reason"] = ctx.cancel_reason

    with WorkerThread(worker) as wt:
        assert first_started.wait(15)
        old_instance = calls.snapshot()[0].instance_id
        sidecar.restart()
        wait_until(lambda: "cancelled" in first, 10, what="the old execution to be cancelled")
        assert first["cancelled"] is True
        n = len(calls.executions())
        wait_until(lambda: len(calls.executions()) >= n + 2, 20,
                   what="triggers from the restarted sidecar")
    assert wt.error is None
    assert old_instance.endswith(f"@-@{worker.instance_suffix}")
    assert {c.instance_id for c in calls.snapshot()} == {old_instance}


def test_ctrl_c_drains_the_example_worker(sidecar):
    env = dict(os.environ, SHARDCAR_TARGET=sidecar.target, PYTHONUNBUFFERED="1")
    example = REPO_ROOT / "examples" / "python" / "orders_worker.py"
    proc = subprocess.Popen(
        [sys.executable, str(example), "--cron", EVERY_SECOND, "--work-seconds", "0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 20
        while not any("processed order" in line for line in lines):
            assert time.monotonic() < deadline, "".join(lines)
            lines.append(proc.stdout.readline())
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0, "".join(lines) + out
        assert "drained, bye" in out
        assert "Traceback" not in "".join(lines) + out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_zookeeper_mode_two_workers_share_the_items(zookeeper, make_sidecar):
    sidecar = make_sidecar(zk=zookeeper.connect_string, namespace=f"pytest-{os.getpid()}-{time.time_ns()}")
    calls_a, calls_b = Calls(), Calls()
    workers = []
    for i, calls in enumerate((calls_a, calls_b)):
        w = Worker(sidecar.target,
                   options=WorkerOptions(connect_timeout=10, instance_id=f"127.0.0.1@-@py{i}"))

        @w.job(job("zk-orders", count=4))
        def handle(ctx: ShardingContext, calls=calls) -> None:
            calls.add(ctx)

        workers.append(WorkerThread(w))
    def last_items(calls: Calls) -> set:
        snapshot = calls.snapshot()
        if not snapshot:
            return set()
        last = snapshot[-1].execution_id
        return {c.sharding_item for c in snapshot if c.execution_id == last}

    def split() -> bool:
        a, b = last_items(calls_a), last_items(calls_b)
        return bool(a) and bool(b) and not (a & b) and a | b == {0, 1, 2, 3}

    with workers[0], workers[1]:
        wait_until(split, 30, what="the four items split between both workers")
    for w in workers:
        assert w.error is None
