"""Fixtures that run a real shardcar sidecar (and a real ZooKeeper) for the client tests.

The sidecar binary is ``$SHARDCAR_BIN``, else ``$CARGO_TARGET_DIR/debug/shardcar`` (default
``<repo>/target``), built with ``cargo build --bin shardcar`` when missing. Every process started
here is killed by its pid when the test ends, also when it fails; a paused (SIGSTOP) process is
continued first. Process output goes to files that are printed when a test fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
ZK_JAR = Path("/usr/share/java/zookeeper.jar")
ZK_SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "zk.sh"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    """SIGSTOP, then waits until every thread of the process has stopped. ``kill`` returns once
    the signal is queued: the kernel wakes one thread to act on it, and the others are told to
    stop only once that thread gets a CPU, so under CPU load the other threads (gRPC's, a JVM's,
    the sidecar's runtime) go on running, and reading their sockets, for up to hundreds of
    milliseconds. A test that sends something to a process it froze starts only once no thread
    can read it (Linux: ``/proc/<pid>/task/*/stat``; elsewhere it does not wait)."""
    proc.send_signal(signal.SIGSTOP)
    tasks = Path(f"/proc/{proc.pid}/task")
    if not tasks.is_dir():
        return
    deadline = time.monotonic() + timeout
    while True:
        running = []
        for stat in tasks.glob("*/stat"):
            try:
                text = stat.read_text()
            except OSError:
                continue  # the thread has exited
            state = text[text.rindex(")") + 2]  # "pid (comm) S ...": comm may hold anything
            if state not in "TtZX":
                running.append(f"{stat.parent.name}={state}")
        if not running:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"process {proc.pid} not stopped {timeout}s after SIGSTOP: "
                                 f"{running}")
        time.sleep(0.001)


def _sidecar_binary() -> Path:
    explicit = os.environ.get("SHARDCAR_BIN")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            pytest.fail(f"SHARDCAR_BIN={explicit} does not exist")
        return path
    target_dir = Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target"))
    path = target_dir / "debug" / "shardcar"
    if not path.is_file():
        subprocess.run(["cargo", "build", "--bin", "shardcar"], cwd=REPO_ROOT, check=True)
    return path


@pytest.fixture(scope="session")
def sidecar_bin() -> Path:
    return _sidecar_binary()


class Sidecar:
    """One ``shardcar run`` process; ``target`` is what workers connect to."""

    def __init__(self, binary: Path, workdir: Path, listen: str, zk: Optional[str] = None,
                 session_timeout: Optional[str] = None, namespace: Optional[str] = None,
                 args: Sequence[str] = ()) -> None:
        self.binary = binary
        self.workdir = workdir
        self.listen = listen
        self.zk = zk
        self.session_timeout = session_timeout
        self.namespace = namespace
        self.args = list(args)  # further `shardcar run` flags, e.g. ["--lease", "1s"]
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0
        self.log_paths: List[Path] = []

    @property
    def target(self) -> str:
        return self.listen

    def start(self) -> "Sidecar":
        args = [str(self.binary), "run", "--listen", self.listen]
        if self.zk:
            args += ["--zk", self.zk]
        if self.namespace:
            args += ["--namespace", self.namespace]
        if self.session_timeout:
            args += ["--session-timeout", self.session_timeout]
        args += self.args
        self.starts += 1
        log_path = self.workdir / f"sidecar-{self.starts}.log"
        self.log_paths.append(log_path)
        with open(log_path, "wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        wait_until(self._ready, 60, what=f"sidecar listening on {self.listen}")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"sidecar exited with {self.proc.returncode} before listening:\n{self.logs()}"
            )
        if self.listen.startswith("unix:"):
            path = self.listen[len("unix://"):] if self.listen.startswith("unix://") else self.listen[5:]
            family, addr = socket.AF_UNIX, path
        else:
            host, port = self.listen.rsplit(":", 1)
            family, addr = socket.AF_INET, (host, int(port))
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.connect(addr)
                return True
            except OSError:
                return False

    def pause(self) -> None:
        """SIGSTOP; returns once every thread of the sidecar has stopped."""
        assert self.proc is not None
        stop_process(self.proc)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def terminate(self) -> None:
        """SIGTERM: the sidecar drains (``Shutdown`` to its workers) and exits by itself."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL, like a crash; waits until the process is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        if self.listen.startswith("unix://"):
            Path(self.listen[len("unix://"):]).unlink(missing_ok=True)
        self.start()

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name} ---\n{p.read_text(errors='replace')}" for p in self.log_paths if p.exists()
        )


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Short path: Unix socket paths are limited to about 100 bytes.
    path = Path(tempfile.mkdtemp(prefix="sc-py-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_sidecar(sidecar_bin: Path, workdir: Path, request) -> Iterator:
    """Factory: ``make_sidecar(listen=None, zk=None, session_timeout=None)`` → started Sidecar."""
    started: List[Sidecar] = []

    def make(listen: Optional[str] = None, **kwargs) -> Sidecar:
        sidecar = Sidecar(sidecar_bin, workdir, listen or f"127.0.0.1:{free_port()}", **kwargs)
        started.append(sidecar)
        return sidecar.start()

    yield make
    failed = getattr(request.node, "rep_call", None)
    for sidecar in started:
        sidecar.kill()
        if failed is not None and failed.failed:
            print(sidecar.logs())


@pytest.fixture
def spawn_child(request) -> Iterator:
    """Factory: ``spawn_child(args)`` → a started :class:`helpers.ChildWorker`; every child is
    continued and killed by its pid when the test ends, and its output printed if the test
    failed (or always, with ``SHARDCAR_SHOW_CHILD=1`` and ``pytest -s``)."""
    from helpers import ChildWorker

    started: List[ChildWorker] = []

    def spawn(args: Sequence[str]) -> ChildWorker:
        child = ChildWorker(args)
        started.append(child)
        return child

    try:
        yield spawn
    finally:
        failed = getattr(request.node, "rep_call", None)
        for child in started:
            child.kill()
            if (failed is not None and failed.failed) or os.environ.get("SHARDCAR_SHOW_CHILD"):
                print(f"--- worker {child.args} ---\n{child.output()}")


@pytest.fixture
def running() -> Iterator:
    """Factory: ``running(api, target, register, options=None)`` → a started
    :class:`helpers.Running` (a sync or asyncio worker in a thread); each is stopped when the
    test ends, also when it failed."""
    from helpers import Running

    started: List[Running] = []

    def start(api: str, target: str, register, options=None) -> Running:
        run = Running(api, target, register, options)
        started.append(run)
        return run.start()

    try:
        yield start
    finally:
        for run in started:
            run.stop()


@pytest.fixture
def sidecar(make_sidecar) -> Sidecar:
    """A standalone (in-memory) sidecar on a free loopback port."""
    return make_sidecar()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


class ZooKeeper:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: Optional[subprocess.Popen] = None

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "ZooKeeper":
        # scripts/zk.sh is the one way shardcar starts ZooKeeper; `run` replaces itself with
        # the server, so this process's pid is the server's.
        log = open(self.workdir / "zookeeper.log", "wb")
        self.proc = subprocess.Popen(
            ["bash", str(ZK_SCRIPT), "run", str(self.workdir), str(self.port)],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "ZK_FORCE_SYNC": "no"},
        )
        log.close()
        wait_until(self._ready, 60, interval=0.1, what="ZooKeeper `srvr` to report a Mode")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                "ZooKeeper exited early:\n" + (self.workdir / "zookeeper.log").read_text()
            )
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"srvr")
                reply = b""
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    reply += chunk
            return b"Mode:" in reply
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeper]:
    """A real single-node ZooKeeper from Debian's package, on a free port (session-wide)."""
    if shutil.which("java") is None or not ZK_JAR.is_file():
        pytest.fail("ZooKeeper is not installed: run scripts/install-deps.sh (package zookeeper)")
    workdir = Path(tempfile.mkdtemp(prefix="sc-zk-"))
    zk = ZooKeeper(workdir)
    try:
        yield zk.start()
    finally:
        zk.stop()
        shutil.rmtree(workdir, ignore_errors=True)
