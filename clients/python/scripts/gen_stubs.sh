#!/usr/bin/env bash
# Regenerates the committed gRPC/protobuf stubs in src/shardcar/_proto from ../../proto.
#
# Usage: clients/python/scripts/gen_stubs.sh [python]
#
# The stubs are generated with grpcio-tools 1.62.3 (protobuf 4.25 gencode): that code carries no
# runtime version check, so it imports under every protobuf from 4.25 to 7.x and grpcio >= 1.62,
# which keeps the package installable on Python 3.9. Pass a python that has exactly that
# grpcio-tools, or none: the script then builds a throwaway venv with it (needs PyPI access).
#
# protoc writes `from shardcar.v1 import shardcar_pb2`, which would clash with our own
# `shardcar` package, so the stubs are generated flat into shardcar/_proto and that import is
# rewritten to a relative one (`from . import shardcar_pb2`).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pkg_root="$(cd "$here/.." && pwd)"
repo_root="$(cd "$pkg_root/../.." && pwd)"
tools_version="1.62.3"
out="$pkg_root/src/shardcar/_proto"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

python="${1:-}"
if [[ -z "$python" ]]; then
  python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install --quiet "grpcio-tools==$tools_version"
  python="$tmp/venv/bin/python"
fi
have="$("$python" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))')"
if [[ "$have" != "$tools_version" ]]; then
  echo "gen_stubs.sh: $python has grpcio-tools $have, need $tools_version (or pass no argument)" >&2
  exit 1
fi

mkdir -p "$tmp/gen"
"$python" -m grpc_tools.protoc \
  -I "$repo_root/proto" \
  --python_out="$tmp/gen" --pyi_out="$tmp/gen" --grpc_python_out="$tmp/gen" \
  "$repo_root/proto/shardcar/v1/shardcar.proto"

for f in shardcar_pb2.py shardcar_pb2.pyi shardcar_pb2_grpc.py; do
  sed -e 's/^from shardcar\.v1 import shardcar_pb2 as/from . import shardcar_pb2 as/' \
    "$tmp/gen/shardcar/v1/$f" > "$out/$f"
done

cat > "$out/__init__.py" <<'PY'
"""Generated protobuf/gRPC stubs for shardcar.v1 (scripts/gen_stubs.sh; do not edit)."""
PY
echo "stubs written to $out"
