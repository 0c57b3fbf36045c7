"""Paired timing on a noisy machine whose cores differ in speed: the two programs run in turn on the same core,
and the one that goes first alternates from round to round, so that a drift of the load favours neither."""
import os
import subprocess
import sys

from harness import REPO

CORE = min(os.sched_getaffinity(0))


def in_turn(commands, round_index):
    """Runs `commands` ({name: python's arguments}) one after another on CORE, in reverse order every other
    round; returns ({name: its standard output}, the name that went first)."""
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
