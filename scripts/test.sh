#!/usr/bin/env bash
# shellcheck disable=SC2317 # the step functions are run indirectly, through run_step
# THE test command of shardcar (also run by CI through .ci/run). The cheap checks come first:
#   dependencies → cargo fmt --check → the sizes of the sources (no non-test .rs file under src/
#   over 600 lines, no #[path] module) → buf lint + breaking (proto/) → the Python stubs
#   regenerated and compared with the committed ones → clippy: ONE debug build of every target
#   (lib, bins, tests, examples, benchmarks: `cargo test --no-run --all-targets`, and the
#   examples as programs) compiled by clippy-driver with -D warnings, so that the lints of
#   `cargo clippy --all-targets -- -D warnings` and the build the tests run come from one
#   compilation (cargo clippy alone would compile every dependency a second time, for checking)
#   → the Debian package made from that build's target/debug/shardcar, installed with dpkg,
#   checked and removed (scripts/package.sh --dev --no-build --check; as root) → then, as three
#   lanes side by side: the Rust tests (cargo test: lib, bins, tests, examples; the integration
#   tests start real ZooKeeper and sidecar processes) then the Java client's `mvn verify`; the
#   Python client's pytest suite and package smoke test (sdist, wheel) then the nemesis fault
#   soak, short profile (2 seeds × 60 s, scripts/nemesis.sh); the Java client's jars installed
#   into the local Maven repository then the ElasticJob mixed-cluster suite (real ElasticJob 3.0.4
#   JVMs next to sidecars, tests/interop/run.sh). Each lane's output lines are behind its name;
#   SHARDCAR_TEST_LANES=1 runs them one after the other. The client and interop suites run
#   against the debug binary target/debug/shardcar; nothing is built in the release profile (the
#   benchmarks' figures come from `cargo bench`, run by hand: docs/benchmarks.md).
#   Every step runs even after a failure; a summary comes last and the exit status is non-zero
#   if any step failed.
#
# Usage: scripts/test.sh [--no-deps] [--fail-fast] [STEP...]
#   STEP: deps fmt sizes proto stubs clippy package rust python java jars interop nemesis
#   (default: all of them; `--no-deps` drops `deps`)
# Environment: CARGO_TARGET_DIR is honoured; CARGO_TEST_ARGS are passed to `cargo test`
# (e.g. CARGO_TEST_ARGS="-- --test-threads=1"), PYTEST_ARGS to pytest, MVN_ARGS to Maven;
# NEMESIS_SEEDS (default "1 2") and NEMESIS_DURATION (default 60s) choose the fault soak's profile.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

ALL_STEPS=(deps fmt sizes proto stubs clippy package rust python java jars interop nemesis)
STEPS=()
FAIL_FAST=0
NO_DEPS=0
for arg in "$@"; do
    case "$arg" in
        --no-deps) NO_DEPS=1 ;;
        --fail-fast) FAIL_FAST=1 ;;
        # The help is the comment at the top, from its third line to the first line of code.
        -h|--help) awk 'NR < 3 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
        deps|fmt|sizes|proto|stubs|clippy|package|rust|python|java|jars|interop|nemesis) STEPS+=("$arg") ;;
        *) echo "test.sh: unknown argument: $arg (try --help)" >&2; exit 64 ;;
    esac
done
[ "${#STEPS[@]}" -eq 0 ] && STEPS=("${ALL_STEPS[@]}")
if [ "$NO_DEPS" -eq 1 ]; then
    kept=()
    for step in "${STEPS[@]}"; do [ "$step" = deps ] || kept+=("$step"); done
    STEPS=("${kept[@]}")
fi

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
SHARDCAR_BIN_PATH="$TARGET_DIR/debug/shardcar"
VENV="$ROOT/.venv"

if [ -t 1 ]; then BOLD=$'\e[1m'; RED=$'\e[31m'; GREEN=$'\e[32m'; YELLOW=$'\e[33m'; RESET=$'\e[0m'
else BOLD=""; RED=""; GREEN=""; YELLOW=""; RESET=""; fi

RESULTS=()   # "name|status|seconds|note"
FAILED=0
want() { local s; for s in "${STEPS[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
banner() { printf '\n%s==> %s%s\n' "$BOLD" "$*" "$RESET"; }
# record NAME STATUS SECONDS CPU_SECONDS [NOTE]
record() { RESULTS+=("$1|$2|$3|$4|${5:-}"); }
# The CPU seconds (user + system) of this shell's children that have ended (bash's `times`, its
# second line; run in this shell, not a subshell, whose counts would start from zero). A lane is
# a subshell: its steps count their own processes only.
CPU_DIR="$(mktemp -d)"
trap 'rm -rf "$CPU_DIR"' EXIT
# Sets CPU_NOW (call it plainly, never as $(children_cpu)).
children_cpu() {
    local file="$CPU_DIR/$BASHPID" # this shell's: $BASHPID inside $(...) is the subshell's
    times >"$file"
    CPU_NOW=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] }
        printf "%d", n }' "$file")
}

# run_step NAME DESCRIPTION COMMAND...: runs a step, records PASS/FAIL and its duration.
run_step() {
    local name="$1" description="$2" start rc cpu
    shift 2
    banner "$description"
    start=$SECONDS
    children_cpu
    cpu=$CPU_NOW
    # As an `if` condition: errexit stays off for the whole step, even where a step function sets
    # it again inside (python_tests, java_tests), so a failing step is recorded, never the end of
    # the script or of its lane.
    if "$@"; then rc=0; else rc=$?; fi
    children_cpu
    if [ "$rc" -eq 0 ]; then
        record "$name" PASS $((SECONDS - start)) $((CPU_NOW - cpu))
    else
        record "$name" FAIL $((SECONDS - start)) $((CPU_NOW - cpu)) "exit $rc"
        FAILED=1
        if [ "$FAIL_FAST" -eq 1 ]; then summary; fi
    fi
    return 0
}

skip() { record "$1" SKIP 0 0 "$2"; printf '\n%s==> skipped %s: %s%s\n' "$YELLOW" "$1" "$2" "$RESET"; }

summary() {
    printf '\n%s==== summary ====%s\n' "$BOLD" "$RESET"
    local line name status secs cpu note colour
    for line in "${RESULTS[@]}"; do
        IFS='|' read -r name status secs cpu note <<<"$line"
        case "$status" in PASS) colour=$GREEN ;; FAIL) colour=$RED ;; *) colour=$YELLOW ;; esac
        printf '  %-8s %s%-4s%s %5ss %6ss CPU  %s\n' "$name" "$colour" "$status" "$RESET" "$secs" "$cpu" "$note"
    done
    children_cpu
    printf '  %-8s      %5ss %6ss CPU  (on %s cores)\n' total "$SECONDS" "$CPU_NOW" "$(nproc)"
    if [ "$FAILED" -eq 0 ]; then
        printf '%sall steps passed%s\n' "$GREEN$BOLD" "$RESET"
        exit 0
    fi
    printf '%sSOME STEPS FAILED%s\n' "$RED$BOLD" "$RESET"
    exit 1
}

python_tests() {
    [ -x "$VENV/bin/python" ] || { echo "no $VENV: run scripts/install-deps.sh" >&2; return 1; }
    local rc
    set +e
    # shellcheck disable=SC2086 # PYTEST_ARGS is a list of words
    (cd clients/python && SHARDCAR_BIN="$SHARDCAR_BIN_PATH" CARGO_TARGET_DIR="$TARGET_DIR" \
        "$VENV/bin/python" -m pytest -q ${PYTEST_ARGS:-})
    rc=$?
    set -e
    if [ "$rc" -eq 5 ]; then
        echo "pytest collected no tests in clients/python: that is a failure, the client must be tested" >&2
    fi
    [ "$rc" -eq 0 ] || return "$rc"
    # The package as users get it: sdist and wheel, each installed into a fresh venv.
    clients/python/scripts/package_smoke.sh
}

# The sources keep their shape (#48): no non-test .rs file under src/ over 600 lines (split it by
# concept, a type and its helpers or one concern, before it grows), and no #[path] module, which
# hides a submodule as a flat file. Test files are exempt: tests.rs, *_tests.rs and anything
# under a tests/ directory. Each offending file is named.
sizes_check() {
    local limit=600 rc=0 file lines
    while IFS= read -r -d '' file; do
        case "$file" in */tests/*|*/tests.rs|*_tests.rs) continue ;; esac
        lines=$(wc -l <"$file")
        if [ "$lines" -gt "$limit" ]; then
            echo "$file: $lines lines, over $limit: split it by concept" >&2
            rc=1
        fi
    done < <(find src -name '*.rs' -print0 | sort -z)
    local found
    while IFS= read -r found; do
        echo "$found: a #[path] module; make it an ordinary submodule (foo.rs and foo/bar.rs)" >&2
        rc=1
    done < <(grep -rn --include='*.rs' '#\[path' src || true)
    [ "$rc" -eq 0 ] && echo "every non-test source under src/ is at most $limit lines; no #[path] module"
    return "$rc"
}

# The contract: `buf lint` (STANDARD, proto/buf.yaml), and no breaking change against the v1
# baseline image proto/v1-baseline.binpb (rebuild it with `buf build proto -o
# proto/v1-baseline.binpb` only when a break is intended, i.e. for a new major version).
proto_check() {
    local buf="$ROOT/.tools/node_modules/.bin/buf"
    [ -x "$buf" ] || { echo "no $buf: run scripts/install-deps.sh" >&2; return 1; }
    "$buf" lint proto && "$buf" breaking proto --against proto/v1-baseline.binpb
}

# The committed Python stubs must be what the proto generates: regenerate them with the pinned
# grpcio-tools (its own venv, made once) and fail on any difference.
stubs_check() {
    local venv="$ROOT/.venv-stubs"
    if [ ! -x "$venv/bin/python" ] ||
        ! "$venv/bin/python" -c 'import importlib.metadata as m; assert m.version("grpcio-tools") == "1.62.3"' 2>/dev/null; then
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "grpcio-tools==1.62.3"
    fi
    clients/python/scripts/gen_stubs.sh "$venv/bin/python" >/dev/null
    # Changed files and new ones alike (git diff alone does not see untracked files).
    local changed
    changed="$(git status --porcelain --untracked-files=all -- clients/python/src/shardcar/_proto)"
    if [ -n "$changed" ]; then
        printf '%s\n' "$changed" >&2
        echo "the committed Python stubs differ from what proto/ generates:" \
            "run clients/python/scripts/gen_stubs.sh and commit the result" >&2
        return 1
    fi
}

# The fault soak's short profile: fixed seeds, so that a red run replays the same schedule
# (scripts/nemesis.sh --seed S); every seed must end with 0 violations.
nemesis_soak() {
    local seed rc=0
    for seed in ${NEMESIS_SEEDS:-1 2}; do
        scripts/nemesis.sh --seed "$seed" --duration "${NEMESIS_DURATION:-60s}" ||
            rc=1
    done
    return "$rc"
}

java_tests() {
    local rc
    rm -rf clients/java/*/target/surefire-reports
    set +e
    # `verify`, not `install`: the jars step puts the jars the interop suite uses into the local
    # Maven repository, and an interop JVM may be reading them while this runs in another lane.
    # shellcheck disable=SC2086 # MVN_ARGS is a list of words
    (cd clients/java && SHARDCAR_BIN="$SHARDCAR_BIN_PATH" mvn -B -q ${MVN_ARGS:-} verify)
    rc=$?
    set -e
    # `-q` hides Surefire's totals: add them up from its reports (one line per test class).
    cat clients/java/*/target/surefire-reports/*.txt 2>/dev/null | awk -F'[:,]' '
        /^Tests run:/ { run += $2; failed += $4 + $6; skipped += $8 }
        END { printf "java: %d passed, %d failed, %d skipped\n", run - failed - skipped, failed, skipped }'
    return "$rc"
}

rust_step() {
    # Not --all-targets: that would also run the benchmark programs (benches/, harness = false).
    # shellcheck disable=SC2086 # CARGO_TEST_ARGS is a list of words
    run_step rust "cargo test (lib, bins, tests, examples)" cargo test --lib --bins --tests --examples ${CARGO_TEST_ARGS:-}
}
python_step() {
    if [ -d clients/python ]; then
        run_step python "Python client: pytest (clients/python)" python_tests
    else
        skip python "no clients/python"
    fi
}
# The Java client's jars into the local Maven repository, where the interop suite takes them
# (tests/interop/run.sh builds them itself when they are missing or stale; done here as a step of
# its own, so that the java step, in another lane, never compiles into clients/java/*/target at
# the same time).
java_jars() {
    # shellcheck disable=SC2086 # MVN_ARGS is a list of words
    (cd clients/java && mvn -B -q ${MVN_ARGS:-} install -DskipTests -Dmaven.javadoc.skip=true -Dmaven.source.skip=true)
}
jars_step() {
    if [ -d clients/java ]; then
        run_step jars "Java client's jars into the local Maven repository (mvn install -DskipTests)" java_jars
    else
        skip jars "no clients/java"
    fi
    [ -z "${LANES:-}" ] || : >"$LANES/jars.done"
}
java_step() {
    # In lanes, the jars step (lane c) compiles into the same directories: wait for it to end.
    if [ -n "${LANES:-}" ] && want jars; then
        while [ ! -e "$LANES/jars.done" ]; do sleep 1; done
    fi
    if [ -d clients/java ]; then
        run_step java "Java client: mvn verify (clients/java)" java_tests
    else
        skip java "no clients/java"
    fi
}
interop_step() {
    # In its lane, started before the clippy step: wait for the binary (that step's end).
    if [ -n "${LANES:-}" ]; then
        while [ ! -e "$LANES/build.done" ]; do sleep 1; done
    fi
    run_step interop "ElasticJob mixed cluster: ElasticJob 3.0.4 JVMs and sidecars on one ZooKeeper (tests/interop/run.sh)" \
        env SHARDCAR_BIN="$SHARDCAR_BIN_PATH" tests/interop/run.sh
}
nemesis_step() {
    run_step nemesis "nemesis fault soak, seeds ${NEMESIS_SEEDS:-1 2} × ${NEMESIS_DURATION:-60s} (scripts/nemesis.sh)" nemesis_soak
}

# run_lane NAME STEP...: the wanted ones of STEP..., one after the other, in the background; each
# line of their output behind "[NAME] ", their results in $LANES/NAME.results.
run_lane() {
    local lane="$1" step
    shift
    (
        RESULTS=()
        FAIL_FAST=0
        for step in "$@"; do
            if want "$step"; then "${step}_step"; fi
        done
        printf '%s\n' "${RESULTS[@]}" >"$LANES/$lane.results"
    ) > >(while IFS= read -r line || [ -n "$line" ]; do printf '[%s] %s\n' "$lane" "$line"; done) 2>&1 &
    LANE_PIDS+=("$!")
}

if want deps; then
    run_step deps "installing dependencies (scripts/install-deps.sh)" scripts/install-deps.sh
fi
if want fmt; then
    run_step fmt "cargo fmt --check" cargo fmt --all -- --check
fi
if want sizes; then
    run_step sizes "source sizes: no non-test .rs file under src/ over 600 lines, no #[path]" sizes_check
fi
if want proto; then
    run_step proto "buf lint and buf breaking against the v1 baseline (proto/)" proto_check
fi
if want stubs; then
    if [ -d clients/python ]; then
        run_step stubs "Python stubs regenerated and compared (clients/python/scripts/gen_stubs.sh)" stubs_check
    else
        skip stubs "no clients/python"
    fi
fi
# Every cargo command below compiles this crate's targets with clippy-driver, the compiler that
# `cargo clippy` uses, with -D warnings (cargo runs RUSTC_WORKSPACE_WRAPPER for the workspace's
# own units only, and passes CLIPPY_ARGS to it): the clippy step's build is the build the tests
# run, the dependencies are compiled once, and the later steps find every unit fresh. A plain
# `cargo test` by hand compiles this crate again (the wrapper is part of its fingerprint), not
# the dependencies.
if command -v clippy-driver >/dev/null; then
    export RUSTC_WORKSPACE_WRAPPER=clippy-driver
    export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
fi
# On a fresh clone (no target/debug yet: CI) there is nothing for incremental compilation to
# reuse, and writing its state costs this crate's build about 14 % (134 s against 156 s for every
# target on 2 cores); a later run with the state on builds this crate once more, then
# incrementally. CARGO_INCREMENTAL set by the caller wins.
if [ ! -d "$TARGET_DIR/debug" ] && [ -z "${CARGO_INCREMENTAL:-}" ]; then
    export CARGO_INCREMENTAL=0
fi
# The lanes (below): lane c starts here, before the clippy step, since the jars step needs no
# Rust build (its Maven build overlaps the Rust one); its interop step waits for the binary.
# Not with --fail-fast, which may end the script at any step.
LANE_PIDS=()
# Makes the lanes' directory and starts lane c (jars, then interop).
start_lane_c() {
    LANES="$(mktemp -d)"
    trap 'rm -rf "$LANES" "$CPU_DIR"' EXIT
    run_lane c jars interop
}
if [ "${SHARDCAR_TEST_LANES:-3}" != 1 ] && [ "$FAIL_FAST" -eq 0 ]; then
    start_lane_c
fi
lint_build() {
    [ -n "${RUSTC_WORKSPACE_WRAPPER:-}" ] ||
        { echo "no clippy-driver on PATH: rustup component add clippy (or scripts/install-deps.sh)" >&2; return 1; }
    # Every target as `cargo clippy --all-targets` lints it: the library and the binary, their
    # unit tests, the integration tests, the benchmarks (built and linked in the test profile:
    # their figures come from `cargo bench`, docs/benchmarks.md) and the examples' unit tests;
    # then the examples as programs (scripts/nemesis.sh runs target/debug/examples/nemesis).
    cargo test --no-run --all-targets && cargo build --examples
}
if want clippy; then
    run_step clippy "clippy's lints (-D warnings) on one debug build of every target (cargo test --no-run --all-targets, cargo build --examples)" \
        lint_build
elif want rust || want python || want java || want interop || want nemesis || want package; then
    # The binary the later steps use, target/debug/shardcar, never stale: with the tests' own
    # build when they run (a build of the binary alone has other features: it would compile most
    # of the tree again for them), else alone.
    if want rust; then
        run_step build "cargo test --no-run (lib, bins, tests, examples)" \
            cargo test --no-run --lib --bins --tests --examples
    else
        run_step build "cargo build --bin shardcar (for the client tests)" cargo build --bin shardcar
    fi
fi
if want package; then
    # The binary the step before built, as it is (a build of the binary alone would compile most
    # of the tree again, for the features the tests' dev-dependencies do not turn on).
    if [ "$(id -u)" -eq 0 ]; then
        run_step package "Debian package: dpkg -i, check, remove (scripts/package.sh --dev --no-build --check)" \
            scripts/package.sh --dev --no-build --check
    else
        run_step package "Debian package: made only (not root: no dpkg -i) (scripts/package.sh --dev --no-build)" \
            scripts/package.sh --dev --no-build
    fi
fi
# The test suites mostly wait (on cron instants, leases, JVMs starting): one after the other they
# leave most of the two cores idle. With SHARDCAR_TEST_LANES=3 (the default) they run as three
# lanes side by side: a: rust then java; b: python then nemesis; c: jars then interop, started
# before the clippy step (the interop suite uses the jars and waits for the binary; the java
# step waits for the jars). Every suite uses free ports and its own ZooKeeper.
# SHARDCAR_TEST_LANES=1 runs them one after the other, output unprefixed.
if [ "${SHARDCAR_TEST_LANES:-3}" = 1 ]; then
    for step in rust python jars java interop nemesis; do
        if want "$step"; then "${step}_step"; fi
    done
else
    [ -n "${LANES:-}" ] || start_lane_c
    : >"$LANES/build.done"
    run_lane a rust java
    run_lane b python nemesis
    for pid in "${LANE_PIDS[@]}"; do wait "$pid" || true; done
    wait # the output filters
    for lane in a b c; do
        if [ ! -f "$LANES/$lane.results" ]; then
            record "lane-$lane" FAIL 0 0 "the lane ended without its results"
            FAILED=1
            continue
        fi
        while IFS= read -r line; do
            [ -n "$line" ] || continue
            RESULTS+=("$line")
            case "$line" in *"|FAIL|"*) FAILED=1 ;; esac
        done <"$LANES/$lane.results"
    done
fi
summary
