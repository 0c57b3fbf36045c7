"""Tasks on other hosts, through a local ssh client, as horovodrun and mpirun start them."""
import dataclasses
import os
import shlex
import subprocess
import sys
import threading
import time
import uuid

import harness
from harness import lifeline
from harness.starters.local import LocalProcess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def heartbeat(process):
    """Tells the task's lifeline.py that the launcher is alive, until the connection is gone."""
    while process.poll() is None:
        try:
            process.stdin.write("\n")
            process.stdin.flush()
        except (BrokenPipeError, ValueError):  # closed: the task is over or being stopped
            return
        time.sleep(lifeline.HEARTBEAT_SECONDS)


PROBE = ("import os, socket, sys; s = [socket.socket() for _ in range(int(sys.argv[1]))]; "
         "[x.bind(('', 0)) for x in s]; print(*[x.getsockname()[1] for x in s]); "
         "print(open(sys.argv[2]).read() if os.path.exists(sys.argv[2]) else '')")


def probe(command, host, count):
    """(`count` ports free on `host` now, whether `host` sees this machine's working directory), by running a
    small Python program there through `command` (argv -> the command line that runs argv on `host`). A token
    file written here must be readable there. A host where it fails (unreachable, no working directory, no
    .venv) is a UsageError naming it."""
    token = uuid.uuid4().hex
    marker = os.path.join(os.getcwd(), f".launch-probe-{token}")
    with open(marker, "w") as f:
        f.write(token)
    try:
        result = subprocess.run(command([sys.executable, "-c", PROBE, str(count), marker]),
                                stdin=subprocess.DEVNULL, capture_output=True, text=True)
    finally:
        os.remove(marker)
    if result.returncode:
        why = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        raise harness.UsageError(f"host {host}: {'unreachable over ssh: ' if result.returncode == 255 else ''}"
                                 f"{why}")
    ports, seen = (result.stdout.splitlines() + ["", ""])[:2]
    return [int(port) for port in ports.split()], seen.strip() == token


class Ssh:
    """A task on its host, run by a local ssh client (BatchMode: keys, no passwords). The repository, its .venv
    and the working directory must be at the same paths on every host, as for mpirun. On the host the task
    runs under harness/lifeline.py, which stops it when the connection closes, so stopping the local ssh
    client stops the task. A host that drops off the network is noticed on both sides instead of waited for
    for ever: here by ssh's keep-alives (about 15 s), there by lifeline.py when the launcher's heartbeats stop
    (30 s)."""

    def __init__(self, config_file=None):
        self.ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
                    "-o", "ServerAliveCountMax=3", *(["-F", config_file] if config_file else [])]
        self.local = LocalProcess()
        self.shared = {}  # host: whether it sees this machine's working directory (found by the probe)

    def command(self, host, argv, env=None):
        assignments = [f"{name}={value}" for name, value in (env or {}).items()]
        return [*self.ssh, host, f"cd {shlex.quote(os.getcwd())} && exec {shlex.join(['env', *assignments, *argv])}"]

    def start(self, task):
        argv = [sys.executable, os.path.join(REPO, "harness", "lifeline.py"), *task.argv]
        process = self.local.start(dataclasses.replace(task, argv=self.command(task.host, argv, task.env), env={}),
                                   stdin=subprocess.PIPE)
        threading.Thread(target=heartbeat, args=(process,), daemon=True).start()
        return process

    def stop_all(self, processes, grace_seconds):
        self.local.stop_all(processes, grace_seconds)  # closes the connections: lifeline.py stops the tasks

    def free_ports(self, host, count):
        """Ports free on `host` now; also the check that the host answers over ssh and has the working directory
        and the .venv, and whether it shares this machine's working directory."""
        ports, self.shared[host] = probe(lambda argv: self.command(host, argv), host, count)
        return ports

    def shares_workdir(self, host):
        """Whether `host` sees this machine's working directory (a shared file system), where the chief writes
        the results and the checkpoint that verify and the partition search read back."""
        if host not in self.shared:
            self.free_ports(host, 0)
        return self.shared[host]
