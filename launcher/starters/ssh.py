"""Tasks on other hosts, through a local ssh client, as horovodrun and mpirun start them."""
import dataclasses
import os
import shlex
import socket
import subprocess
import sys
import threading

from harness import REPO
from launcher.starters.remote import OnHosts, forwarded_environment, heartbeat


class Ssh(OnHosts):
    """A task on its host, run by a local ssh client (keys, no passwords; docs/cluster.md). It runs under
    lifeline.py, so a closed connection stops it; here, ssh's keep-alives notice a host gone off the network.
    A host named as this machine names itself is this machine: its tasks start here, without ssh or sshd."""

    def __init__(self, hosts, config_file=None):
        super().__init__(hosts)
        self.ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
                    "-o", "ServerAliveCountMax=3", *(["-F", config_file] if config_file else [])]
        self.itself = {socket.gethostname(), socket.getfqdn()}

    @classmethod
    def from_flags(cls, args):
        return cls(args.hosts, args.ssh_config)

    def command(self, host, argv, env=None):
        assignments = [f"{name}={value}" for name, value in (env or {}).items()]
        if host in self.itself:  # (in this working directory already)
            return ["env", *assignments, *argv]
        return [*self.ssh, host, f"cd {shlex.quote(os.getcwd())} && exec {shlex.join(['env', *assignments, *argv])}"]

    def start(self, task):
        argv = [sys.executable, os.path.join(REPO, "launcher", "lifeline.py"), *task.argv]
        process = super().start(dataclasses.replace(task, argv=self.command(
            task.host, argv, {**forwarded_environment(), **task.env}), env={}), stdin=subprocess.PIPE)
        threading.Thread(target=heartbeat, args=(process,), daemon=True).start()
        return process
