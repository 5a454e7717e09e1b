#!/usr/bin/env bash
# The shardcar demo (README quickstart #1): builds shardcar, starts a sidecar — standalone
# (in-memory) unless SHARDCAR_ZK names a ZooKeeper (e.g. after `scripts/zk.sh start`) — and
# DEMO_WORKERS example workers of one job, prints their output for DEMO_SECONDS, then stops one
# worker half-way so you see its items move, and stops everything on exit (also on Ctrl-C).
# It installs only what it needs, when missing (scripts/install-deps.sh --demo: CA
# certificates, a C compiler, and for the Python worker python3-venv and the Python client in
# .venv), builds only what it runs (the sidecar, and the Rust worker when DEMO_WORKER=rust)
# with cargo's progress shown, and prints each worker's lines whole, behind its name.
#
# Environment:
#   SHARDCAR_ZK      ZooKeeper connect string (default: none, standalone)
#   DEMO_SECONDS     how long to run (default 20)
#   DEMO_WORKERS     how many workers (default 2)
#   DEMO_LISTEN      sidecar address (default 127.0.0.1:50071)
#   DEMO_WORKER      python (examples/python/orders_worker.py, default) or rust (examples/demo_worker.rs)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

DEMO_SECONDS="${DEMO_SECONDS:-20}"
DEMO_WORKERS="${DEMO_WORKERS:-2}"
DEMO_LISTEN="${DEMO_LISTEN:-127.0.0.1:50071}"
DEMO_WORKER="${DEMO_WORKER:-python}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
for n in "$DEMO_SECONDS" "$DEMO_WORKERS"; do
    case "$n" in ''|*[!0-9]*) echo "demo.sh: DEMO_SECONDS and DEMO_WORKERS must be numbers" >&2; exit 64 ;; esac
done

case "$DEMO_WORKER" in
    python|rust) ;;
    *) echo "demo.sh: DEMO_WORKER must be python or rust, not '$DEMO_WORKER'" >&2; exit 64 ;;
esac
HOST="${DEMO_LISTEN%:*}"
PORT="${DEMO_LISTEN##*:}"
case "$PORT" in ''|*[!0-9]*) echo "demo.sh: DEMO_LISTEN must be host:port, not '$DEMO_LISTEN'" >&2; exit 64 ;; esac

if [ -t 1 ]; then BOLD=$'\e[1m'; RESET=$'\e[0m'; else BOLD=''; RESET=''; fi
say() { printf '%s[demo] %s%s\n' "$BOLD" "$*" "$RESET"; }

SIDECAR_PID=""
WORKER_PIDS=()
LOGDIR="$(mktemp -d "${TMPDIR:-/tmp}/shardcar-demo.XXXXXX")"
# stop PID...: SIGTERM, then up to 5 s for each to exit, then SIGKILL.
stop() {
    local pid
    for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "$@"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
}
cleanup() {
    trap - EXIT INT TERM
    # The workers first, so that they drain and leave; a sidecar stopped under them would send
    # them a drain's Shutdown, after which they wait to subscribe again.
    [ "${#WORKER_PIDS[@]}" -eq 0 ] || stop "${WORKER_PIDS[@]}"
    [ -z "$SIDECAR_PID" ] || stop "$SIDECAR_PID"
    wait 2>/dev/null || true
    say "stopped; sidecar log: $LOGDIR/sidecar.log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$DEMO_WORKER" = python ]; then
    say "installing what the demo needs, if missing: a C compiler, python3-venv, the Python client in .venv"
    scripts/install-deps.sh --demo
    BUILD=(--bin shardcar)
    WHAT="shardcar"
else
    say "installing what the demo needs, if missing: a C compiler"
    scripts/install-deps.sh --demo --no-python
    BUILD=(--bin shardcar --example demo_worker)
    WHAT="shardcar and the Rust demo worker"
fi
# Cargo's own progress (a line per crate; a bar on a terminal), on stdout with the rest.
say "building $WHAT (debug build: a few minutes the first time, seconds after)"
cargo build "${BUILD[@]}" 2>&1

if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
    echo "demo.sh: something already listens on $DEMO_LISTEN: set DEMO_LISTEN=127.0.0.1:<free port>" >&2
    exit 1
fi
SIDECAR_ARGS=(run --listen "$DEMO_LISTEN")
if [ -n "${SHARDCAR_ZK:-}" ]; then
    SIDECAR_ARGS+=(--zk "$SHARDCAR_ZK")
    say "starting the sidecar on $DEMO_LISTEN with ZooKeeper $SHARDCAR_ZK"
else
    say "starting the sidecar on $DEMO_LISTEN, standalone (set SHARDCAR_ZK for ZooKeeper)"
fi
env -u SHARDCAR_ZK "$TARGET_DIR/debug/shardcar" "${SIDECAR_ARGS[@]}" >"$LOGDIR/sidecar.log" 2>&1 &
SIDECAR_PID=$!

for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then break; fi
    if ! kill -0 "$SIDECAR_PID" 2>/dev/null; then
        tail -n 20 "$LOGDIR/sidecar.log" >&2
        echo "demo.sh: the sidecar exited (log above)" >&2
        exit 1
    fi
    sleep 0.1
done
(exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null || { echo "demo.sh: the sidecar did not listen within 30 s" >&2; exit 1; }

# Each worker's output, stdout and stderr, goes through its own `sed -u`, which writes every
# line whole (one write per line) with the worker's name in front.
start_worker() {
    local name="$1"
    case "$DEMO_WORKER" in
        rust)
            # Process substitution keeps $! the worker's pid (not a pipeline's last command).
            "$TARGET_DIR/debug/examples/demo_worker" "http://$DEMO_LISTEN" \
                > >(sed -u "s/^/[$name] /") 2>&1 &
            ;;
        python)
            PYTHONUNBUFFERED=1 "$ROOT/.venv/bin/python" examples/python/orders_worker.py \
                --target "$DEMO_LISTEN" > >(sed -u "s/^/[$name] /") 2>&1 &
            ;;
    esac
    WORKER_PIDS+=("$!")
}

for i in $(seq "$DEMO_WORKERS"); do
    start_worker "worker-$i"
    sleep 0.3
done
say "running for ${DEMO_SECONDS}s (Ctrl-C to stop)"

HALF=$((DEMO_SECONDS / 2))
sleep "$HALF"
if [ "$DEMO_WORKERS" -gt 1 ]; then
    say "stopping worker-$DEMO_WORKERS: the others take its items over"
    kill -INT "${WORKER_PIDS[-1]}" 2>/dev/null || true
fi
sleep $((DEMO_SECONDS - HALF))
say "time is up"
