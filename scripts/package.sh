#!/usr/bin/env bash
# Builds the Debian package (cargo-deb): the binary, a systemd unit running it as the
# `shardcar` system user, and /etc/shardcar/shardcar.toml with every setting commented out.
#
# Usage: scripts/package.sh [--dev [--no-build]] [--check]
#   --dev    package the debug build (quick; what CI checks), not an optimised release build
#   --no-build  with --dev: package target/debug/shardcar as it is, without `cargo build --bin
#            shardcar` first (scripts/test.sh: its clippy step has just built it along with the
#            tests, which turn on the dev-dependencies' features, so a build of the binary alone
#            would compile most of the tree again)
#   --check  then install the package with dpkg -i, run `shardcar --version` and
#            `shardcar config` from it, verify the unit with systemd-analyze where that exists,
#            and remove the package again (purge); needs root
#
# Prints the path of the .deb (under target/debian/). cargo-deb comes from
# scripts/install-deps.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
die() { printf 'package.sh: %s\n' "$*" >&2; exit 1; }

dev=0
check=0
build=1
for arg in "$@"; do
    case "$arg" in
        --dev) dev=1 ;;
        --check) check=1 ;;
        --no-build) build=0 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) printf 'package.sh: unknown argument %s (try --help)\n' "$arg" >&2; exit 64 ;;
    esac
done

command -v cargo-deb >/dev/null || die "cargo-deb is not installed: run scripts/install-deps.sh (or cargo install cargo-deb --locked --no-default-features)"

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT_DIR="$TARGET_DIR/debian"
mkdir -p "$OUT_DIR"
[ "$build" -eq 1 ] || [ "$dev" -eq 1 ] || die "--no-build packages the debug build: use it with --dev"
if [ "$dev" -eq 1 ]; then
    if [ "$build" -eq 1 ]; then
        cargo build -q --bin shardcar
    else
        [ -x "$TARGET_DIR/debug/shardcar" ] ||
            die "--no-build: there is no $TARGET_DIR/debug/shardcar (build it, or drop --no-build)"
    fi
    args=(--no-build --profile dev --fast)
else
    args=()
fi
# cargo deb prints the package's path last; everything it said is shown if it fails.
if ! out="$(cargo deb "${args[@]}" --output "$OUT_DIR" 2>&1)"; then
    printf '%s\n' "$out" >&2
    die "cargo deb failed (see above)"
fi
deb="$(printf '%s\n' "$out" | tail -1)"
[ -f "$deb" ] || die "cargo deb did not make a package: $out"
echo "$deb"

[ "$check" -eq 1 ] || exit 0
[ "$(id -u)" -eq 0 ] || die "--check installs the package: run it as root"
if dpkg -s shardcar >/dev/null 2>&1; then
    die "a shardcar package is installed already; --check would replace it (dpkg -P shardcar first)"
fi
cleanup() { dpkg -P shardcar >/dev/null 2>&1 || true; }
trap cleanup EXIT
dpkg -i "$deb" >/dev/null
version="$(/usr/bin/shardcar --version)"
[ "$version" = "shardcar $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)" ] ||
    die "the installed binary reports '$version'"
cmp -s /etc/shardcar/shardcar.toml <(/usr/bin/shardcar config) ||
    die "/etc/shardcar/shardcar.toml is not what 'shardcar config' prints"
getent passwd shardcar >/dev/null || die "the package did not create the shardcar user"
[ -f /lib/systemd/system/shardcar.service ] || die "the systemd unit is missing"
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify /lib/systemd/system/shardcar.service ||
        die "systemd-analyze verify rejects the unit"
    unit="verified by systemd-analyze"
else
    unit="not verified (no systemd-analyze on this machine)"
fi
dpkg -P shardcar >/dev/null
[ ! -e /usr/bin/shardcar ] || die "dpkg -P left /usr/bin/shardcar behind"
trap - EXIT
echo "package check: installed, '$version', settings file and user in place, unit $unit; removed"
