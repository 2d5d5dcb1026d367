#!/usr/bin/env bash
# Install the Debian packages listed in the given files (one per line, # comments) when missing.
# Idempotent: does nothing (and needs no network) when everything is installed already.
set -euo pipefail
pkgs=$(cat "$@" 2>/dev/null | sed 's/#.*//' | tr -s ' \n' '\n' | sort -u | grep -v '^$' || true)
missing=()
# Node.js (for the second-language proto test) usually comes with the image; Debian's only when absent.
if command -v npm >/dev/null 2>&1; then
  pkgs=$(echo "$pkgs" | grep -vxE 'nodejs|npm' || true)
else
  pkgs="$pkgs nodejs npm"
fi
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "apt: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
