#!/usr/bin/env bash
# Packaging smoke test of the Python client: builds an sdist and a wheel with `python -m build`,
# installs each into a fresh venv and checks that the installed package works without a sidecar:
# it imports, builds a JobConfig, its committed stubs import (SubscribeRequest has
# instance_suffix and max_concurrent_executions), the rich error details decode, and py.typed and the .pyi ship; the base
# install has no opentelemetry, and the wheel with the otel extra has it and traces. Last, it
# installs the checkout itself, as the README says (`pip install clients/python`), and checks that
# the install left nothing behind in the checkout: no build/, dist/ or *.egg-info, no new
# untracked file (pip builds a local directory in place).
#
# Usage: clients/python/scripts/package_smoke.sh
#   PYTHON=python3.9 clients/python/scripts/package_smoke.sh     # another interpreter
#   PIP_CONSTRAINT=old.txt clients/python/scripts/package_smoke.sh  # e.g. protobuf==4.25.*
#
# Needs PyPI (build, virtualenv, flit_core, the package's dependencies) and pip 22.3 or later in
# the interpreter: each venv is made without pip of its own (seeding one costs about 9 s of CPU)
# and filled by the interpreter's pip through --python. Everything happens in a temporary
# directory, removed on exit: the package is copied there first, so the work tree gets no
# build/, dist/ or egg-info, and every run starts from nothing (idempotent).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pkg_root="$(cd "$here/.." && pwd)"
python="${PYTHON:-python3}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/shardcar-pkg-smoke.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

step() { printf '\n== %s\n' "$*"; }

# A fresh venv without pip, and the interpreter's pip to install into it.
fresh_venv() { "$python" -m venv --without-pip "$1"; }
pip_into() {  # pip_into VENV ARG...
  local venv="$1"
  shift
  "$python" -m pip --python "$venv/bin/python" install --quiet --disable-pip-version-check "$@"
}
if ! "$python" -m pip --python "$(command -v "$python")" --version >/dev/null 2>&1; then
  echo "package_smoke.sh: $python has no pip that takes --python (pip 22.3 or later):" \
    "$python -m pip install -U pip" >&2
  exit 1
fi

step "copy the package ($pkg_root)"
mkdir -p "$tmp/src"
tar -C "$pkg_root" \
  --exclude='__pycache__' --exclude='*.pyc' --exclude='*.egg-info' \
  --exclude='./build' --exclude='./dist' --exclude='.pytest_cache' \
  -cf - . | tar -C "$tmp/src" -xf -

step "build the sdist and the wheel ($("$python" -V 2>&1))"
fresh_venv "$tmp/build-venv"
# With virtualenv installed, build makes its isolated environments with it (a seeded pip: 10 s
# for both builds here, against 25 s with venv).
pip_into "$tmp/build-venv" build virtualenv
# Without --sdist/--wheel, build makes the sdist and then the wheel *from the sdist*: a file
# missing from the sdist fails here.
"$tmp/build-venv/bin/python" -m build --outdir "$tmp/dist" "$tmp/src" >"$tmp/build.log" 2>&1 \
  || { cat "$tmp/build.log"; exit 1; }
sdists=("$tmp"/dist/shardcar-*.tar.gz)
wheels=("$tmp"/dist/shardcar-*-py3-none-any.whl)
[[ ${#sdists[@]} -eq 1 && -f "${sdists[0]}" ]] || { echo "no single sdist in $tmp/dist" >&2; exit 1; }
[[ ${#wheels[@]} -eq 1 && -f "${wheels[0]}" ]] || { echo "no single pure wheel in $tmp/dist" >&2; exit 1; }
ls -l "$tmp/dist" | sed 1d

# The check every install must pass; run outside the source tree so only the installed
# package can be imported.
cat >"$tmp/smoke.py" <<'PY'
import importlib.metadata as md
import os
import sys
from pathlib import Path

import grpc
from google.rpc import error_details_pb2, status_pb2

import shardcar
import shardcar.aio
from shardcar import JobConfig, ShardingStrategy
from shardcar._proto import shardcar_pb2, shardcar_pb2_grpc
from shardcar.errors import from_rpc_error

# opentelemetry (the otel extra) is imported when a worker is created, never by the import.
assert not any(m.startswith("opentelemetry") for m in sys.modules), "shardcar imported opentelemetry"

where = Path(shardcar.__file__).resolve()
assert Path(sys.prefix).resolve() in where.parents, f"imported from {where}, not the venv"
pkg = where.parent
for shipped in ("py.typed", "_proto/shardcar_pb2.pyi"):
    assert (pkg / shipped).is_file(), f"{shipped} is not installed"

cfg = JobConfig(job_name="orders", cron="0/5 * * * * ?", sharding_total_count=4,
                sharding_item_parameters={0: "north"}, sharding_strategy="ROUND_ROBIN")
msg = cfg.to_proto()
assert isinstance(msg, shardcar_pb2.JobConfig)
assert msg.sharding_strategy == shardcar_pb2.SHARDING_STRATEGY_ROUND_ROBIN
assert JobConfig.from_proto(msg) == cfg
assert cfg.sharding_strategy is ShardingStrategy.ROUND_ROBIN

req = shardcar_pb2.SubscribeRequest(job_name="orders", pid=os.getpid(), instance_suffix="1-0a1b2c3d",
                                    max_concurrent_executions=4)
back = shardcar_pb2.SubscribeRequest.FromString(req.SerializeToString())
assert back.instance_suffix == "1-0a1b2c3d" and back.max_concurrent_executions == 4
assert hasattr(shardcar_pb2_grpc, "WorkerServiceStub") and hasattr(shardcar_pb2_grpc, "AdminServiceStub")

worker = shardcar.Worker("127.0.0.1:1",
                         options=shardcar.WorkerOptions(instance_suffix=shardcar.InstanceSuffix.ALWAYS))
assert worker.instance_suffix.startswith(f"{os.getpid()}-")
worker.close()


class Err(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.INVALID_ARGUMENT

    def details(self):
        return "bad cron"

    def trailing_metadata(self):
        status = status_pb2.Status(code=3, message="bad cron")
        status.details.add().Pack(error_details_pb2.ErrorInfo(reason="INVALID_ARGUMENT",
                                                              domain="shardcar.v1"))
        status.details.add().Pack(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field="config.cron")]))
        return (("grpc-status-details-bin", status.SerializeToString()),)


err = from_rpc_error(Err(), target="t", during="subscribe")
assert isinstance(err, shardcar.InvalidJobConfigError), err
assert (err.reason, err.field, err.request_field) == ("INVALID_ARGUMENT", "cron", "config.cron")

# The otel extra: opentelemetry only when it was asked for, and then the workers trace.
import importlib.util
want_otel = os.environ.get("SMOKE_OTEL") == "1"
assert (importlib.util.find_spec("opentelemetry") is not None) == want_otel, "opentelemetry"
worker = shardcar.Worker("127.0.0.1:1")
assert (worker._item_tracer is not None) == want_otel
worker.close()

versions = {d: md.version(d) for d in
            ("shardcar", "grpcio", "protobuf", "grpcio-status", "googleapis-common-protos")}
print("smoke ok:", sys.version.split()[0], " ".join(f"{k}={v}" for k, v in versions.items()))
PY

smoke() {  # smoke NAME ARTIFACT [SMOKE_OTEL]
  local venv="$tmp/venv-$1"
  step "install the $1 into a fresh venv and run the smoke test"
  fresh_venv "$venv"
  pip_into "$venv" "$2"
  (cd "$tmp" && SMOKE_OTEL="${3:-0}" "$venv/bin/python" "$tmp/smoke.py")
}

smoke wheel "${wheels[0]}"
smoke sdist "${sdists[0]}"
smoke wheel-otel "${wheels[0]}[otel]" 1

# What the checkout holds that git does not track (ignored files included: build/ and
# *.egg-info are ignored by most .gitignore files, and would hide there).
leftovers() {
  if git -C "$pkg_root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$pkg_root" status --porcelain --ignored --untracked-files=all -- . \
      | grep -v -e '__pycache__/' -e '\.pyc$' -e '\.pytest_cache/' || true
  fi
  find "$pkg_root" -maxdepth 3 \( -name build -o -name dist -o -name '*.egg-info' \) -print \
    | sed "s|^$pkg_root/|found |"
}
step "install the checkout itself ($pkg_root) and check that it leaves nothing behind"
before="$(leftovers)"
fresh_venv "$tmp/venv-checkout"
pip_into "$tmp/venv-checkout" "$pkg_root"
(cd "$tmp" && "$tmp/venv-checkout/bin/python" "$tmp/smoke.py")
after="$(leftovers)"
if [[ "$after" != "$before" ]]; then
  echo "pip install $pkg_root left files in the checkout:" >&2
  diff <(printf '%s\n' "$before") <(printf '%s\n' "$after") | sed -n 's/^> /  /p' >&2
  exit 1
fi
echo "the checkout is as it was"
step "package smoke passed: $(basename "${sdists[0]}") $(basename "${wheels[0]}"), and the checkout"
