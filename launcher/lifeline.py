"""`python launcher/lifeline.py COMMAND...`: run a task for a launcher elsewhere, and stop it at end of stdin or after
SILENCE_SECONDS ($LIFELINE_SILENCE_SECONDS) without a heartbeat, which catches a cut-off host sshd would not notice.
Standard library only: it runs without TensorFlow. docs/architecture.md ("The launcher") explains."""
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
import time

GRACE_SECONDS = 5
HEARTBEAT_SECONDS = 5
SILENCE_SECONDS = 30


def die_with_parent():
    """Linux: the calling process gets SIGKILL when its parent dies, even by kill -9 (a Popen preexec_fn)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def stop_all(tasks, grace_seconds=GRACE_SECONDS):
    """SIGTERM each task's process group, then SIGKILL what is left `grace_seconds` later: one grace for all."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for task in tasks:
            try:
                os.killpg(task.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_seconds
        for task in tasks:
            try:
                task.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        # The leaders may be gone while what they started is not: the SIGKILL round reaches those too.


def main(command):
    task = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)

    silence = float(os.environ.get("LIFELINE_SILENCE_SECONDS", SILENCE_SECONDS))

    def stop_when_the_launcher_is_gone():
        # os.read, unbuffered and holding no lock at exit; b"" at end of file: the launcher's side has closed.
        while select.select([0], [], [], silence)[0] and os.read(0, 4096):
            pass
        stop_all([task])
    threading.Thread(target=stop_when_the_launcher_is_gone, daemon=True).start()
    status = task.wait()
    return status if status >= 0 else 128 - status  # killed by a signal: the shell's convention


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
