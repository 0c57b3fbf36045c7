#!/usr/bin/env bash
# One task of a docker/compose.yaml cluster, started by hand as on a machine of its own:
#
#   task.sh JOB RUNNER_FLAGS...      JOB: ps or worker; the runner is run_tf.py
#
# The cluster is found by name: Docker's DNS answers a service's name (ps, worker) with the address of every
# container of that service. The task waits until it sees $PS and $WORKERS of them, takes its index from its own
# address's place among its service's addresses (sorted), and starts run_tf.py with the whole cluster, every
# task on port 2222. From there run_tf.py's own start-up (--startup_timeout) waits for the others.
set -euo pipefail

die() { echo "task: $*" >&2; exit 2; }
[ $# -ge 1 ] && { [ "$1" = ps ] || [ "$1" = worker ]; } || die "usage: task.sh ps|worker RUNNER_FLAGS..."
job=$1; shift
want_ps=${PS:-1} want_workers=${WORKERS:-2}

addresses() { getent ahostsv4 "$1" | awk '{print $1}' | sort -u -t . -k1,1n -k2,2n -k3,3n -k4,4n; }
for _ in $(seq 120); do
  ps=$(addresses ps || true) workers=$(addresses worker || true)
  [ "$(wc -w <<<"$ps")" = "$want_ps" ] && [ "$(wc -w <<<"$workers")" = "$want_workers" ] && break
  sleep 1
done
[ "$(wc -w <<<"$ps")" = "$want_ps" ] && [ "$(wc -w <<<"$workers")" = "$want_workers" ] \
  || die "after 120 s, $(wc -w <<<"$ps") ps and $(wc -w <<<"$workers") worker containers answer; expected $want_ps and $want_workers"
own=$(hostname -i | awk '{print $1}')
mine=$([ "$job" = ps ] && echo "$ps" || echo "$workers")
index=$(grep -nx "$own" <<<"$mine" | cut -d: -f1) || die "this container's address $own is not among the ${job}s: $mine"
join() { sed 's/$/:2222/' | paste -sd, -; }
exec python /opt/lstm-dist/run_tf.py --job_name="$job" --task_index=$((index - 1)) \
  --ps_hosts="$(join <<<"$ps")" --worker_hosts="$(join <<<"$workers")" "$@"
