#!/usr/bin/env bash
# The mixed-cluster interop suite (tests/interop/README.md): real ElasticJob-Lite 3.0.4 JVMs and
# real shardcar sidecars with Java-client workers on one real ZooKeeper.
#
# Usage: tests/interop/run.sh [MAVEN ARGS...]     e.g. -Dtest=CtlTest
# Builds what it needs, idempotently: the Java client (clients/java) into the local Maven repository
# when it is missing or older than its sources, and this Maven project. Never builds the sidecar.
# Environment: SHARDCAR_BIN (default: ${CARGO_TARGET_DIR:-<repo>/target}/debug/shardcar),
# MVN_ARGS (more Maven arguments). Needs Java 17, Maven and Debian's zookeeper package
# (scripts/install-deps.sh). Ends with "interop: N passed, N failed, N skipped"; exit 0 only when
# every test passed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
SHARDCAR_BIN="${SHARDCAR_BIN:-$TARGET_DIR/debug/shardcar}"
case "$SHARDCAR_BIN" in /*) ;; *) SHARDCAR_BIN="$PWD/$SHARDCAR_BIN" ;; esac
export SHARDCAR_BIN

die() { printf 'interop: %s\n' "$*" >&2; exit 1; }
[ -x "$SHARDCAR_BIN" ] || die "no sidecar binary at $SHARDCAR_BIN (cargo build --bin shardcar, or set SHARDCAR_BIN)"
command -v java >/dev/null || die "no java (Java 17): scripts/install-deps.sh"
command -v mvn >/dev/null || die "no mvn: scripts/install-deps.sh"
[ -f /usr/share/java/zookeeper.jar ] || die "ZooKeeper is not installed (apt-get install zookeeper): scripts/install-deps.sh"

MVN=(mvn -B -ntp -Dstyle.color=never)
# shellcheck disable=SC2206 # MVN_ARGS is a list of words
[ -n "${MVN_ARGS:-}" ] && MVN+=(${MVN_ARGS})

# The Java client the shardcar workers use, into the local repository when missing or stale.
REPO_DIR="${MAVEN_LOCAL_REPO:-$HOME/.m2/repository}"
CLIENT_JAR="$REPO_DIR/io/shardcar/shardcar-client/0.1.0-SNAPSHOT/shardcar-client-0.1.0-SNAPSHOT.jar"
stale_client() {
    [ -f "$CLIENT_JAR" ] || return 0
    [ -n "$(find "$ROOT/clients/java" "$ROOT/proto" -type f \( -name '*.java' -o -name pom.xml -o -name '*.proto' \) \
        -not -path '*/target/*' -newer "$CLIENT_JAR" -print -quit)" ]
}
if stale_client; then
    echo "interop: installing the Java client (clients/java) into $REPO_DIR"
    "${MVN[@]}" -q -f "$ROOT/clients/java/pom.xml" install -DskipTests -Dmaven.javadoc.skip=true -Dmaven.source.skip=true ||
        die "cannot build and install the Java client (clients/java): see the output above"
fi

# Which ElasticJob versions can be proven here: 3.0.4 (the suite's), and 3.0.5 only if Maven Central
# serves it (it renamed the artifact to elasticjob-bootstrap and the packages; README.md, "Versions").
if "${MVN[@]}" -q dependency:get -Dartifact=org.apache.shardingsphere.elasticjob:elasticjob-bootstrap:3.0.5:pom \
    -Dtransitive=false >/dev/null 2>&1; then
    echo "interop: NOTE ElasticJob 3.0.5 (elasticjob-bootstrap) now resolves: port the members to it (README.md, Versions)"
else
    echo "interop: ElasticJob 3.0.5 does not resolve from Maven Central: the suite proves 3.0.4 only"
fi

cd "$HERE"
rm -rf target/surefire-reports target/interop-logs
set +e
"${MVN[@]}" "-Dshardcar.bin=$SHARDCAR_BIN" test "$@"
rc=$?
set -e
# Surefire's totals, one plain line (its reports: one per test class).
echo
cat target/surefire-reports/*.txt 2>/dev/null | awk -F'[:,]' '
    /^Tests run:/ { run += $2; failed += $4 + $6; skipped += $8 }
    END { printf "interop: %d passed, %d failed, %d skipped\n", run - failed - skipped, failed, skipped }'
echo "interop: logs, member records and namespace dumps in $HERE/target/interop-logs/"
# Each failure once more, last and short, so that a log cut to its tail still says which
# assertion failed and what the job's nodes were: the message's first line, the ZooKeeper dump
# it carries (a failed wait prints one) and its last records.
if [ "$rc" -ne 0 ] && command -v python3 >/dev/null; then
    python3 - target/surefire-reports/TEST-*.xml <<'EOF' || true
import sys
import xml.etree.ElementTree as ET

for report in sys.argv[1:]:
    for case in ET.parse(report).getroot().iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            text = bad.get("message") or bad.text or ""
            lines = text.splitlines() or ["(no message)"]
            print(f"interop: FAILED {case.get('classname', '').rsplit('.', 1)[-1]}.{case.get('name')}: {lines[0]}")
            if "--- latest records ---" in lines:
                cut = lines.index("--- latest records ---")
                for line in lines[1:cut][:80] + lines[cut:cut + 1] + lines[cut + 1:][-12:]:
                    print(f"interop:   {line}")
EOF
fi
exit "$rc"
