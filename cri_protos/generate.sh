#!/bin/sh
# Regenerate the Python stubs of the CRI runtime.v1 API from cri_protos/runtime/v1/api.proto.
#
# Usage: cri_protos/generate.sh [OUTDIR]   (default: the repository root, i.e. in place)
# The stubs are committed; tests/unit/kuberuntime/test_protos.py regenerates them into a
# temporary directory and fails if they differ, so run this after editing api.proto.
# PYTHON selects the interpreter that has the pinned grpcio-tools (default: .venv/bin/python).
#
# Generating with "-I ." and the path cri_protos/runtime/v1/api.proto makes the generated code
# import itself as cri_protos.runtime.v1.api_pb2, which is where it lives. The protobuf package
# stays runtime.v1, so RPC paths are /runtime.v1.RuntimeService/<Method> as the CRI requires.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
mkdir -p "$OUT"
cd "$ROOT"
"$PYTHON" -m grpc_tools.protoc -I . \
    --python_out="$OUT" --grpc_python_out="$OUT" --pyi_out="$OUT" \
    cri_protos/runtime/v1/api.proto
