"""Paired timing on a shared, noisy machine whose cores differ in speed (by up to 30% here): the two programs
compared run in turn on the same core, never one core against the other, and the one that goes first
alternates from round to round, so that a drift of the machine's load favours neither."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = min(os.sched_getaffinity(0))


def in_turn(commands, round_index):
    """Runs each of `commands` ({name: arguments of python: a script's path, or -m and a module of the
    repository}) to its end, one after another, pinned to CORE; the first is the other one every other round.
    Returns ({name: its standard output}, the name that went first)."""
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
