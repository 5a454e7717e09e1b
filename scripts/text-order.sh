#!/usr/bin/env bash
# Writes scripts/text-order.txt: the functions of the release binary that a running sidecar
# executes, hottest first, one symbol per line. build.rs hands the file to the linker, which lays
# those functions out together at the start of .text. A process's code is resident in 64 KiB
# windows around each page it runs, and the sidecar runs ~1.6 MB of its ~6 MB of code: scattered,
# that touches nearly every window; together, about a quarter of them (docs/benchmarks.md,
# "The release profile").
#
# Usage: scripts/text-order.sh
#
# How: the benchmark program (benches/core.rs) runs its figures with every sidecar under
# valgrind's callgrind (SHARDCAR_TEST_BIN); callgrind's profiles name each function of the
# binary that ran and its instructions. Takes about 15 minutes. Needs valgrind
# (apt-get install valgrind) and python3. Run it again when the code changes much: symbols that
# are gone are skipped by the linker, new ones land after the listed ones, so a stale file costs
# memory, never correctness.
# Environment: CARGO_TARGET_DIR is honoured.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
die() { printf 'text-order.sh: %s\n' "$*" >&2; exit 1; }

case "${1:-}" in
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    '') ;;
    *) die "no arguments expected, got '$1' (try --help)" ;;
esac
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null \
    || die "valgrind is not installed (Debian: apt-get install valgrind)"
command -v python3 >/dev/null || die "python3 is not installed"

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
WORK="$(mktemp -d "${TMPDIR:-/tmp}/shardcar-text-order.XXXXXX")"
DUMPER=""
cleanup() {
    [ -z "$DUMPER" ] || kill "$DUMPER" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# Two builds of the same code: the release profile's (cargo build --release, cargo install, the
# package) and the bench profile's (what cargo bench runs). Their symbols differ in the hashes
# that Cargo's per-profile metadata puts in each name, so the file names each function as both
# builds spell it. Copies: the profiles name a binary by its path, and builds replace the
# originals.
cargo build --release --bin shardcar
cp "$TARGET_DIR/release/shardcar" "$WORK/release-shardcar"
cargo bench --bench core --no-run
cp "$TARGET_DIR/release/shardcar" "$WORK/shardcar"
mkdir "$WORK/profiles"
cat >"$WORK/sidecar" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file='$WORK/profiles/%p' --compress-strings=no \
    --compress-pos=no --demangle=no '$WORK/shardcar' "\$@"
EOF
chmod +x "$WORK/sidecar"

# The benchmark ends its sidecars with a kill, before callgrind would write its profile at exit:
# every running callgrind writes what it has counted so far, every two seconds.
( while sleep 2; do callgrind_control --dump >/dev/null 2>&1 || true; done ) &
DUMPER=$!

# The figures of a sidecar at work: one job and 100, many items, resharding, a growing job,
# the transactions per execution, and the same shapes on the in-memory registry. (Not the
# failover figures: they wait on sessions of a few seconds, which a sidecar ten times slower
# under callgrind does not keep.)
export SHARDCAR_TEST_BIN="$WORK/sidecar"
export SHARDCAR_BENCH_ONE_JOB_SECONDS=5
SHARDCAR_BENCH_SCALE=100x2,20x64 cargo bench --bench core -- \
    resharding growth trigger scale standalone transactions

kill "$DUMPER" 2>/dev/null || true
wait "$DUMPER" 2>/dev/null || true
DUMPER=""

python3 - "$WORK/shardcar" "$WORK/release-shardcar" "$WORK/profiles" \
    "$ROOT/scripts/text-order.txt" <<'EOF'
import collections, os, re, subprocess, sys

profiled, other, profiles, out = sys.argv[1:5]

def key(symbol):
    """A symbol without what differs between builds of the same code: a legacy name's hash
    (17h and 16 hex digits), a v0 name's crate disambiguators, a local symbol's number."""
    symbol = re.sub(r"(\.llvm)?\.\d+$", "", symbol)
    symbol = re.sub(r"17h[0-9a-f]{16}E$", "E", symbol)
    return re.sub(r"Cs[0-9A-Za-z]+_", "Cs_", symbol)

def text_symbols(binary):
    """Each function symbol of `binary` and its size."""
    sizes = {}
    for line in subprocess.run(["nm", "--defined-only", "--print-size", binary], check=True,
                               capture_output=True, text=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            sizes[parts[3]] = int(parts[1], 16)
    return sizes

# Self cost (instructions) of each function of the profiled binary, over every profile.
cost = collections.Counter()
for name in os.listdir(profiles):
    obj = fn = None
    calls = False
    with open(os.path.join(profiles, name), errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                obj = line[3:].strip()
            elif line.startswith("fn="):
                # A recursive cycle's depth is marked with 'N after the name.
                fn = re.sub(r"'\d+$", "", line[3:].strip())
                if obj == profiled:
                    cost[fn] += 0
                calls = False
            elif line.startswith("calls="):
                calls = True  # the next cost line is the callee's, not this function's
            elif line[:1].isdigit() or line[:1] in "+-*":
                if calls:
                    calls = False
                elif obj == profiled:
                    parts = line.split()
                    if len(parts) >= 2 and parts[1].isdigit():
                        cost[fn] += int(parts[1])
# Each function as both builds spell it: the other build's symbol of the same name but for the
# hash, and of the same size (a generic function's instances differ in their hash only; those
# of one size are all listed, a few more bytes among the ones that run).
ran_sizes = text_symbols(profiled)
other_by_key = collections.defaultdict(list)
for symbol, size in text_symbols(other).items():
    other_by_key[(key(symbol), size)].append(symbol)
ran = sorted((n for n in cost if n in ran_sizes), key=lambda n: (-cost[n], n))
if len(ran) < 500:
    sys.exit(f"text-order.sh: only {len(ran)} functions of the binary ran; the benchmark failed?")
listed = {}
for n in ran:
    listed.setdefault(n, None)
    for twin in other_by_key.get((key(n), ran_sizes[n]), []):
        listed.setdefault(twin, None)
with open(out, "w") as f:
    f.write("".join(s + "\n" for s in listed))
print(f"text-order.sh: {len(ran)} functions ({len(listed)} symbols) written to {out}")
EOF
