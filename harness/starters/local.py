"""Tasks as child processes of this machine, and the network namespace that keeps their servers private."""
import ctypes
import fcntl
import os
import random
import socket
import struct
import subprocess
import sys

from harness import lifeline, tasks


class LocalProcess:
    """A task as a local child process, in a process group of its own so that stopping it reaches every
    process it started. It dies with the launcher, even when the launcher is killed with -9. The workers are
    spread in blocks over `machines` loopback addresses (tasks.place)."""

    network_interface = None  # Horovod's ranks talk over the interface towards the first worker

    def __init__(self, machines=1):
        self.machines = machines

    @classmethod
    def from_flags(cls, args):
        isolate_network()
        return cls(args.machines)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Removes what the starter built for the run (namespaces, containers, networks): nothing here."""

    def place(self, num_workers, num_ps):
        return tasks.place(num_workers, num_ps, machines=self.machines)

    def byte_counter(self):
        """What counts the bytes each machine's link carries (netns.ByteCounter), or None: machines without
        links of their own."""
        return None

    def start(self, task, stdin=subprocess.DEVNULL):
        return subprocess.Popen(task.argv, env={**os.environ, **task.env}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=stdin, start_new_session=True,
                                text=True, errors="replace", preexec_fn=lifeline.die_with_parent)

    def stop_all(self, processes, grace_seconds):
        lifeline.stop_all(processes, grace_seconds)

    def free_ports(self, host, count):
        """Ports free on this machine now; a task binds its port moments later. They are drawn below the
        kernel's ephemeral range: a port the OS hands out (port 0) could be given, in between, to an outgoing
        connection, the tasks' own gRPC clients among them ("Address already in use"); these never are."""
        candidates, ports = iter(random.sample(listening_ports(), k=len(listening_ports()))), []
        while len(ports) < count:
            port = next(candidates, None)
            if port is None:
                raise OSError(f"fewer than {count} free ports below the ephemeral range")
            with socket.socket() as sock:
                try:
                    sock.bind(("", port))  # every interface, as TensorFlow's servers bind
                    ports.append(port)
                except OSError:
                    pass
        return ports

    def shares_workdir(self, host):
        return True


def listening_ports():
    """The ports the launcher gives its tasks: from 10000 up to the start of the ephemeral range
    (net.ipv4.ip_local_port_range), which outgoing connections take theirs from."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            ephemeral_start = int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_start = 32768  # Linux's default
    return range(10000, ephemeral_start)


def isolate_network():
    """Moves this process, and so every task it starts, into a network namespace of its own whose only
    interface is a loopback interface. TensorFlow's gRPC server listens on every interface (0.0.0.0 is
    hard-coded, with no option), so this is what keeps a local run's servers out of reach of anything but the
    run itself. It needs CAP_SYS_ADMIN (root); without it, the launcher says so and stays on this machine's
    network. Returns whether the run is isolated."""
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
