#!/usr/bin/env bash
# Steps after pip install: each service may ship services/<name>/post-install.sh (run with the venv path).
set -euo pipefail
venv="$1"
for f in services/*/post-install.sh; do
  [ -f "$f" ] && bash "$f" "$venv"
done
exit 0
