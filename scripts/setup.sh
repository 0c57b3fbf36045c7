#!/usr/bin/env bash
# `make setup`: the virtual environment .venv with every pin of requirements.txt, and Horovod built from
# source against its TensorFlow (with Gloo; with MPI too when mpicxx is present). The built wheel is cached
# outside the repository, keyed by the Horovod, TensorFlow and Python versions and the controllers, so a
# second setup on the same machine takes seconds. Safe to rerun: every step skips what is already right.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "setup: $*" >&2; exit 2; }
say() { echo "setup: $*"; }

VENV=.venv
CACHE=${LSTM_DIST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lstm-dist}

# 1. A Python that TensorFlow 2.15 supports, and its own headers and venv packages' names.
PYTHON=$(scripts/find_python.sh) || exit 2
version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# 2. The compilers Horovod's build needs, ssh for HOSTS= runs and sshd for the tests' own ssh server, and
#    (optional) OpenMPI, Slurm and munge; apt-get installs them when we are root on Debian/Ubuntu.
missing=()
command -v ssh >/dev/null || missing+=(openssh-client)
command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v cmake >/dev/null || missing+=(cmake)
command -v g++ >/dev/null || missing+=(g++)
"$PYTHON" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || missing+=("python$version-dev")
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || missing+=("python$version-venv")
# OpenMPI lets Horovod be built with MPI as well as Gloo (make run-horovod MPI=1, Slurm's srun --mpi);
# it is optional: without root, Horovod is built with Gloo only.
can_apt=false; [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && can_apt=true
command -v mpicxx >/dev/null || ! $can_apt || missing+=(openmpi-bin libopenmpi-dev)
# ip and tc build the emulated clusters (NET=, make bench; root only); the tests find stray tasks with pgrep.
{ command -v ip && command -v tc; } >/dev/null || ! $can_apt || missing+=(iproute2)
command -v pgrep >/dev/null || ! $can_apt || missing+=(procps)
# What only the test suite uses; LSTM_DIST_MINIMAL=1 (docker/Dockerfile) leaves it out.
test_tools=$can_apt; [ "${LSTM_DIST_MINIMAL:-0}" = 1 ] && test_tools=false
# poppler-utils' pdftoppm renders the report's pages in its test (without it the test uses Typst's own PNGs).
command -v pdftoppm >/dev/null || ! $test_tools || missing+=(poppler-utils)
# Slurm and munge for make cluster's nodes and head (tests/test_cluster.py runs the sbatch templates on them);
# optional too: without root the cluster's tests skip, saying why.
{ command -v slurmctld && command -v slurmd && command -v sbatch; } >/dev/null || ! $test_tools || missing+=(slurm-wlm)
command -v munged >/dev/null || ! $test_tools || missing+=(munge)
if [ ${#missing[@]} -gt 0 ]; then
  if $can_apt; then
    say "installing ${missing[*]} with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    die "missing ${missing[*]}: install them (sudo apt-get install ${missing[*]}) and rerun make setup"
  fi
fi

# 3. The virtual environment and every pin but Horovod.
[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
pins=$(sed -e 's/\s*#.*//' requirements.txt | grep -Ev '^\s*$')  # pins, without comments
say "installing $(echo "$pins" | grep -v '^horovod' | tr '\n' ' ')"
"${PIP[@]}" install -q $(echo "$pins" | grep -v '^horovod')

# 4. Horovod, from the cached wheel or built from source.
hvd_pin=$(echo "$pins" | grep '^horovod==')
hvd_version=${hvd_pin#horovod==}
tf_version=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("tensorflow-cpu"))')
py_tag=$("$VENV/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
controllers=gloo
if command -v mpicxx >/dev/null; then controllers=gloo-mpi; fi
key="horovod-$hvd_version-tf-$tf_version-$py_tag-$controllers"
stamp="$VENV/.horovod-build"

check_build() {
  local out
  out=$("$VENV/bin/horovodrun" --check-build 2>&1) || return 1
  grep -q '\[X\] TensorFlow' <<<"$out" && grep -q '\[X\] Gloo' <<<"$out"
}

if [ "$(cat "$stamp" 2>/dev/null)" = "$key" ] && check_build; then
  say "horovod $hvd_version already built for this environment ($key)"
else
  wheel_dir="$CACHE/wheels/$key"
  if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
    say "building horovod $hvd_version from source with $controllers (about 7 minutes on 2 cores)"
    build_dir=$(mktemp -d)
    trap 'rm -rf "$build_dir"' EXIT
    mpi_flag=HOROVOD_WITHOUT_MPI=1
    [ "$controllers" = gloo-mpi ] && mpi_flag=HOROVOD_WITH_MPI=1
    # --no-build-isolation: compile against the TensorFlow of this venv. --no-cache-dir: pip's own cache could
    # hand back a wheel built against another TensorFlow, which fails at import.
    env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 "$mpi_flag" HOROVOD_WITHOUT_PYTORCH=1 \
        HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" \
      "${PIP[@]}" wheel -q --no-cache-dir --no-build-isolation --no-deps "$hvd_pin" -w "$build_dir" \
      > "$build_dir/build.log" 2>&1 \
      || { tail -30 "$build_dir/build.log" >&2; die "horovod build failed (log above)"; }
    mkdir -p "$(dirname "$wheel_dir")"
    rm -rf "$wheel_dir.tmp" && mkdir "$wheel_dir.tmp" && cp "$build_dir"/horovod-*.whl "$wheel_dir.tmp/"
    mv -T "$wheel_dir.tmp" "$wheel_dir"
  fi
  say "installing horovod from $wheel_dir"
  "${PIP[@]}" uninstall -q -y horovod 2>/dev/null || true
  "${PIP[@]}" install -q "$wheel_dir"/horovod-*.whl
  check_build || die "horovodrun --check-build does not list TensorFlow and Gloo; remove $wheel_dir and rerun make setup"
  echo "$key" > "$stamp"
  say "horovod $hvd_version built with TensorFlow $tf_version and $controllers"
fi
