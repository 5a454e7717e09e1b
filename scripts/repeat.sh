#!/usr/bin/env bash
# Runs test suites N times in a row and prints, for every test, how many runs it failed: the
# way to show that a suite is deterministic (a test that fails sometimes is a defect), on an
# idle machine or, with --load, on a busy one.
#
# Usage: scripts/repeat.sh N [--suite SUITE]... [--load L [--load-nice K]] [FILTER]
#   N       runs of each suite (1 or more)
#   SUITE   rust (the integration suites: core, failure, ops, console, harness_smoke; the default),
#           a single Rust suite (core, failure, ops, console, harness_smoke, or nemesis: the
#           unit tests of the nemesis program, cargo test --example nemesis), python (pytest in
#           clients/python) or java (mvn verify in clients/java)
#   --load L       L CPU burners (busy shell loops, one core each) beside every run, from the
#                  first run to the end, so that the tests compete for the cores as they do when
#                  other work shares the machine; e.g. --load 2 on 2 cores. Not during the build.
#                  Each run's line shows the load average it started at, and the table the
#                  load average at the end. The burners are killed when the script ends, fails
#                  or is interrupted, and end by themselves if it is killed outright (SIGKILL).
#   --load-nice K  the burners' niceness, 0 (the default: the tests' own priority) to 19
#   FILTER  passed to the runner: a test-name substring for Rust (cargo test FILTER),
#           a -k expression for pytest, a -Dtest pattern for Maven
#
# e.g. scripts/repeat.sh 5 --suite python --suite java --load 2
#
# Exit status: 0 when every test passed every run; 1 when a test failed (every run's output is
# then kept in $REPEAT_KEEP, default $CARGO_TARGET_DIR/repeat-failed, and its path printed) or
# when no test ran at all; 64 for bad arguments. The suites are built once first; nothing is
# installed (run scripts/install-deps.sh before).
# Environment: CARGO_TARGET_DIR is honoured; REPEAT_VENV is the Python venv the python suite
# runs in (default .venv, which scripts/install-deps.sh makes; another one works with
# PYTHONPATH=clients/python/src, so that this tree's client is the one imported).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# The usage is the comment at the top, from its second line to the first line of code.
usage() { awk 'NR < 2 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }
die() { printf 'repeat.sh: %s\n' "$*" >&2; exit 64; }

[ $# -ge 1 ] || { usage >&2; exit 64; }
case "$1" in -h|--help) usage; exit 0 ;; esac
RUNS="$1"
shift
case "$RUNS" in ''|*[!0-9]*|0) die "N must be a positive number, got '$RUNS' (try --help)" ;; esac

RUST_SUITES=(core failure ops console harness_smoke)
SUITES=()
FILTER=""
LOAD=0
LOAD_NICE=0
while [ $# -gt 0 ]; do
    case "$1" in
        --suite)
            [ $# -ge 2 ] || die "--suite needs a value"
            case "$2" in
                rust) SUITES+=("${RUST_SUITES[@]}") ;;
                core|failure|ops|console|harness_smoke|nemesis|python|java) SUITES+=("$2") ;;
                *) die "unknown suite '$2' (rust, core, failure, ops, console, harness_smoke, nemesis, python, java)" ;;
            esac
            shift 2
            ;;
        --load)
            [ $# -ge 2 ] || die "--load needs a number of CPU burners, e.g. --load 2"
            case "$2" in ''|*[!0-9]*) die "--load takes a number of CPU burners, got '$2'" ;; esac
            LOAD=$((10#$2))
            shift 2
            ;;
        --load-nice)
            [ $# -ge 2 ] || die "--load-nice needs a niceness from 0 to 19"
            case "$2" in ''|*[!0-9]*) die "--load-nice takes a niceness from 0 to 19, got '$2'" ;; esac
            [ "$((10#$2))" -le 19 ] || die "--load-nice takes a niceness from 0 to 19, got '$2'"
            LOAD_NICE=$((10#$2))
            shift 2
            ;;
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option '$1' (try --help)" ;;
        *) [ -z "$FILTER" ] || die "only one FILTER may be given"; FILTER="$1"; shift ;;
    esac
done
[ "${#SUITES[@]}" -gt 0 ] || SUITES=("${RUST_SUITES[@]}")

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
VENV="${REPEAT_VENV:-$ROOT/.venv}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/shardcar-repeat.XXXXXX")"

# The CPU burners of --load: busy loops that also end as soon as this script is gone (kill -0
# fails), so that not even a SIGKILL leaves one spinning.
BURNERS=()
start_load() {
    local i
    for ((i = 0; i < LOAD; i++)); do
        nice -n "$LOAD_NICE" sh -c 'while kill -0 "$1" 2>/dev/null; do :; done' burner "$$" &
        BURNERS+=("$!")
    done
}
stop_load() {
    [ "${#BURNERS[@]}" -gt 0 ] || return 0
    kill "${BURNERS[@]}" 2>/dev/null || true
    wait "${BURNERS[@]}" 2>/dev/null || true
    BURNERS=()
}
load_average() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown; }
cleanup() { stop_load; rm -rf "$WORK"; }
trap cleanup EXIT
# A signal ends the script through exit, so that the EXIT trap runs.
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
RESULTS="$WORK/results"   # lines: SUITE<TAB>TEST<TAB>pass|fail
: >"$RESULTS"

# cargo_target SUITE: Cargo's selection of a Rust suite (the nemesis's own tests are in its
# example program, the others are integration tests).
cargo_target() {
    if [ "$1" = nemesis ]; then echo "--example nemesis"; else echo "--test $1"; fi
}

want_rust=()
want_python=0
want_java=0
for s in "${SUITES[@]}"; do
    case "$s" in
        python) want_python=1 ;;
        java) want_java=1 ;;
        *) want_rust+=("$s") ;;
    esac
done
if [ "$want_python" -eq 1 ] && [ ! -x "$VENV/bin/python" ]; then
    die "no Python venv at $VENV: run scripts/install-deps.sh, or set REPEAT_VENV (see --help)"
fi
if [ "$want_java" -eq 1 ] && ! command -v mvn >/dev/null; then
    die "no mvn for the java suite: run scripts/install-deps.sh"
fi

if [ "${#want_rust[@]}" -gt 0 ] || [ "$want_python" -eq 1 ] || [ "$want_java" -eq 1 ]; then
    echo "==> building (cargo test --no-run, cargo build --bin shardcar)"
    args=()
    # shellcheck disable=SC2207 # cargo_target prints two words
    for s in "${want_rust[@]}"; do args+=($(cargo_target "$s")); done
    [ "${#args[@]}" -eq 0 ] || cargo test -q --no-run "${args[@]}"
    cargo build -q --bin shardcar
fi

# rust_run SUITE RUN: one run of a Rust integration suite; "test NAME ... ok|FAILED" lines.
rust_run() {
    local suite="$1" run="$2" log="$WORK/$1.$2.log"
    set +e
    # shellcheck disable=SC2086 # FILTER is one word or none
    # shellcheck disable=SC2046 # cargo_target prints two words
    cargo test -q $(cargo_target "$suite") -- ${FILTER:+"$FILTER"} --format=pretty >"$log" 2>&1
    set -e
    grep -E '^test .* \.\.\. (ok|FAILED)$' "$log" |
        sed -E 's/^test (.*) \.\.\. (ok|FAILED)$/\1\t\2/' |
        awk -F'\t' -v s="$suite" '{ printf "%s\t%s\t%s\n", s, $1, ($2 == "ok") ? "pass" : "fail" }' >>"$RESULTS"
    if ! grep -qE '^test result: ' "$log"; then
        printf '%s\t(the suite did not finish: see below)\tfail\n' "$suite" >>"$RESULTS"
        tail -20 "$log" | sed 's/^/    /'
    fi
}

python_run() {
    local run="$1" xml="$WORK/python.$1.xml"
    set +e
    (cd clients/python && SHARDCAR_BIN="$TARGET_DIR/debug/shardcar" CARGO_TARGET_DIR="$TARGET_DIR" \
        "$VENV/bin/python" -m pytest -q -p no:cacheprovider --junitxml="$xml" \
        ${FILTER:+-k "$FILTER"} >"$WORK/python.$run.log" 2>&1)
    set -e
    junit_results python "$xml"
}

java_run() {
    local run="$1"
    rm -rf clients/java/*/target/surefire-reports
    set +e
    (cd clients/java && SHARDCAR_BIN="$TARGET_DIR/debug/shardcar" mvn -B -q \
        ${FILTER:+-Dtest="$FILTER" -Dsurefire.failIfNoSpecifiedTests=false} verify \
        >"$WORK/java.$run.log" 2>&1)
    set -e
    local xml
    for xml in clients/java/*/target/surefire-reports/TEST-*.xml; do
        [ -f "$xml" ] && junit_results java "$xml"
    done
    # Kept with the run's logs, for a failure's output (the next run deletes the reports).
    local module
    for module in clients/java/*/target/surefire-reports; do
        [ -d "$module" ] || continue
        mkdir -p "$WORK/java.$run.reports"
        cp -r "$module" "$WORK/java.$run.reports/$(basename "$(dirname "$(dirname "$module")")")"
    done
}

# junit_results SUITE FILE: appends the testcases of a JUnit XML report.
junit_results() {
    [ -f "$2" ] || { printf '%s\t(no report: the suite did not run)\tfail\n' "$1" >>"$RESULTS"; return; }
    python3 - "$1" "$2" >>"$RESULTS" <<'PY'
import sys
import xml.etree.ElementTree as ET
from collections import Counter
suite, path = sys.argv[1], sys.argv[2]
cases = [(f"{c.get('classname', '')}.{c.get('name', '')}".strip("."), c)
         for c in ET.parse(path).getroot().iter("testcase")]
# The cases of one dynamic or parameterized test share their method's name in Surefire's report:
# each is numbered by its place among them, so that the table counts runs, not cases.
shared = {name for name, n in Counter(name for name, _ in cases).items() if n > 1}
place = Counter()
for name, case in cases:
    if name in shared:
        place[name] += 1
        name = f"{name}[{place[name]}]"
    if case.find("skipped") is not None:
        continue
    bad = case.find("failure") is not None or case.find("error") is not None
    print(f"{suite}\t{name}\t{'fail' if bad else 'pass'}")
PY
}

if [ "$LOAD" -gt 0 ]; then
    echo "==> load: $LOAD CPU burners at nice $LOAD_NICE beside every run ($(nproc) cores; load average $(load_average))"
    start_load
fi
announce() { echo "==> run $1/$RUNS: $2 (load average $(load_average))"; }
for run in $(seq 1 "$RUNS"); do
    for s in "${want_rust[@]}"; do
        announce "$run" "$s"
        rust_run "$s" "$run"
    done
    if [ "$want_python" -eq 1 ]; then announce "$run" python; python_run "$run"; fi
    if [ "$want_java" -eq 1 ]; then announce "$run" java; java_run "$run"; fi
done
ended_load="$(load_average)"
stop_load

echo
if [ "$LOAD" -gt 0 ]; then
    echo "==== failed runs per test ($RUNS runs, $LOAD CPU burners at nice $LOAD_NICE; load average at the end $ended_load) ===="
else
    echo "==== failed runs per test ($RUNS runs) ===="
fi
awk -F'\t' '
    { key = $1 "\t" $2; seen[key]++; if ($3 == "fail") failed[key]++ }
    END {
        bad = 0
        for (k in seen) {
            split(k, p, "\t")
            f = failed[k] + 0
            if (f > 0) bad++
            printf "%3d/%-3d  %-14s %s\n", f, seen[k], p[1], p[2]
        }
        exit bad > 0 ? 1 : 0
    }' "$RESULTS" | sort -k3,3 -k4,4 >"$WORK/table" && status=0 || status=$?
cat "$WORK/table"
total=$(wc -l <"$WORK/table")
flaky=$(awk '$1 !~ /^0\// { n++ } END { print n + 0 }' "$WORK/table")
echo "tests: $total, failed at least once: $flaky"
if [ "$total" -eq 0 ]; then
    # Nothing ran, so nothing was shown: a FILTER that matches no test is a mistake.
    echo "repeat.sh: no test ran${FILTER:+ (does FILTER '$FILTER' match any test?)}" >&2
    exit 1
fi
if [ "$flaky" -ne 0 ]; then
    # Every run's output, so a failure can be read after the fact (the work dir goes at exit).
    KEEP="${REPEAT_KEEP:-$TARGET_DIR/repeat-failed}/$(date +%Y%m%d-%H%M%S)"
    mkdir -p "$KEEP"
    cp -r "$WORK"/. "$KEEP"/
    echo "the output of every run is kept in $KEEP"
    exit 1
fi
exit 0
