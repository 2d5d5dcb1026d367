#!/usr/bin/env bash
# `make test-containers`: the platform in containers, end to end, offline.
#
#  1. a container engine (deploy/docker/engine.sh: a running Docker, else dockerd started here, else podman);
#  2. the images of sites, browser, policy, judge, collector and redis (deploy/docker/build.sh; cached layers make a
#     second run take seconds), FROM $PYTHON_IMAGE - default the local base webenv/base:bookworm, made by
#     deploy/docker/base-image.sh when missing; on a machine with a registry: PYTHON_IMAGE=python:3.11-slim-bookworm;
#  3. docker-compose.yml brought up as project $COMPOSE_PROJECT_NAME (default webenv-test) with the redis profile
#     (the collector's run queue in Redis, its store the embedded chDB in its volume), waiting until every container
#     reports healthy (grpc.health.v1 SERVING, redis-cli ping);
#  4. deploy/docker/check_episodes.py from the host on 127.0.0.1:50056: a run of $EPISODES oracle episodes through
#     the containerized collector, read back from its store, exported to parquet; the exported files are then
#     checked inside the collector container, and the Redis container is checked to hold the run's queue;
#  5. the stack is torn down with its volumes, also when a step failed (KEEP=1 leaves it up for a look).
# Not part of `make test`/CI: it builds images (minutes the first time) and needs root or a Docker engine.
set -euo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s)
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-webenv-test}
export WEBENV_TAG=${WEBENV_TAG:-dev}
episodes=${EPISODES:-6}
py=${PY:-.venv/bin/python}
say() { echo "test-containers [$(( $(date +%s) - t0 ))s]: $*"; }

engine=$(bash deploy/docker/engine.sh)
export ENGINE=$engine
if [ "$engine" = podman ]; then compose=(podman-compose)
elif docker compose version >/dev/null 2>&1; then compose=(docker compose)
else compose=(docker-compose); fi
say "engine $engine, compose ${compose[*]}"

# The local base unless a public one is asked for (this machine reaches no image registry).
export PYTHON_IMAGE=${PYTHON_IMAGE:-webenv/base:bookworm}
if [ "$PYTHON_IMAGE" = webenv/base:bookworm ]; then bash deploy/docker/base-image.sh; fi
# torch's CPU wheel: from TORCH_INDEX, TORCH_WHEELS, or a folder of pip's own find-links that holds it (the host's
# way of installing torch here; the builds then take it from 127.0.0.1).
if [ -z "${TORCH_INDEX:-}" ] && [ -z "${TORCH_WHEELS:-}" ]; then
  for d in ${PIP_FIND_LINKS:-} $("$py" -m pip config get global.find-links 2>/dev/null || true); do
    if compgen -G "$d/torch-2.13.0+cpu-*.whl" >/dev/null; then export TORCH_WHEELS=$d; break; fi
  done
fi
say "building images FROM $PYTHON_IMAGE${TORCH_WHEELS:+ (torch from $TORCH_WHEELS)}"
bash deploy/docker/build.sh "$WEBENV_TAG" sites browser policy judge collector redis
t_build=$(( $(date +%s) - t0 ))

for port in 50051 50052 50054 50055 50056 8800; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "test-containers: 127.0.0.1:$port is in use (another webenv stack?): stop it first" >&2; exit 1
  fi
done

export COMPOSE_PROFILES=redis WEBENV_REDIS_IMAGE=webenv/redis:$WEBENV_TAG WEBENV_REDIS_URL=redis://redis:6379/0
export WEBENV_STORE_URL="" WEBENV_SITES_COUNT=${WEBENV_SITES_COUNT:-40}
services=(sites browser policy judge collector redis)
teardown() {
  rc=$?
  if [ "$rc" != 0 ]; then
    say "FAILED; the last log lines of each container:"
    "${compose[@]}" logs --tail 15 "${services[@]}" 2>&1 | tail -120 || true
  fi
  if [ "${KEEP:-0}" = 1 ]; then say "KEEP=1: left up (${compose[*]} -p $COMPOSE_PROJECT_NAME down -v)"
  else "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true; say "torn down"; fi
  exit "$rc"
}
trap teardown EXIT
"${compose[@]}" up -d --no-build "${services[@]}"
t_up=$(date +%s)

deadline=$(( $(date +%s) + ${HEALTH_TIMEOUT:-300} ))
while :; do
  waiting=()
  for s in "${services[@]}"; do
    id=$("${compose[@]}" ps -q "$s")
    status=$("$engine" inspect --format '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id" 2>/dev/null || echo missing)
    [ "$status" = healthy ] || waiting+=("$s=$status")
  done
  [ ${#waiting[@]} -eq 0 ] && break
  if [ "$(date +%s)" -gt "$deadline" ]; then say "not healthy in time: ${waiting[*]}"; exit 1; fi
  sleep 3
done
t_healthy=$(( $(date +%s) - t_up ))
say "all healthy ${t_healthy}s after up: ${services[*]}"

result=$("$py" deploy/docker/check_episodes.py --collector 127.0.0.1:50056 --episodes "$episodes")
echo "$result"
# The exported files, seen from inside the collector container (its volume), and the run's traces in Redis.
mapfile -t paths < <(echo "$result" | "$py" -c 'import json, sys; print("\n".join(json.load(sys.stdin)["paths"]))')
"${compose[@]}" exec -T collector python -c '
import sys, pyarrow.parquet as pq
rows = {p: pq.read_metadata(p).num_rows for p in sys.argv[1:] if p.endswith(".parquet")}
assert rows and all(rows.values()), rows
print("exported (inside the collector container):", rows)' "${paths[@]}"
keys=$("${compose[@]}" exec -T redis redis-cli --scan --pattern 'webenv*' | wc -l)
[ "$keys" -gt 0 ] || { say "the collector left no keys in Redis"; exit 1; }
say "redis holds $keys webenv keys"
say "PASSED: build ${t_build}s, healthy ${t_healthy}s after up, $episodes episodes through the containers; total $(( $(date +%s) - t0 ))s"
