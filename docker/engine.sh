#!/usr/bin/env bash
# A Docker engine for make docker-* and tests/test_docker.py.
#
#   bash docker/engine.sh start    prints "running" when an engine answers; otherwise (root only) installs
#                                  docker.io with apt-get if dockerd is missing, starts dockerd in the background
#                                  and prints "started PID"
#   bash docker/engine.sh stop PID stops an engine that `start` started
#
# The engine it starts keeps its images in $CACHE/docker (--data-root), so the base image and the Horovod layer
# stay between runs on this machine. dockerd picks its storage driver: overlay2 where the kernel and the file
# system allow it, else vfs (which copies every layer in full). --iptables=false: the engine leaves this
# machine's firewall alone; containers reach each other and this machine over their bridge network, nothing else.
# No engine to be had: one line saying why, exit 2.
set -euo pipefail

die() { echo "docker-engine: $*" >&2; exit 2; }
CACHE=${LSTM_DIST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lstm-dist}

start() {
  if docker info >/dev/null 2>&1; then echo running; return; fi
  [ "$(id -u)" = 0 ] || die "no Docker engine answers ($(docker info 2>&1 | grep -m1 -i error || echo 'docker: not installed')) and only root can start one: start it (sudo systemctl start docker) or add yourself to the docker group"
  if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    command -v apt-get >/dev/null || die "no dockerd and no apt-get to install it: install Docker"
    echo "docker-engine: installing docker.io with apt-get" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; } \
      || die "apt-get install docker.io failed"
  fi
  mkdir -p "$CACHE/docker"
  local log="$CACHE/dockerd.log"
  setsid dockerd --data-root "$CACHE/docker" --iptables=false </dev/null >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 120); do
    if docker info >/dev/null 2>&1; then echo "started $pid"; return; fi
    kill -0 "$pid" 2>/dev/null || die "dockerd exited: $(grep -v '^\s*$' "$log" | tail -1)"
    sleep 0.5
  done
  kill "$pid" 2>/dev/null || true
  die "dockerd did not answer within 60 s (log: $log)"
}

stop() {
  local pid=$1
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
}

case "${1:-}" in
  start) start ;;
  stop) [ $# = 2 ] || die "usage: engine.sh stop PID"; stop "$2" ;;
  *) die "usage: engine.sh start | stop PID" ;;
esac
