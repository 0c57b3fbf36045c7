#!/usr/bin/env bash
# A Python 3.11 base image made from Debian's packages, for machines that cannot pull python:3.11-slim (no
# registry of images reachable): debootstrap bookworm (Debian 12 ships Python 3.11) into a directory, then
# docker import. Prints the image's name, lstm-dist-base:bookworm.
#
# The root file system is cached as a tarball in $CACHE/docker-base, so a machine builds it once; an engine that
# already holds the image does nothing at all. Root only (debootstrap); it installs debootstrap with apt-get.
set -euo pipefail

die() { echo "docker-base: $*" >&2; exit 2; }
CACHE=${LSTM_DIST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lstm-dist}
IMAGE=lstm-dist-base:bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
tarball="$CACHE/docker-base/bookworm-python3.tar"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then echo "$IMAGE"; exit 0; fi
if [ ! -f "$tarball" ]; then
  [ "$(id -u)" = 0 ] || die "debootstrap needs root: run as root, or pass a base image that can be pulled"
  if ! command -v debootstrap >/dev/null; then
    echo "docker-base: installing debootstrap with apt-get" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; } \
      || die "apt-get install debootstrap failed"
  fi
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  echo "docker-base: debootstrap bookworm from $MIRROR (a few minutes)" >&2
  # minbase: apt and the essentials; python3 is what scripts/setup.sh starts from (it adds python3-dev and -venv).
  debootstrap --variant=minbase --include=python3,ca-certificates bookworm "$root" "$MIRROR" >"$root.log" 2>&1 \
    || { tail -5 "$root.log" >&2; die "debootstrap failed (log above)"; }
  rm -f "$root.log"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  mkdir -p "$(dirname "$tarball")"
  tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
fi
docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["python3"]' "$tarball" "$IMAGE" >/dev/null
echo "$IMAGE"
