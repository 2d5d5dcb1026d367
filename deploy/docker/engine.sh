#!/usr/bin/env bash
# Make sure a container engine answers (`make base-image`, `make images` and `make test-containers` call it first).
#
#   deploy/docker/engine.sh            prints the engine to use (docker or podman) on stdout, the rest on stderr
#
# 1. `docker info` answers (a running dockerd, Docker Desktop, a rootless daemon): docker.
# 2. Otherwise, as root, with Debian's packages (installed here when missing: docker.io, debootstrap; they are
#    not in `make install`, which CI runs, because only these targets need them): start dockerd in the background,
#    niced (every build step and container it starts inherits the priority; a shared machine stays usable), its log
#    in $DOCKERD_LOG (default /var/log/webenv-dockerd.log), storage on local disk (/var/lib/docker, overlay2,
#    or $DOCKERD_STORAGE_DRIVER, e.g. vfs where overlay mounts are refused).
#    Containers get the host's hard nofile limit as default: runc cannot raise a limit above it
#    ("error setting rlimit type 7: operation not permitted"), and Docker's own default may exceed it.
# 3. podman when `podman info` answers (ENGINE=podman forces it).
set -euo pipefail
log() { echo "engine: $*" >&2; }

if [ "${ENGINE:-}" = podman ]; then podman info >/dev/null 2>&1 && { echo podman; exit 0; }; log "podman does not answer"; exit 1; fi
if docker info >/dev/null 2>&1; then echo docker; exit 0; fi

if [ "$(id -u)" = 0 ] && [ "${ENGINE:-docker}" = docker ]; then
  missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  dlog=${DOCKERD_LOG:-/var/log/webenv-dockerd.log}
  nofile=$(ulimit -Hn)
  [ "$nofile" = unlimited ] && nofile=1048576
  log "starting dockerd (nice ${DOCKERD_NICE:-10}, log $dlog, nofile $nofile)"
  # setsid: dockerd outlives this script and the make target that started it.
  setsid nice -n "${DOCKERD_NICE:-10}" dockerd --storage-driver "${DOCKERD_STORAGE_DRIVER:-overlay2}" \
    --default-ulimit "nofile=$nofile:$nofile" >>"$dlog" 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then log "dockerd ready (pid $!)"; echo docker; exit 0; fi
    sleep 1
  done
  log "dockerd did not answer within 60 s; its log:"; tail -20 "$dlog" >&2
fi
if command -v podman >/dev/null && podman info >/dev/null 2>&1; then echo podman; exit 0; fi
log "no container engine: install Docker (or Debian's docker.io) or podman, or run as root to let this script start dockerd"
exit 1
