#!/usr/bin/env bash
# The nemesis: a randomized, seeded fault soak of shardcar that finds coordination bugs on its
# own. A real 3-node ZooKeeper ensemble, three real sidecars (each behind a TCP proxy per
# ZooKeeper node), proto-only workers in child processes for four cron jobs (strict ones, and
# minimal ones that keep every MUST of the contract and none of its MAYs) and a resident job of
# 6 items (#50: each item held by one worker from its Trigger until a Revoke or the end of its
# lease, then declined once); faults from a schedule that depends on the seed only, some aimed
# at the moment a minimal worker answers; safety, fencing, lost-fire, liveness, execution-end,
# failover-bound and resident-hold invariants checked continuously and at the end
# (examples/nemesis/). Workers honour Shutdown.kind: after a drain they subscribe again with
# backoff until the sidecar is back; after a remote shutdown they exit.
#
# Usage: scripts/nemesis.sh [--seed N] [--duration 60s] [--ensemble 3] [--only 3,7] [--out DIR]
#        scripts/nemesis.sh --print-schedule [--seed N] [--duration 60s] [--ensemble 3]
#        scripts/nemesis.sh --recheck target/nemesis/seed-N/history.json
#        scripts/nemesis.sh --self-check
#   --seed N          the schedule's seed (default: drawn from the clock, and printed)
#   --duration D      how long faults are injected, e.g. 60s or 2m (default 60s); liveness is
#                     then required within session timeout + 3 s of the last fault, and every
#                     resident item held by a live worker within twice the session timeout
#   --ensemble N      ZooKeeper nodes: 3 (default) or more; 1 runs without node kills
#   --only LIST       inject only these faults of the seed's schedule (e.g. 3,7), to reduce a
#                     failing seed; the schedule itself is unchanged
#   --out DIR         logs and report (default: $CARGO_TARGET_DIR/nemesis/seed-N): the fault
#                     log, every worker event (events.log), each sidecar's and ZooKeeper node's
#                     log, and the history --recheck reads
#   --recheck FILE    the end-of-soak checks again over a soak's saved history (no cluster)
#   --print-schedule  print the seed's fault schedule and exit
#   --self-check      feed the invariant checker histories that break each invariant; it must
#                     report every one (also: cargo test --example nemesis)
#
# It prints the fault schedule, a timed fault log, figures (worst worker-crash and member-crash
# failover, executions' ends, the minimal workers' replies, the answer-aimed faults, the
# resident holds: when every item was held again, hand-off times on joins and leaves as median,
# p99 and count), every violation, and last exactly one line:
#   nemesis: seed S, F faults, R runs, V violations
# Exit status: 0 without violations, 1 with violations, 2 when the cluster could not be set up,
# 64 for bad arguments, 130 when interrupted. A failing seed replays the same fault schedule.
#
# Builds `cargo build --bin shardcar --example nemesis` first (NEMESIS_NO_BUILD=1 skips it).
# Environment: CARGO_TARGET_DIR is honoured; SHARDCAR_TEST_BIN overrides the sidecar binary.
# Needs Java and Debian's ZooKeeper jars (scripts/install-deps.sh).
# Every process of the soak (ZooKeeper, sidecars, workers) runs in one process group of its own,
# which is killed when this script ends, fails or is interrupted (Ctrl-C); its temporary files
# go with it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

case "${1:-}" in
    -h|--help) sed -n '2,45p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
export CARGO_TARGET_DIR="$TARGET_DIR"

if [ "${NEMESIS_NO_BUILD:-0}" != 1 ]; then
    echo "nemesis.sh: building the sidecar and the nemesis (target dir $TARGET_DIR)" >&2
    cargo build --quiet --bin shardcar --example nemesis
fi
BIN="$TARGET_DIR/debug/examples/nemesis"
export SHARDCAR_TEST_BIN="${SHARDCAR_TEST_BIN:-$TARGET_DIR/debug/shardcar}"
[ -x "$BIN" ] || { echo "nemesis.sh: $BIN is missing (build failed?)" >&2; exit 2; }

RUN_TMP="$(mktemp -d "${TMPDIR:-/tmp}/nemesis.XXXXXX")"
PGID=""

# Kills the soak's process group: SIGTERM first (the nemesis stops its cluster itself), then
# SIGKILL for anything left, and removes the temporary directory.
cleanup() {
    if [ -n "$PGID" ] && kill -0 -- "-$PGID" 2>/dev/null; then
        kill -TERM -- "-$PGID" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 -- "-$PGID" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL -- "-$PGID" 2>/dev/null || true
    fi
    rm -rf "$RUN_TMP"
}
on_signal() {
    trap - INT TERM
    cleanup
    exit 130
}
trap on_signal INT TERM
trap cleanup EXIT

# A session (and process group) of its own: its id is the nemesis's pid.
setsid env TMPDIR="$RUN_TMP" "$BIN" "$@" &
PGID=$!
set +e
wait "$PGID"
rc=$?
set -e
exit "$rc"
