#!/usr/bin/env bash
# Build every webenv image from services/<name>/Dockerfile with the repository root as build context.
#   deploy/docker/build.sh [TAG] [SERVICE...]        e.g. deploy/docker/build.sh 0.1.0 browser sites
# Environment: ENGINE=docker|podman (default: the one found), REGISTRY=registry.example.com/ (prefix, optional),
#   BUILD_ARGS="--build-arg PYTHON_IMAGE=... --build-arg TORCH_INDEX=..." (passed to every build),
#   PUSH=1 to push after building.
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=${1:-dev}
shift || true
engine=${ENGINE:-$(command -v docker >/dev/null 2>&1 && echo docker || echo podman)}
if [ ! -f .dockerignore ]; then
  echo "warning: no .dockerignore at the repository root: .venv and data go into the build context" >&2
  echo "         (copy deploy/docker/dockerignore to .dockerignore)" >&2
fi
services=("$@")
if [ ${#services[@]} -eq 0 ]; then
  for f in services/*/Dockerfile; do services+=("$(basename "$(dirname "$f")")"); done
fi
for s in "${services[@]}"; do
  image="${REGISTRY:-}webenv/${s}:${tag}"
  echo "== ${image}"
  # shellcheck disable=SC2086
  "$engine" build ${BUILD_ARGS:-} -f "services/${s}/Dockerfile" -t "$image" .
  if [ "${PUSH:-0}" = 1 ]; then "$engine" push "$image"; fi
done
