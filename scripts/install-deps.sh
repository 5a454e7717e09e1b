#!/usr/bin/env bash
# Installs what shardcar's tests and demo need on Debian/Ubuntu (bookworm tested):
# ZooKeeper's jars (package `zookeeper`, which brings a Java runtime), PostgreSQL (package
# `postgresql`: the tests start their own servers from its binaries), procps, Chromium and its
# chromedriver (the web console's browser tests, tests/console.rs), buf (into .tools/,
# from npm), cargo-deb (for scripts/package.sh), and — when the client directories exist — the
# Python venv (.venv, with aiosmtpd for the error handlers' tests) and the Java build tools.
#
# --demo installs only what scripts/demo.sh needs: a C compiler (gcc, libc6-dev: the build's
# C code and its link) and ca-certificates (cargo's and pip's downloads) when missing, and the
# Python client in .venv, without its test extras (not with --no-python). Nothing else: no
# ZooKeeper, Java, PostgreSQL, browser, buf or cargo-deb.
#
# Idempotent: `apt-get update` runs only when a package is missing, the venv is refreshed only
# when clients/python/pyproject.toml changed. Runs as root, or through sudo when available.
# The Rust toolchain (cargo, rustfmt, clippy) is expected to be installed already (rustup).
#
# Usage: scripts/install-deps.sh [--demo] [--no-python] [--no-java] [--no-package]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WITH_PYTHON=1
WITH_JAVA=1
WITH_PACKAGE=1
DEMO=0
for arg in "$@"; do
    case "$arg" in
        --demo) DEMO=1 ;;
        --no-python) WITH_PYTHON=0 ;;
        --no-java) WITH_JAVA=0 ;;
        --no-package) WITH_PACKAGE=0 ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install-deps.sh: unknown argument: $arg" >&2; exit 64 ;;
    esac
done

log() { printf '[install-deps] %s\n' "$*"; }
die() { printf '[install-deps] error: %s\n' "$*" >&2; exit 1; }

# Root or sudo, decided once.
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    fi
fi

package_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# quietly CMD...: runs CMD with its output held back, and shows that output only if it fails
# (apt and debconf chatter on stderr even when they succeed).
quietly() {
    local out
    if ! out="$("$@" 2>&1)"; then
        printf '%s\n' "$out" >&2
        die "failed: $*"
    fi
}

APT_UPDATED=0
# apt_install PKG...: installs the packages that are missing; `apt-get update` once, only if needed.
apt_install() {
    local missing=() pkg
    for pkg in "$@"; do
        package_installed "$pkg" || missing+=("$pkg")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 ||
        die "missing packages (${missing[*]}) and no apt-get here: install them by hand"
    if [ "$(id -u)" -ne 0 ] && [ "${#SUDO[@]}" -eq 0 ]; then
        die "missing packages (${missing[*]}): run as root or install sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    if [ "$APT_UPDATED" -eq 0 ]; then
        log "apt-get update"
        quietly "${SUDO[@]}" apt-get update -qq
        APT_UPDATED=1
    fi
    log "apt-get install ${missing[*]}"
    quietly "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

install_system_deps() {
    if command -v dpkg-query >/dev/null 2>&1; then
        # zookeeper: /usr/share/java/zookeeper.jar and its dependencies (and a JRE);
        # postgresql: initdb and postgres under /usr/lib/postgresql/*/bin (the tracing_db tests);
        # procps: ps/pgrep used when debugging; ca-certificates: crates, pip and Maven downloads.
        apt_install zookeeper postgresql procps ca-certificates
        # chromium, chromium-driver: the headless browser of tests/console.rs and its WebDriver
        # server; fonts-dejavu-core: legible pages in its screenshots.
        apt_install chromium chromium-driver fonts-dejavu-core
    fi
    command -v chromedriver >/dev/null 2>&1 ||
        die "chromedriver not found: install Debian's 'chromium-driver' package"
    [ -r /usr/share/java/zookeeper.jar ] ||
        die "/usr/share/java/zookeeper.jar not found: install Debian's 'zookeeper' package"
    [ -n "${SHARDCAR_TEST_PG_BIN:-}" ] || compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null ||
        die "no /usr/lib/postgresql/*/bin/postgres: install Debian's 'postgresql' package"
    command -v java >/dev/null 2>&1 || die "no java on PATH (it comes with the 'zookeeper' package)"
}

install_rust_components() {
    command -v cargo >/dev/null 2>&1 ||
        die "cargo not found: install Rust (https://rustup.rs), 1.88 or newer"
    local component
    for component in rustfmt clippy; do
        if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
            command -v rustup >/dev/null 2>&1 || die "cargo $component is missing and there is no rustup"
            log "rustup component add $component"
            rustup component add "$component"
        fi
    done
}

# Hook for the Python client: a venv in .venv with clients/python installed editable, with its
# test extras. Does nothing without clients/python.
install_python_deps() {
    local project="$ROOT/clients/python" venv="$ROOT/.venv"
    [ -d "$project" ] || return 0
    install_python
    local stamp="$venv/.shardcar-deps"
    if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] &&
        [ "$stamp" -nt "$project/pyproject.toml" ]; then
        install_smtp_sink
        return 0
    fi
    if [ ! -x "$venv/bin/python" ]; then
        log "python3 -m venv .venv"
        python3 -m venv "$venv"
    fi
    log "pip install -e clients/python[test]"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "${project}[test]"
    touch "$stamp"
    install_smtp_sink
}

# python3 with venv and ensurepip (Debian splits them off), 3.9 or newer.
install_python() {
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
        apt_install python3 python3-venv python3-pip
    fi
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' ||
        die "python3 is $(python3 -V 2>&1); the Python client needs 3.9 or newer"
}

# The demo's share of the above: clients/python installed editable into .venv, without the test
# extras. Skipped when the client imports and neither stamp is older than its pyproject.toml.
install_python_client() {
    local project="$ROOT/clients/python" venv="$ROOT/.venv" stamp
    [ -d "$project" ] || die "no clients/python in $ROOT: the demo's worker needs the Python client"
    install_python
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import shardcar' >/dev/null 2>&1; then
        for stamp in "$venv/.shardcar-deps" "$venv/.shardcar-client"; do
            [ -f "$stamp" ] && [ "$stamp" -nt "$project/pyproject.toml" ] && return 0
        done
    fi
    if [ ! -x "$venv/bin/python" ]; then
        log "python3 -m venv .venv"
        python3 -m venv "$venv"
    fi
    log "pip install -e clients/python (into .venv)"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$project"
    touch "$venv/.shardcar-client"
}

# What the demo's build needs besides cargo: a C compiler and the C library's headers and start
# files (crates with C code, ring's among them, and the link), and the CA certificates that
# cargo's downloads check.
install_demo_system_deps() {
    if command -v dpkg-query >/dev/null 2>&1; then
        apt_install ca-certificates
        command -v cc >/dev/null 2>&1 || apt_install gcc libc6-dev
    fi
    command -v cc >/dev/null 2>&1 || die "no C compiler (cc): install Debian's 'gcc' package"
    command -v cargo >/dev/null 2>&1 ||
        die "cargo not found: install Rust (https://rustup.rs), 1.88 or newer"
}

# aiosmtpd, pinned, into the same venv: the SMTP server that the EMAIL error handler's tests
# (tests/ops/alerts.rs) start and send mail to. Skipped when that version is there.
AIOSMTPD_VERSION=1.4.6
install_smtp_sink() {
    local python="$ROOT/.venv/bin/python"
    "$python" -c "import importlib.metadata as m, sys
sys.exit(m.version('aiosmtpd') != '$AIOSMTPD_VERSION')" 2>/dev/null && return 0
    log "pip install aiosmtpd==$AIOSMTPD_VERSION (into .venv)"
    "$python" -m pip install -q --disable-pip-version-check "aiosmtpd==$AIOSMTPD_VERSION"
}

# buf (proto lint and breaking-change check) from npm's @bufbuild/buf, which ships the binary,
# pinned, into .tools/ (not committed). Skipped when that version is already there.
BUF_VERSION=1.47.2
install_buf() {
    local tools="$ROOT/.tools" have=""
    [ -x "$tools/node_modules/.bin/buf" ] && have="$("$tools/node_modules/.bin/buf" --version 2>/dev/null || true)"
    [ "$have" = "$BUF_VERSION" ] && return 0
    command -v npm >/dev/null 2>&1 || apt_install nodejs npm
    log "npm install @bufbuild/buf@$BUF_VERSION (into .tools/)"
    mkdir -p "$tools"
    npm install --silent --no-audit --no-fund --prefix "$tools" "@bufbuild/buf@$BUF_VERSION" >/dev/null
}

# cargo-deb (the Debian package, scripts/package.sh), pinned; built from crates.io (about 2.5
# minutes on 2 cores) unless that version is installed. Needs dpkg, which Debian has.
CARGO_DEB_VERSION=3.8.0
install_cargo_deb() {
    local have=""
    command -v cargo-deb >/dev/null 2>&1 && have="$(cargo-deb --version 2>/dev/null || true)"
    case "$have" in *" $CARGO_DEB_VERSION"*|"$CARGO_DEB_VERSION") return 0 ;; esac
    log "cargo install cargo-deb $CARGO_DEB_VERSION"
    cargo install --quiet --locked --no-default-features --version "$CARGO_DEB_VERSION" cargo-deb
}

# Hook for the Java client: a JDK (javac) and Maven. Does nothing without clients/java.
install_java_deps() {
    [ -d "$ROOT/clients/java" ] || return 0
    command -v javac >/dev/null 2>&1 || apt_install default-jdk-headless
    command -v mvn >/dev/null 2>&1 || apt_install maven
}

if [ "$DEMO" -eq 1 ]; then
    install_demo_system_deps
    if [ "$WITH_PYTHON" -eq 1 ]; then install_python_client; fi
    log "ok (the demo's share: cargo, a C compiler$([ "$WITH_PYTHON" -eq 1 ] && echo ', the Python client in .venv'))"
    exit 0
fi
install_system_deps
install_rust_components
install_buf
if [ "$WITH_PACKAGE" -eq 1 ]; then install_cargo_deb; fi
if [ "$WITH_PYTHON" -eq 1 ]; then install_python_deps; fi
if [ "$WITH_JAVA" -eq 1 ]; then install_java_deps; fi
log "ok"
