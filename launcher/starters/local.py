"""Tasks as child processes of this machine, and the network namespace that keeps their servers private."""
import ctypes
import fcntl
import os
import random
import socket
import struct
import subprocess
import sys

from harness import environment
from launcher import lifeline, tasks


class LocalProcess:
    """A task as a local child process, in a process group of its own so that stopping it reaches all it started;
    it dies with the launcher, even one killed with -9. Workers spread over `machines` loopback addresses."""

    network_interface = None  # Horovod's ranks talk over the interface towards the first worker

    def __init__(self, machines=1):
        self.machines = machines
        self.given = set()  # ports handed out: TensorFlow binds every interface, so 127.0.0.1 and .2 share them

    @classmethod
    def from_flags(cls, args):
        isolate_network()
        return cls(args.machines)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Remove what the starter built for the run (namespaces, containers, networks): nothing here."""

    def place(self, num_workers, num_ps):
        return tasks.place(num_workers, num_ps, machines=self.machines)

    def byte_counter(self):
        """What counts each machine's link's bytes (netns.ByteCounter), or None: here no machine has a link."""
        return None

    def where(self, host):
        """Where a task on `host` runs, for a message about it ("" for this machine)."""
        return ""

    def start(self, task, stdin=subprocess.DEVNULL):
        return subprocess.Popen(task.argv, env={**os.environ, **task.env}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=stdin, start_new_session=True,
                                text=True, errors="replace", preexec_fn=lifeline.die_with_parent)

    def stop_all(self, processes, grace_seconds):
        lifeline.stop_all(processes, grace_seconds)

    def free_ports(self, host, count):
        """Ports free now and not given before, drawn below the ephemeral range: an outgoing connection (a task's
        gRPC client) could take one there before its task binds it."""
        candidates, ports = iter(random.sample(listening_ports(), k=len(listening_ports()))), []
        while len(ports) < count:
            port = next(candidates, None)
            if port is None:
                raise OSError(f"fewer than {count} free ports below the ephemeral range")
            if port in self.given:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("", port))  # every interface, as TensorFlow's servers bind
                    ports.append(port)
                except OSError:
                    pass
        self.given.update(ports)
        return ports

    def shares_workdir(self, host):
        return True

    def environment(self, host):
        """The machine and software a task on `host` runs on (environment.host()): here, this machine's."""
        return environment.host()

    def interface_on(self, host, address):
        """The remote.Interface `host` reaches `address` (this machine's) through, or None: this machine's own."""
        return None


def listening_ports():
    """The ports the launcher gives its tasks: from 10000 up to the ephemeral range (net.ipv4.ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            ephemeral_start = int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_start = 32768  # Linux's default
    return range(10000, ephemeral_start)


def isolate_network():
    """Move this process and its tasks into a network namespace with only a loopback; return whether it could
    (it needs root). TensorFlow's servers listen on every interface: this keeps them out of others' reach."""
    CLONE_NEWNET, SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x40000000, 0x8913, 0x8914, 0x1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        print(f"launch: note: no network namespace of its own ({os.strerror(ctypes.get_errno())}): the local "
              f"servers listen on every interface of this machine", file=sys.stderr, flush=True)
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:  # a new namespace's loopback starts down
        request = struct.pack("16sH14x", b"lo", 0)
        flags_now = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags_now | IFF_UP))
    return True
