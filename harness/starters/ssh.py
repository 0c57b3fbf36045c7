"""Tasks on other hosts, through a local ssh client, as horovodrun and mpirun start them."""
import dataclasses
import os
import shlex
import subprocess
import sys
import threading

from harness.starters.remote import OnHosts, heartbeat

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Ssh(OnHosts):
    """A task on its host, run by a local ssh client (BatchMode: keys, no passwords). The repository, its .venv
    and the working directory must be at the same paths on every host, as for mpirun. On the host the task
    runs under harness/lifeline.py, which stops it when the connection closes, so stopping the local ssh
    client stops the task. A host that drops off the network is noticed on both sides instead of waited for
    for ever: here by ssh's keep-alives (about 15 s), there by lifeline.py when the launcher's heartbeats stop
    (30 s)."""

    def __init__(self, hosts, config_file=None):
        super().__init__(hosts)
        self.ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
                    "-o", "ServerAliveCountMax=3", *(["-F", config_file] if config_file else [])]

    @classmethod
    def from_flags(cls, args):
        return cls(args.hosts, args.ssh_config)

    def command(self, host, argv, env=None):
        assignments = [f"{name}={value}" for name, value in (env or {}).items()]
        return [*self.ssh, host, f"cd {shlex.quote(os.getcwd())} && exec {shlex.join(['env', *assignments, *argv])}"]

    def start(self, task):
        argv = [sys.executable, os.path.join(REPO, "harness", "lifeline.py"), *task.argv]
        process = super().start(dataclasses.replace(task, argv=self.command(task.host, argv, task.env), env={}),
                                stdin=subprocess.PIPE)
        threading.Thread(target=heartbeat, args=(process,), daemon=True).start()
        return process
