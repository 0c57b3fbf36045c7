#!/usr/bin/env bash
# `make setup`: the virtual environment .venv with every pin of requirements.txt, and Horovod built from
# source against its TensorFlow (with Gloo; with MPI too when mpicxx is present). The built wheel is cached
# outside the repository, keyed by the Horovod, TensorFlow and Python versions and the controllers, so a
# second setup on the same machine takes seconds. Safe to rerun: every step skips what is already right.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "setup: $*" >&2; exit 2; }
say() { echo "setup: $*"; }
# A program that runs: bash's `command -v` also names a file on PATH that cannot be executed.
have() { local path; path=$(command -v "$1") && [ -x "$path" ]; }

VENV=.venv
CACHE=${LSTM_DIST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lstm-dist}

# 1. A Python that TensorFlow 2.15 supports, and its own headers and venv packages' names.
PYTHON=$(scripts/find_python.sh) || exit 2
version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# 2. Horovod's wheel, if a build for this Python, TensorFlow and controllers is cached (a lab's shared
#    LSTM_DIST_CACHE hands one over): then its build's packages are not needed.
pins=$(sed -e 's/\s*#.*//' requirements.txt | grep -Ev '^\s*$')  # pins, without comments
hvd_pin=$(echo "$pins" | grep '^horovod==')
hvd_version=${hvd_pin#horovod==}
tf_version=$(echo "$pins" | sed -n 's/^tensorflow-cpu==//p')
py_tag=$("$PYTHON" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
controllers=gloo
if have mpicxx; then controllers=gloo-mpi; fi
key="horovod-$hvd_version-tf-$tf_version-$py_tag-$controllers"
wheel_dir="$CACHE/wheels/$key"
cached=false
if ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then cached=true; fi

# 3. What setup needs (required), then what some targets or only the tests use (optional), each with what it
#    serves: apt-get installs both when we are root on Debian/Ubuntu; without root, every missing one is named
#    at once, in one apt-get line, and a missing required one stops setup.
missing=() optional=()
need() { missing+=("$1:$2"); }
want() { have "$1" || [ -x "/usr/sbin/$1" ] || optional+=("$2:$3"); }
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || need "python$version-venv" "the virtual environment"
have cc || need gcc "the launcher's host-name shim"
if $cached; then
  say "Horovod's wheel is cached ($wheel_dir): its build's packages are not needed"
else
  have cmake || need cmake "Horovod's build"
  have g++ || need g++ "Horovod's build"
  "$PYTHON" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || need "python$version-dev" "Horovod's build"
fi
want ssh openssh-client "HOSTS= runs"
# OpenMPI lets Horovod be built with MPI as well as Gloo (make run-horovod MPI=1, Slurm's srun --mpi).
want mpicxx "openmpi-bin libopenmpi-dev" "MPI=1"
# ip and tc build the emulated clusters (NET=, make bench's links; root only); the tests find stray tasks with pgrep.
want tc iproute2 "emulated links"
want pgrep procps "the tests"
# bubblewrap: make grade runs the students' code in its sandboxes (launcher/sandbox.py).
want bwrap bubblewrap "make grade's sandbox"
want sshd openssh-server "the tests' ssh hosts, containers' HOSTS= runs"
# What only the test suite uses; LSTM_DIST_MINIMAL=1 (docker/Dockerfile) leaves it out.
if [ "${LSTM_DIST_MINIMAL:-0}" != 1 ]; then
  want pdftoppm poppler-utils "the report's test (pages as PNG)"
  want slurmd slurm-wlm "make cluster and the Slurm tests"
  want munged munge "make cluster and the Slurm tests"
fi
named() { for item in "$@"; do printf '%s (%s), ' "${item%%:*}" "${item#*:}"; done | sed 's/, $//'; }
packages=() ; for item in "${missing[@]}" "${optional[@]}"; do packages+=(${item%%:*}); done
can_apt=false; [ "$(id -u)" = 0 ] && have apt-get && can_apt=true
if [ ${#packages[@]} -gt 0 ] && $can_apt; then
  say "installing ${packages[*]} with apt-get"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
elif [ ${#missing[@]} -gt 0 ]; then
  also=""; [ ${#optional[@]} -gt 0 ] && also="; optional, also missing: $(named "${optional[@]}")"
  die "missing $(named "${missing[@]}")$also: sudo apt-get install ${packages[*]}, then rerun make setup"
elif [ ${#optional[@]} -gt 0 ]; then
  say "not installed (optional; sudo apt-get install ${packages[*]} adds them): $(named "${optional[@]}")"
fi

# 4. The virtual environment and every pin but Horovod.
[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
say "installing $(echo "$pins" | grep -v '^horovod' | tr '\n' ' ')"
"${PIP[@]}" install -q $(echo "$pins" | grep -v '^horovod')

# 5. The host-name shim the launcher preloads into Horovod's ranks on hosts whose name is on loopback
#    (launcher/gloo_hostname.c says why).
shim="$VENV/lib/gloo_hostname.so"
if [ ! -e "$shim" ] || [ launcher/gloo_hostname.c -nt "$shim" ]; then
  cc -shared -fPIC -O2 -o "$shim" launcher/gloo_hostname.c -ldl || die "building $shim failed"
fi

# 6. Horovod, from the cached wheel or built from source.
stamp="$VENV/.horovod-build"

check_build() {
  local out
  out=$("$VENV/bin/horovodrun" --check-build 2>&1) || return 1
  grep -q '\[X\] TensorFlow' <<<"$out" && grep -q '\[X\] Gloo' <<<"$out"
}

if [ "$(cat "$stamp" 2>/dev/null)" = "$key" ] && check_build; then
  say "horovod $hvd_version already built for this environment ($key)"
else
  if ! $cached; then
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
