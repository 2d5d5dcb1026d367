#!/bin/sh
# Generate the contract's Python code into OUT (the sdk's src folder): messages, gRPC stubs and the descriptor set
# with source info (webenv/v1/webenv.binpb: the gateway's routes, reflection and the contract tests read it).
# One generation for `make protos` (which adds mypy stubs through the extra flags) and every image's build stage.
#
#   PYTHON=/opt/protoc/bin/python sh protos/generate.sh services/sdk/src [--mypy_out=... ...]
#
# PYTHON: a Python with grpcio-tools (default: python).
set -eu
protos=$(dirname "$0")
out=$1
shift
mkdir -p "$out/webenv/v1"
exec "${PYTHON:-python}" -m grpc_tools.protoc -I "$protos" --python_out="$out" --grpc_python_out="$out" \
  --descriptor_set_out="$out/webenv/v1/webenv.binpb" --include_imports --include_source_info "$@" \
  "$protos"/webenv/v1/*.proto
