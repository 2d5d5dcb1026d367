#!/usr/bin/env bash
# Build the webenv images (`make images`): each service is a target of deploy/docker/Dockerfile (`--target <name>`,
# the repository root as build context), and the local infrastructure images are deploy/docker/<name>/Dockerfile
# (redis). Keeps going past a failure and prints a table of results, sizes and build times; exits 1 when any build
# failed.
#
#   deploy/docker/build.sh [TAG] [IMAGE...]       e.g. deploy/docker/build.sh dev sites browser redis
#
# Environment (all optional):
#   ENGINE         docker or podman (default: deploy/docker/engine.sh's answer)
#   PYTHON_IMAGE   the base of every image: python:3.11-slim-bookworm (the Dockerfiles' default; pin it by digest,
#                  python:3.11-slim-bookworm@sha256:...) or the local base of `make base-image`, webenv/base:bookworm
#                  (the default when it is here and the public one is not)
#   TORCH_INDEX    a pip index with torch's CPU build (default https://download.pytorch.org/whl/cpu)
#   TORCH_WHEELS   a folder holding torch-2.13.0+cpu-*.whl: served on 127.0.0.1:$TORCH_WHEELS_PORT (47991) during the
#                  builds and used as TORCH_INDEX (builds then use the host's network: --network host)
#   PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST   passed to pip inside the builds
#   CA_CERT_FILE   a PEM file trusted by pip inside the builds (build argument CA_CERT)
#   BUILD_ARGS     more arguments for every build, e.g. "--build-arg EXTRAS=[transformers]"
#   REGISTRY       prefix of the image names (registry.example.com/); PUSH=1 pushes after building
#   RESULTS        also write the table (markdown) to this file
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=${1:-dev}
shift || true
engine=${ENGINE:-$(bash deploy/docker/engine.sh)}

services_file=deploy/docker/Dockerfile
# The service targets: the Dockerfile's `FROM runtime AS <name>` stages, in the file's order.
mapfile -t targets < <(sed -n 's/^FROM runtime AS \([a-z0-9-]*\).*/\1/p' "$services_file")
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  names=("${targets[@]}")
  for f in deploy/docker/*/Dockerfile; do names+=("$(basename "$(dirname "$f")")"); done
fi

# No PYTHON_IMAGE given: the Dockerfiles' public default, unless only the local base of `make base-image` is here.
if [ -z "${PYTHON_IMAGE:-}" ] && ! "$engine" image inspect python:3.11-slim-bookworm >/dev/null 2>&1 \
   && "$engine" image inspect webenv/base:bookworm >/dev/null 2>&1; then
  PYTHON_IMAGE=webenv/base:bookworm
  echo "build: PYTHON_IMAGE=webenv/base:bookworm (the local base; set PYTHON_IMAGE to build from another)"
fi
args=()
for var in PYTHON_IMAGE TORCH_INDEX PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST; do
  if [ -n "${!var:-}" ]; then args+=(--build-arg "$var=${!var}"); fi
done
if [ -n "${CA_CERT_FILE:-}" ]; then args+=(--build-arg "CA_CERT=$(cat "$CA_CERT_FILE")"); fi

server_pid=""
index_dir=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  if [ -n "$index_dir" ]; then rm -rf "$index_dir"; fi
}
trap cleanup EXIT
if [ -n "${TORCH_WHEELS:-}" ]; then
  # A PEP 503 index of one project, torch, from the local folder: /simple/torch/ lists the wheels.
  index_dir=$(mktemp -d)
  mkdir -p "$index_dir/simple/torch"
  ln -s "$(realpath "$TORCH_WHEELS")"/torch-*.whl "$index_dir/simple/torch/"
  # A fixed port: TORCH_INDEX is part of the torch layer's cache key, so a new port would reinstall torch.
  port=${TORCH_WHEELS_PORT:-47991}
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    echo "build: port ${TORCH_WHEELS_PORT:-47991} is taken, serving the wheels on $port (torch's layer is rebuilt)"
  fi
  python3 -m http.server --bind 127.0.0.1 --directory "$index_dir" "$port" >/dev/null 2>&1 &
  server_pid=$!
  args+=(--network host --build-arg "TORCH_INDEX=http://127.0.0.1:$port/simple")
  echo "build: torch wheels from $TORCH_WHEELS on http://127.0.0.1:$port/simple"
fi
# shellcheck disable=SC2206
extra=(${BUILD_ARGS:-})

rows=()
failed=0
for name in "${names[@]}"; do
  if printf '%s\n' "${targets[@]}" | grep -qx -- "$name"; then dockerfile=$services_file; target=(--target "$name")
  elif [ -f "deploy/docker/$name/Dockerfile" ]; then dockerfile="deploy/docker/$name/Dockerfile"; target=()
  else echo "build: no image $name (not a target of $services_file, no deploy/docker/$name/Dockerfile)" >&2
    rows+=("$name|no Dockerfile|-|-|-"); failed=1; continue; fi
  image="${REGISTRY:-}webenv/${name}:${tag}"
  echo "== $image ($dockerfile${target[*]:+ ${target[*]}})"
  start=$(date +%s)
  log=$(mktemp)
  if "$engine" build "${args[@]}" "${extra[@]}" -f "$dockerfile" "${target[@]}" -t "$image" . 2>&1 | tee "$log" | grep --line-buffered -E '^(Step |#[0-9]+ \[|Successfully|ERROR|error)' ; [ "${PIPESTATUS[0]}" = 0 ]; then
    seconds=$(( $(date +%s) - start ))
    size=$("$engine" image inspect "$image" --format '{{.Size}}')
    rows+=("$name|ok|$((size / 1000000)) MB|${seconds} s|$image")
    if [ "${PUSH:-0}" = 1 ]; then "$engine" push "$image"; fi
  else
    seconds=$(( $(date +%s) - start ))
    echo "build: $name FAILED; the end of its log:" >&2
    tail -25 "$log" >&2
    rows+=("$name|FAILED|-|${seconds} s|$image")
    failed=1
  fi
  rm -f "$log"
done

table="| image | result | size | build time | tag |
| --- | --- | --- | --- | --- |"
for row in "${rows[@]}"; do table+=$'\n'"| ${row//|/ | } |"; done
echo
echo "$table"
if [ -n "${RESULTS:-}" ]; then printf '%s\n' "$table" >"$RESULTS"; fi
exit "$failed"
