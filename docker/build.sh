#!/usr/bin/env bash
# make docker-build: bash docker/build.sh IMAGE [BASE]
#
# Builds docker/Dockerfile as IMAGE on BASE (default python:3.11-slim). BASE=debootstrap, or a default that
# cannot be pulled (no registry reachable), builds a Debian base locally first (docker/base.sh). The
# environment stage (system packages, .venv, Horovod) is also tagged lstm-dist-cache:environment: removing IMAGE
# then keeps it, and the next build on this machine reuses it unless requirements.txt, scripts/setup.sh,
# launcher/gloo_hostname.c or the Horovod wheel handed over (docker/wheels) changed.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "docker-build: $*" >&2; exit 2; }
[ $# -ge 1 ] && [ -n "$1" ] || die "usage: build.sh IMAGE [BASE]"
IMAGE=$1
BASE=${2:-python:3.11-slim}

if [ "$BASE" = debootstrap ]; then
  BASE=$(bash docker/base.sh)
elif ! docker image inspect "$BASE" >/dev/null 2>&1 && ! docker pull -q "$BASE" >/dev/null 2>&1; then
  echo "docker-build: cannot pull $BASE; building a Debian bookworm base with debootstrap instead" >&2
  BASE=$(bash docker/base.sh)
fi
# The certificate authorities this machine trusts besides the public ones, for the build steps (docker/Dockerfile).
rm -f docker/ca-certificates/*.crt
cp /usr/local/share/ca-certificates/*.crt docker/ca-certificates/ 2>/dev/null || true
# The Horovod wheel this checkout's make setup built (scripts/setup.sh's cache), which the image's setup installs
# instead of compiling Horovod again: only when this machine runs the base's Debian release, whose C library and
# OpenMPI the wheel links to.
rm -rf docker/wheels && mkdir docker/wheels
cache=${LSTM_DIST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lstm-dist}
key=$(cat .venv/.horovod-build 2>/dev/null || true)
release() { sed -n 's/^VERSION_CODENAME=//p'; }
if [ -n "$key" ] && [ -d "$cache/wheels/$key" ] \
   && [ "$(release </etc/os-release)" = "$(docker run --rm --entrypoint cat "$BASE" /etc/os-release | release)" ]; then
  cp -r "$cache/wheels/$key" docker/wheels/
fi
# The classic builder (DOCKER_BUILDKIT=0) is in every docker CLI; BuildKit needs the buildx plugin in recent ones.
# --network host: the build steps reach the package registries (apt, PyPI) through this machine's network.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
build() {
  DOCKER_BUILDKIT=0 docker build --force-rm --network host --build-arg "BASE=$BASE" -f docker/Dockerfile "$@" . >"$log" 2>&1 \
    || { tail -30 "$log" >&2; die "docker build $* failed (its last lines above)"; }
}
if [ -n "$(ls docker/wheels)" ]; then
  echo "docker-build: $IMAGE on $BASE, with this machine's Horovod wheel ($key)" >&2
else
  echo "docker-build: $IMAGE on $BASE (without this machine's Horovod wheel, the first build on a machine compiles" \
       "Horovod: about 10 minutes on 2 cores)" >&2
fi
build --target environment -t lstm-dist-cache:environment
build -t "$IMAGE"
echo "docker-build: built $IMAGE" >&2
