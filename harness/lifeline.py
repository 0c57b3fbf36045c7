"""Runs a task on this host for a launcher elsewhere, and stops it when the launcher is gone.

    python harness/lifeline.py COMMAND...      (what harness.launch runs over ssh)

The launcher keeps this script's stdin open; when the launcher, its ssh client or the connection dies,
sshd closes it, and this script stops the task (SIGTERM to its process group, SIGKILL 5 s later). It exits
with the task's status. It imports only the standard library: it starts before, and without, TensorFlow.
"""
import ctypes
import os
import signal
import subprocess
import sys
import threading

GRACE_SECONDS = 5


def die_with_parent():
    """Linux: the calling process gets SIGKILL when its parent dies, even by kill -9 (a Popen preexec_fn)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def stop(task, grace_seconds=GRACE_SECONDS):
    """SIGTERM to the process group that `task` (a Popen) leads, SIGKILL to what is left after
    `grace_seconds`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(task.pid, sig)
        except ProcessLookupError:
            return
        try:
            task.wait(grace_seconds)
            # The leader is gone, but what it started may not be: the SIGKILL round reaches them.
        except subprocess.TimeoutExpired:
            pass


def main(command):
    task = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)

    def stop_when_the_launcher_is_gone():
        while os.read(0, 4096):  # b"" at end of file: the launcher's side has closed (unbuffered, no lock
            pass                 # held at exit)
        stop(task)
    threading.Thread(target=stop_when_the_launcher_is_gone, daemon=True).start()
    status = task.wait()
    return status if status >= 0 else 128 - status  # killed by a signal: the shell's convention


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
