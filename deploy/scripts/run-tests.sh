#!/usr/bin/env bash
# The test command (`make test`): every library's and service's tests and the cross-service tests (but the vllm-marked ones).
set -euo pipefail
dirs=(tests)
for d in libs/*/tests services/*/tests; do [ -d "$d" ] && dirs+=("$d"); done
# `-m "not vllm"`: the vLLM CPU backend's tests need their own 4 GB venv; `make test-vllm` runs them.
exec .venv/bin/python -m pytest -m "not vllm" "${dirs[@]}" "$@"
