#!/usr/bin/env bash
# The test command (`make test`): every service's tests and the cross-service tests.
set -euo pipefail
dirs=(tests)
for d in services/*/tests; do [ -d "$d" ] && dirs+=("$d"); done
exec .venv/bin/python -m pytest "${dirs[@]}" "$@"
