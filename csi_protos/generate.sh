#!/bin/sh
# Regenerate the Python stubs of the CSI node side and of the kubelet's plugin registration API
# from csi_protos/csi/v1/csi.proto and csi_protos/pluginregistration/v1/api.proto.
#
# Usage: csi_protos/generate.sh [OUTDIR]   (default: the repository root, i.e. in place)
# The stubs are committed; tests/unit/csi/test_protos.py regenerates them into a temporary
# directory and fails if they differ, so run this after editing a .proto.
# PYTHON selects the interpreter that has the pinned grpcio-tools (default: .venv/bin/python).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
mkdir -p "$OUT"
cd "$ROOT"
"$PYTHON" -m grpc_tools.protoc -I . -I "$("$PYTHON" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')" \
    --python_out="$OUT" --grpc_python_out="$OUT" --pyi_out="$OUT" \
    csi_protos/csi/v1/csi.proto csi_protos/pluginregistration/v1/api.proto
