"""Side-by-side timing on a shared, noisy machine: each of two loops in a child process pinned to a core of its
own, so that both see the same moment of the machine (the benchmarks swap the cores every round)."""
import os
import subprocess
import sys


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_pinned(core, command):
    """`python COMMAND...` (a script's path, or -m and a module of the repository) as a child pinned to `core`,
    its stdout a pipe."""
    return subprocess.Popen([sys.executable, *command], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": REPO}, preexec_fn=lambda: os.sched_setaffinity(0, {core}))
