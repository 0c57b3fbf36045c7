"""Every task in a container of its own (launch --docker=IMAGE; make docker-verify), as if on its own machine;
docs/architecture.md ("Containers") says how and why. `python -m launcher.starters.docker --image=IMAGE --name=NAME
-- COMMAND...` runs one command in one container without a network (verify's reference run)."""
import atexit
import dataclasses
import functools
import ipaddress
import json
import os
import random
import signal
import subprocess
import sys
import threading
import uuid

import harness
from harness import REPO, environment
from launcher import tasks
from launcher.starters.local import LocalProcess
from launcher.starters.remote import heartbeat

IMAGE_REPO = "/opt/lstm-dist"  # where docker/Dockerfile puts the repository, its .venv at IMAGE_REPO/.venv
PORT = 2222
LABEL = "lstm-dist.run"  # on every container and network of a run: how stopping a run finds them all
INTERFACE = "eth0"  # a container's interface on its network, which Horovod's ranks talk over


def _docker(*args):
    return subprocess.run(["docker", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True)


def check(image, paths=()):
    """UsageError unless a Docker engine answers and holds `image`, and every one of `paths` (a run's data,
    checkpoints, results) lies under the working directory, the one directory the containers see."""
    cwd = os.path.realpath(os.getcwd())
    for path in filter(None, paths):
        if os.path.commonpath([cwd, os.path.realpath(path)]) != cwd:
            raise harness.UsageError(f"--docker: {path} is outside the working directory {cwd}, the only "
                                     f"directory the containers see")
    try:
        engine = _docker("version", "--format", "{{.Server.Version}}")
    except FileNotFoundError:
        raise harness.UsageError("--docker: no docker command: install Docker (bash docker/engine.sh start)")
    if engine.returncode:
        why = (engine.stderr.strip().splitlines() or ["no answer"])[-1]
        raise harness.UsageError(f"--docker: no Docker engine answers ({why}): bash docker/engine.sh start")
    if _docker("image", "inspect", image).returncode:
        raise harness.UsageError(f"--docker: no image {image} in the engine: make docker-build DOCKER_IMAGE={image}")


def in_image(argv):
    """`argv` as it runs in the image: this Python is the image's, this repository's files are the image's."""
    return ["python" if arg == sys.executable else
            IMAGE_REPO + arg[len(REPO):] if arg == REPO or arg.startswith(REPO + os.sep) else arg for arg in argv]


class Docker(LocalProcess):
    """A task as a container of its own; `place` first, for tasks that need a network."""

    network_interface = INTERFACE

    def __init__(self, image):
        self.image = image
        self.run = f"lstm-dist-{os.getpid()}-{uuid.uuid4().hex[:6]}"  # names the containers and the network
        self.network = None
        atexit.register(self.close)
        # kill (SIGTERM) must tear a run down as Ctrl-C does, or its containers and network would stay behind.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.default_int_handler)

    @classmethod
    def from_flags(cls, args):
        return cls(args.docker)

    def place(self, num_workers, num_ps):
        """(worker addresses, ps addresses) on the run's new network, fixed before any task starts: a PS
        cluster is told every address up front. The gateway, .1, is this machine (Horovod's rendezvous)."""
        subnet = self._create_network()
        addresses = [str(address) for address in subnet.hosts()][1:1 + num_workers + num_ps]
        return addresses[:num_workers], addresses[num_workers:]

    def _create_network(self):
        """A /24 in 10.213.0.0/16 that no other network of the engine uses: the engine refuses overlapping ones."""
        first = random.randrange(256)
        for i in range(256):
            subnet = ipaddress.ip_network(f"10.213.{(first + i) % 256}.0/24")
            created = _docker("network", "create", "--driver=bridge", "--internal", f"--subnet={subnet}",
                              f"--gateway={next(subnet.hosts())}", f"--label={LABEL}={self.run}", self.run)
            if not created.returncode:
                self.network = self.run
                return subnet
            if "overlap" not in created.stderr:
                raise harness.UsageError(f"--docker: cannot create a network: {created.stderr.strip()}")
        raise harness.UsageError("--docker: every /24 of 10.213.0.0/16 is taken by another network")

    def command(self, task):
        """The `docker run` command line of `task`: the working directory at its own path, so that results land
        here; the user's uid with no capabilities, so that even root touches nothing it does not own; and
        lifeline.py on the client's stdin, so that the task stops when the client dies."""
        cwd = os.getcwd()
        network = ["--network", self.network, "--ip", task.host] if self.network else ["--network", "none"]
        return ["docker", "run", "--rm", "--interactive", "--init", f"--name={self.run}-{task.name}",
                f"--hostname={task.name}", f"--label={LABEL}={self.run}", *network,
                f"--user={os.getuid()}:{os.getgid()}", "--cap-drop=ALL", "--security-opt=no-new-privileges",
                f"--volume={cwd}:{cwd}", f"--workdir={cwd}", "--env=HOME=/tmp",
                *[f"--env={name}={value}" for name, value in task.env.items()], self.image,
                "python", f"{IMAGE_REPO}/launcher/lifeline.py", *in_image(task.argv)]

    def start(self, task):
        process = super().start(dataclasses.replace(task, argv=self.command(task), env={}), stdin=subprocess.PIPE)
        threading.Thread(target=heartbeat, args=(process,), daemon=True).start()
        return process

    def stop_all(self, processes, grace_seconds):
        """Stop the `docker run` clients (each forwards SIGTERM to its container), then force-remove what is left."""
        super().stop_all(processes, grace_seconds)
        self._remove_containers()

    def _remove_containers(self):
        listed = _docker("ps", "--all", "--quiet", f"--filter=label={LABEL}={self.run}").stdout.split()
        if listed:
            _docker("rm", "--force", *listed)

    def close(self):
        """Removes the run's containers and network; at exit too, whatever way the launcher ends."""
        self._remove_containers()
        if self.network:
            _docker("network", "rm", self.network)
            self.network = None

    @functools.cached_property
    def _environment(self):
        probe = _docker("run", "--rm", "--network=none", self.image, *in_image([sys.executable, "-c", environment.PROBE,
                                                                                REPO]))
        return json.loads(probe.stdout) if probe.returncode == 0 else {"error": probe.stderr.strip()[-300:]}

    def environment(self, host):
        """environment.host() in a container of the image, once for all: this machine's hardware, the image's
        software."""
        return self._environment

    def free_ports(self, host, count):
        """Each task has a container, so a network namespace, of its own: the same ports are free in every one."""
        return list(range(PORT, PORT + count))


def main():
    """Run COMMAND in one container without a network, its output prefixed by NAME; exit with its status."""
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    options = dict(arg[2:].split("=", 1) for arg in argv[:split] if arg.startswith("--") and "=" in arg)
    if set(options) != {"image", "name"} or split != 2 or split + 1 >= len(argv):
        raise harness.UsageError("usage: python -m launcher.starters.docker --image=IMAGE --name=NAME -- COMMAND...")
    check(options["image"])
    with Docker(options["image"]) as starter:
        return tasks.run_tasks([tasks.Task(options["name"], argv[split + 1:], {"PYTHONUNBUFFERED": "1"})], starter)


if __name__ == "__main__":
    harness.main(main)
