#!/usr/bin/env bash
# The local base image for machines that reach no image registry (`make base-image`): Debian bookworm made with
# debootstrap from the Debian mirror (plain HTTP, signed), with Python 3.11 (Debian's python3), venv and pip,
# imported with `docker import`. Every Dockerfile builds FROM it with `--build-arg PYTHON_IMAGE=webenv/base:bookworm`.
#
#   deploy/docker/base-image.sh [IMAGE]          default IMAGE: webenv/base:bookworm
#
# Environment:
#   ENGINE         docker or podman (default: the one whose engine answers)
#   MIRROR         Debian mirror (default http://deb.debian.org/debian); SUITE (default bookworm)
#   CA_BUNDLE      PEM file(s), space separated, added to the image's trust store (apt, pip, Python) - a proxy's or
#                  a company's CA. Default: the host's own additions, /usr/local/share/ca-certificates/*.crt.
#                  CA_BUNDLE= (empty) adds none.
#   PIP_INDEX_URL  a package index written to the image's /etc/pip.conf (default: none, pip's own, PyPI)
#   REBUILD=1      build even when IMAGE exists
#
# What is in it, and why: minbase (dpkg, apt, coreutils, passwd for useradd) + python3 python3-venv
# python-is-python3 (`python` as in the python:3.11 images) + ca-certificates. Documentation, man pages and
# locales are excluded for this image and for every package installed on top of it later (the browser image's
# Chromium), as in Debian's own slim images. The apt sources stay, so images can `apt-get install` from the
# same mirror. About 2 minutes and 180 MB here; needs root (debootstrap, chroot).
set -euo pipefail
cd "$(dirname "$0")/../.."
image=${1:-webenv/base:bookworm}
suite=${SUITE:-bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}
engine=${ENGINE:-}
if [ -z "$engine" ]; then
  if docker info >/dev/null 2>&1; then engine=docker
  elif podman info >/dev/null 2>&1; then engine=podman
  else echo "base-image: no container engine answers (start dockerd, see docs/operations.md)" >&2; exit 1; fi
fi
if [ "${REBUILD:-0}" != 1 ] && "$engine" image inspect "$image" >/dev/null 2>&1; then
  echo "base-image: $image exists (REBUILD=1 to make it again)"; exit 0
fi
command -v debootstrap >/dev/null || { echo "base-image: debootstrap missing (apt-get install debootstrap)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "base-image: debootstrap and chroot need root" >&2; exit 1; }

if [ -z "${CA_BUNDLE+set}" ]; then CA_BUNDLE=$(ls /usr/local/share/ca-certificates/*.crt 2>/dev/null | tr '\n' ' ' || true); fi
root=$(mktemp -d /var/tmp/webenv-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
start=$(date +%s)
echo "base-image: debootstrap $suite from $mirror into $root"
debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
  "$suite" "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"

# No documentation, man pages or locales, now or for anything installed later (Debian's slim-image settings).
cat >"$root/etc/dpkg/dpkg.cfg.d/01-webenv-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
# apt in a container: no recommends, no cached .debs, no package lists left behind by later layers that clean up.
cat >"$root/etc/apt/apt.conf.d/01-webenv" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
EOF
echo "deb http://deb.debian.org/debian-security $suite-security main" >>"$root/etc/apt/sources.list"

n=0
for pem in $CA_BUNDLE; do
  n=$((n + 1)); cp "$pem" "$root/usr/local/share/ca-certificates/webenv-$n.crt"
done
if [ "$n" -gt 0 ]; then
  chroot "$root" update-ca-certificates >/dev/null 2>&1
  echo "base-image: $n CA certificate(s) added to the trust store"
fi
# pip uses its own CA list unless told otherwise: point it at the system store (which holds the CAs above).
{
  echo "[global]"
  echo "cert = /etc/ssl/certs/ca-certificates.crt"
  if [ -n "${PIP_INDEX_URL:-}" ]; then echo "index-url = $PIP_INDEX_URL"; fi
} >"$root/etc/pip.conf"
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/* "$root"/tmp/* "$root"/root/.cache
python=$(chroot "$root" python --version)

tar --numeric-owner -C "$root" -c . | "$engine" import \
  -c 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'CMD ["python"]' \
  -m "debootstrap --variant=minbase $suite ($mirror) + $python" - "$image" >/dev/null
size=$("$engine" image inspect "$image" --format '{{.Size}}')
echo "base-image: $image ($python, $((size / 1000000)) MB) in $(( $(date +%s) - start )) s"
