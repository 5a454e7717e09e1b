#!/usr/bin/env bash
# Runs test suites N times in a row and prints, for every test, how many runs it failed: the
# way to show that a suite is deterministic (a test that fails sometimes is a defect).
#
# Usage: scripts/repeat.sh N [--suite SUITE]... [FILTER]
#   N       runs of each suite (1 or more)
#   SUITE   rust (the integration suites: core, failure, ops, console, harness_smoke; the default),
#           a single Rust suite (core, failure, ops, console, harness_smoke, or nemesis: the
#           unit tests of the nemesis program, cargo test --example nemesis), python or java
#   FILTER  passed to the runner: a test-name substring for Rust (cargo test FILTER),
#           a -k expression for pytest, a -Dtest pattern for Maven
#
# Exit status: 0 when every test passed every run, 1 otherwise (every run's output is then kept
# in $REPEAT_KEEP, default $CARGO_TARGET_DIR/repeat-failed, and its path printed). The suites
# are built once first; nothing is installed (run scripts/install-deps.sh before).
# Environment: CARGO_TARGET_DIR is honoured.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
die() { printf 'repeat.sh: %s\n' "$*" >&2; exit 64; }

[ $# -ge 1 ] || { usage >&2; exit 64; }
case "$1" in -h|--help) usage; exit 0 ;; esac
RUNS="$1"
shift
case "$RUNS" in ''|*[!0-9]*|0) die "N must be a positive number, got '$RUNS' (try --help)" ;; esac

RUST_SUITES=(core failure ops console harness_smoke)
SUITES=()
FILTER=""
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
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option '$1' (try --help)" ;;
        *) [ -z "$FILTER" ] || die "only one FILTER may be given"; FILTER="$1"; shift ;;
    esac
done
[ "${#SUITES[@]}" -gt 0 ] || SUITES=("${RUST_SUITES[@]}")

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
WORK="$(mktemp -d "${TMPDIR:-/tmp}/shardcar-repeat.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
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
    [ -x "$ROOT/.venv/bin/python" ] || die "no .venv: run scripts/install-deps.sh"
    set +e
    (cd clients/python && SHARDCAR_BIN="$TARGET_DIR/debug/shardcar" CARGO_TARGET_DIR="$TARGET_DIR" \
        "$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider --junitxml="$xml" \
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
suite, path = sys.argv[1], sys.argv[2]
for case in ET.parse(path).getroot().iter("testcase"):
    name = f"{case.get('classname', '')}.{case.get('name', '')}".strip(".")
    if case.find("skipped") is not None:
        continue
    bad = case.find("failure") is not None or case.find("error") is not None
    print(f"{suite}\t{name}\t{'fail' if bad else 'pass'}")
PY
}

for run in $(seq 1 "$RUNS"); do
    for s in "${want_rust[@]}"; do
        echo "==> run $run/$RUNS: $s"
        rust_run "$s" "$run"
    done
    if [ "$want_python" -eq 1 ]; then echo "==> run $run/$RUNS: python"; python_run "$run"; fi
    if [ "$want_java" -eq 1 ]; then echo "==> run $run/$RUNS: java"; java_run "$run"; fi
done

echo
echo "==== failed runs per test ($RUNS runs) ===="
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
if [ "$flaky" -ne 0 ]; then
    # Every run's output, so a failure can be read after the fact (the work dir goes at exit).
    KEEP="${REPEAT_KEEP:-$TARGET_DIR/repeat-failed}/$(date +%Y%m%d-%H%M%S)"
    mkdir -p "$KEEP"
    cp -r "$WORK"/. "$KEEP"/
    echo "the output of every run is kept in $KEEP"
    exit 1
fi
exit 0
