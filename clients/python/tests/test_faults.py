"""The worker contract under faults, against real sidecar processes, with the worker in a child
process (``child_worker.py``) so that the test can freeze it (SIGSTOP) and continue it.

Every wait is for something the worker or the sidecar reported; the only fixed durations are
the freezes themselves, each several times the lease it must outlast. The sidecars run with
short leases (``--lease``) and, where a freeze must not cost the connection, a long HTTP/2
keepalive timeout: a frozen worker then keeps its stream, and the renewals and triggers the
sidecar sends meanwhile wait in its socket buffer until it runs again.

(a) A worker frozen past its lease in the middle of an item: its first check after the pause
says cancelled, and the item is declined, never answered. (b) Frozen while idle: the renewals
and the trigger it reads after the pause are void, the trigger is declined at once and the item
runs again later; frozen past the keepalive timeout too, it runs nothing stale and subscribes
again. (c) SIGTERM to the sidecar (a drain) while an item runs: the item finishes and is
answered, and the worker subscribes again until a new sidecar process listens on the same
address, then runs its triggers; with ``stop_on_drain`` it stops instead.
``SHARDCAR_SHOW_CHILD=1 pytest -s`` prints what each child did.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Dict, List, Optional

import grpc
import pytest

from shardcar._proto import shardcar_pb2 as pb
from shardcar._proto import shardcar_pb2_grpc as pb_grpc

from helpers import ChildWorker

EVERY_SECOND = "* * * * * ?"
EVERY_TWO_SECONDS = "0/2 * * * * ?"


def child_args(sidecar, job: str, api: str, first: str, cron: str = EVERY_SECOND,
               release_file: str = "") -> List[str]:
    args = ["--target", sidecar.target, "--job", job, "--cron", cron, "--first", first]
    if api == "asyncio":
        args.append("--asyncio")
    if release_file:
        args += ["--release-file", release_file]
    return args


def freeze(child: ChildWorker, seconds: float, release: Optional[Path] = None) -> float:
    """SIGSTOP for ``seconds`` (the fault itself), then SIGCONT; returns the wall time of the
    resume. ``release``, if given, is created while the process is still stopped (it ends a
    handler's window, see ``child_worker.py``)."""
    child.pause()
    try:
        time.sleep(seconds)
    finally:
        if release is not None:
            release.touch()
        resumed = time.time()
        child.resume()
    return resumed


def is_log(pattern: str):
    regex = re.compile(pattern)
    return lambda e: e.get("ev") == "log" and regex.search(e["msg"]) is not None


def executions(sidecar, job: str) -> Dict[str, pb.ExecutionInfo]:
    """The sidecar's record of the job's finished executions, by id (AdminService.ListExecutions)."""
    with grpc.insecure_channel(sidecar.target) as channel:
        reply = pb_grpc.AdminServiceStub(channel).ListExecutions(
            pb.ListExecutionsRequest(job_name=job), timeout=10)
    return {e.execution_id: e for e in reply.executions}


def recorded(sidecar, job: str, execution_id: str, timeout: float = 15) -> pb.ExecutionInfo:
    deadline = time.monotonic() + timeout
    while True:
        found = executions(sidecar, job).get(execution_id)
        if found is not None:
            return found
        assert time.monotonic() < deadline, f"execution {execution_id} never recorded as finished"
        time.sleep(0.1)


# -- (a) a pause past the lease in the middle of an item ------------------------------------------

LEASE_A = 3.0
FREEZE_A = 6.5  # past the lease, and past every renewal sent before the freeze


@pytest.mark.parametrize("first", ["busy", "wait"])
@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_a_worker_paused_past_its_lease_sees_cancelled_at_its_first_check(
        make_sidecar, spawn_child, api, first, tmp_path):
    """SIGSTOP in the middle of an item for longer than the lease, then SIGCONT: the handler's
    first check (``ctx.cancelled`` after a blocking sleep that, in an asyncio handler, keeps
    every task of the worker from running; ``ctx.wait()`` / ``await ctx.wait_async()``)
    already says cancelled. The item is declined, never answered, and runs again."""
    sidecar = make_sidecar(args=["--lease", f"{LEASE_A:g}s", "--keepalive-timeout", "60s"])
    job = f"paused-{api}-{first}"
    release = tmp_path / "release"
    child = spawn_child(child_args(sidecar, job, api, first, release_file=str(release)))
    _, start = child.wait_for(lambda e: e["ev"] == "start", 30, "the first item to start")
    child.wait_for(lambda e: e["ev"] == "working", 10, "the handler's loop of checks")
    freeze(child, FREEZE_A, release)

    _, check = child.wait_for(lambda e: e["ev"] in ("check", "stopped"), 30,
                              "the handler's first check after the pause")
    assert check["ev"] == "check", f"the handler was cancelled before the pause: {check}"
    assert check["gap"] >= FREEZE_A - 0.5, f"the freeze missed the handler's window: {check}"
    if api == "asyncio" and first == "wait":
        # Whichever ran first after the pause (the wait's own check, or the worker cancelling
        # the task), the handler learnt at once.
        assert check["cancelled"] in (True, "CancelledError"), check
    else:
        assert check["cancelled"] is True, check
    _, stopped = child.wait_for(lambda e: e["ev"] == "stopped", 10, "the handler to stop")
    assert "lease expired" in stopped["reason"]

    execution = start["exec"]
    child.wait_for(is_log(rf"declining items \[0\] of {execution}: lease expired"), 15,
                   "the stopped item to be declined")
    child.wait_for(lambda e: e["ev"] == "start" and e["exec"] != execution, 30,
                   "the item to run again")
    assert not any(is_log(rf"complete of {execution}|report_failure of {execution}")(e)
                   for e in child.snapshot()), "a cancelled item was answered"
    record = recorded(sidecar, job, execution)
    assert record.outcome == pb.EXECUTION_OUTCOME_REVOKED
    assert "declined by the worker" in record.error and "lease expired" in record.error


# -- (b) a trigger that reaches the worker without a valid lease ----------------------------------

LEASE_B = 1.0
# Past the next fire (every 2 s) plus the lease of the renewal sent before it, with a margin:
# the trigger and every renewal sent before it are stale when the worker reads them.
FREEZE_B = 4.5


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_a_trigger_read_without_a_valid_lease_is_declined_and_the_item_runs_again(
        make_sidecar, spawn_child, api):
    """Frozen right after an answer (idle), past its lease but under the keepalive timeout: the
    sidecar's renewals and its next trigger wait in the socket buffer. Resumed, the worker reads
    the renewals as void and declines the trigger at once; the item runs again later, under a
    fresh lease."""
    sidecar = make_sidecar(args=["--lease", f"{LEASE_B:g}s", "--keepalive-timeout", "60s"])
    job = f"stale-trigger-{api}"
    child = spawn_child(child_args(sidecar, job, api, "quick", cron=EVERY_TWO_SECONDS))
    declined: Optional[str] = None
    for attempt in range(3):
        mark, _ = child.wait_for(is_log(r"^job \S+: complete of \S+ items \[0\] accepted"), 30,
                                 "an answered execution")
        mark += 1
        resumed = freeze(child, FREEZE_B)
        # Events are handled in order, so by the next start the stale trigger (if any) was.
        index, again = child.wait_for(lambda e: e["ev"] == "start", 30,
                                      "the item to run after the pause", start=mark)
        logs = [e["msg"] for e in child.snapshot()[mark:index] if e["ev"] == "log"]
        stale = [re.search(r"declining items \[0\] of (\S+): the trigger arrived without a valid "
                           r"lease", m) for m in logs]
        stale_ids = [m.group(1) for m in stale if m]
        if not stale_ids:
            # The freeze began before the answer reached the sidecar (no trigger was sent while
            # the worker was frozen): nothing to show this time; freeze again.
            continue
        declined = stale_ids[0]
        assert again["exec"] != declined
        # What runs came with a lease still valid when read: a trigger fired at F is preceded
        # by a lease granted no earlier than F - lease/3, so it can run only if F > R - lease.
        assert again["fire"] > resumed - LEASE_B - 0.05, f"stale work was run: {again}"
        assert any("read after it expired" in m for m in logs), logs
        break
    assert declined is not None, "no trigger was sent to the frozen worker in three tries"
    record = recorded(sidecar, job, declined)
    assert record.outcome == pb.EXECUTION_OUTCOME_REVOKED
    assert "declined by the worker: the trigger arrived without a valid lease" in record.error
    assert not any(e["ev"] == "start" and e["exec"] == declined for e in child.snapshot())


FREEZE_B2 = 5.0  # past the 1 s lease and the 1 s keepalive timeout (pings every 0.5 s)


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_a_worker_paused_past_its_lease_and_the_keepalive_runs_no_stale_work(
        make_sidecar, spawn_child, api):
    """Frozen past both its lease and the keepalive timeout: the sidecar closes the connection.
    Resumed, the worker runs nothing it was sent before (whatever it still reads from its
    socket: a renewal or trigger that waited there is stale), subscribes again, and the item
    runs again on the new stream."""
    sidecar = make_sidecar(args=["--lease", f"{LEASE_B:g}s", "--keepalive-interval", "500ms",
                                 "--keepalive-timeout", "1s"])
    job = f"stale-connection-{api}"
    child = spawn_child(child_args(sidecar, job, api, "quick"))
    mark, _ = child.wait_for(is_log(r"complete of \S+ items \[0\] accepted"), 30,
                             "an answered execution")
    mark += 1
    paused = time.time()
    resumed = freeze(child, FREEZE_B2)
    registered, _ = child.wait_for(is_log(r"registered as"), 30, "a new subscription",
                                   start=mark)
    child.wait_for(lambda e: e["ev"] == "start", 30, "the item to run again", start=registered)
    for event in child.snapshot()[mark:]:
        if event["ev"] == "start":
            assert not (paused - 0.05 <= event["fire"] <= resumed - LEASE_B), (
                f"an execution fired while the worker was frozen was run: {event}")
    starts = [i for i, e in enumerate(child.snapshot()) if i >= mark and e["ev"] == "start"]
    assert starts and starts[0] > registered


# -- (c) Shutdown: a drain (SIGTERM to the sidecar) and what follows it ---------------------------


def drain_while_an_item_runs(make_sidecar, spawn_child, workdir, job: str, api: str,
                             *extra: str):
    """A worker runs an item (``--first release``) and its sidecar gets SIGTERM, as
    ``systemctl restart`` does: the worker must be told ``Shutdown`` of kind DRAIN, let the item
    finish and answer it (the sidecar records it completed: only an accepted ``Complete`` does
    that), and the sidecar must exit 0. Returns the sidecar, the child, the execution and the
    index of the worker's ``Shutdown`` line."""
    history = workdir / "history.jsonl"
    release = workdir / "release"
    sidecar = make_sidecar(args=["--shutdown-grace", "60s", "--history-file", str(history)])
    child = spawn_child(child_args(sidecar, job, api, "release", release_file=str(release))
                        + list(extra))
    _, start = child.wait_for(lambda e: e["ev"] == "start", 30, "the first item to start")
    execution = start["exec"]
    sidecar.terminate()
    shutdown, _ = child.wait_for(is_log(r"sent Shutdown \(drain,"), 30,
                                 "the worker to receive Shutdown of kind DRAIN")
    release.touch()
    _, released = child.wait_for(lambda e: e["ev"] == "released", 30, "the item to finish")
    assert released["cancelled"] is False
    assert sidecar.proc is not None and sidecar.proc.wait(60) == 0
    # The reply may reach the worker after the stream's end, which it may not wait for.
    records = [json.loads(line) for line in history.read_text().splitlines() if line.strip()]
    mine = [r for r in records if execution in json.dumps(r)]
    assert mine, f"execution {execution} not in the sidecar's history: {records}"
    assert "completed" in json.dumps(mine[-1]).lower(), mine[-1]
    logs = child.logs()
    assert not any(re.search(r"declin|answer rejected", m) for m in logs), logs
    return sidecar, child, execution, shutdown


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_a_drain_finishes_the_running_item_then_the_worker_subscribes_to_the_new_sidecar(
        make_sidecar, spawn_child, workdir, api):
    """A drain (SIGTERM to the sidecar) while an item runs: ``Shutdown`` of kind DRAIN, the
    item finishes and is answered, the sidecar ends the stream and exits. The worker does not
    stop (the default): it subscribes again with backoff while no sidecar listens, and once a
    new sidecar process listens on the same address it registers there and runs its
    triggers."""
    sidecar, child, execution, shutdown = drain_while_an_item_runs(
        make_sidecar, spawn_child, workdir, f"drained-{api}", api)
    ended, _ = child.wait_for(is_log(r"the sidecar drained .*; subscribing again"), 30,
                              "the worker to subscribe again after the drain", start=shutdown)
    # With the sidecar gone, a subscription fails and is tried again.
    child.wait_for(is_log(r"reconnecting in"), 30, "a subscription refused while no sidecar "
                   "listens, and tried again", start=ended + 1)
    sidecar.start()  # a new sidecar process on the same address
    registered, _ = child.wait_for(is_log(r"registered as"), 60,
                                   "the worker to register with the new sidecar", start=ended)
    _, again = child.wait_for(lambda e: e["ev"] == "start", 30,
                              "an item triggered by the new sidecar", start=registered)
    assert again["exec"] != execution
    assert not any(e["ev"] == "exit" for e in child.snapshot()), "run() returned"
    assert child.proc.poll() is None


def test_with_stop_on_drain_a_drain_stops_the_worker_once_its_item_is_answered(
        make_sidecar, spawn_child, workdir):
    """``stop_on_drain=True``: the same drain, and then the worker stops by itself (``run()``
    returns, the process exits 0) instead of subscribing again."""
    _, child, _, shutdown = drain_while_an_item_runs(
        make_sidecar, spawn_child, workdir, "drained-stop", "sync", "--stop-on-drain")
    child.wait_for(is_log(r"stream ended after the sidecar sent Shutdown \(drain\); the worker "
                          r"stops"), 30, "the worker to stop", start=shutdown)
    child.wait_for(lambda e: e["ev"] == "exit", 30, "run() to return")
    assert child.wait_exit(30) == 0
