"""Paired timing on a noisy machine: programs take turns on one core, the first alternating, so drift favours none."""
import os
import subprocess
import sys

from harness import REPO

CORE = min(os.sched_getaffinity(0))


def in_turn(commands, round_index):
    """Run `commands` ({name: python's arguments}) in turn on CORE, reversed every other round; return
    ({name: its stdout}, the name that went first)."""
    order = list(commands) if round_index % 2 == 0 else list(commands)[::-1]
    outputs = {}
    for name in order:
        process = subprocess.Popen([sys.executable, *commands[name]], stdout=subprocess.PIPE, text=True,
                                   env={**os.environ, "PYTHONPATH": REPO},
                                   preexec_fn=lambda: os.sched_setaffinity(0, {CORE}))
        outputs[name], _ = process.communicate()
        if process.returncode:
            raise SystemExit(f"round {round_index + 1} failed: {name} exited {process.returncode}")
    return outputs, order[0]
