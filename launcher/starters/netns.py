"""An emulated cluster (--net): a network namespace per machine, joined to a switch by links shaped as Mininet's
TCLink shapes them. docs/bench.md, "The emulated cluster", explains it."""
import concurrent.futures
import ctypes
import dataclasses
import ipaddress
import os
import re
import signal
import subprocess
import sys

import harness
from harness import events
from launcher import lifeline
from launcher.starters.local import LocalProcess

PREFIX = "lstmnet"
INTERFACE = "eth0"  # every machine's end of its link; Horovod's ranks talk over it
SWITCH_ADDRESS = "198.19.255.254"  # the launcher, in the switch's namespace (Horovod's rendezvous runs there)
FIRST_MACHINE = ipaddress.ip_address("198.18.0.1")  # RFC 2544's benchmark range: no real network's
PREFIX_LENGTH = 15
CLONE_NEWNET, CLONE_NEWUTS = 0x40000000, 0x04000000
HZ = 250  # this kernel's timer frequency: a token bucket must hold at least one tick's worth of bytes


def ip(*args, namespace=None):
    """Run `ip [-n namespace] args`; a failure is bad input or environment, reported in one line."""
    command = ["ip", *(["-n", namespace] if namespace else []), *args]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise harness.UsageError(f"{' '.join(command)}: {result.stderr.strip() or 'failed'}")
    return result.stdout


@dataclasses.dataclass(frozen=True)
class Link:
    """One machine's link: `bits_per_second` each way and, where the kernel has netem, `delay` (e.g. "5ms")."""
    bits_per_second: int
    delay: str = None

    UNITS = {"kbit": 10**3, "mbit": 10**6, "gbit": 10**9}

    @classmethod
    def parse(cls, rate, delay=None):
        """From tc's notation: "100mbit", "1gbit", "500kbit"; raises ValueError naming the problem."""
        match = re.fullmatch(r"(\d+(?:\.\d+)?)(kbit|mbit|gbit)", rate.strip().lower())
        if not match or float(match[1]) <= 0:
            raise ValueError(f"expected a rate such as 100mbit or 1gbit, got {rate!r}")
        return cls(int(float(match[1]) * cls.UNITS[match[2]]), delay)

    @staticmethod
    def parse_delay(text):
        """A latency in tc's notation: "5ms", "200us", "0.5s"; raises ValueError naming the problem."""
        match = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms|s)", text.strip().lower())
        if not match or float(match[1]) <= 0:
            raise ValueError(f"expected a latency such as 5ms or 200us, got {text!r}")
        return text.strip().lower()

    @property
    def rate(self):
        """The rate in tc's notation, in the largest unit that divides it ("100mbit")."""
        name, unit = next(((n, u) for n, u in reversed(self.UNITS.items()) if self.bits_per_second % u == 0),
                          ("bit", 1))
        return f"{self.bits_per_second // unit}{name}"

    def __str__(self):
        return self.rate + (f" delay {self.delay}" if self.delay else "")

    def shape(self, device, namespace):
        """Limit what `device` sends: an htb class at the rate, a bucket of 10 ms of traffic (at least a timer
        tick's and Mininet's 15 kB), netem below it for a delay."""
        bucket = max(15_000, self.bits_per_second // 8 // 100, self.bits_per_second // 8 // HZ)
        rate = self.rate
        tc(namespace, "qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "1")
        tc(namespace, "class", "add", "dev", device, "parent", "1:", "classid", "1:1", "htb", "rate", rate, "ceil",
           rate, "burst", str(bucket), "cburst", str(bucket), "quantum", "60000")
        if self.delay:
            result = subprocess.run(["ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", device,
                                     "parent", "1:1", "handle", "10:", "netem", "delay", self.delay],
                                    capture_output=True, text=True)
            if result.returncode:
                raise harness.UsageError(f"--delay={self.delay}: this kernel cannot add latency (tc netem: "
                                         f"{result.stderr.strip().splitlines()[0] if result.stderr else 'failed'}); "
                                         f"links are rate-shaped only")


def tc(namespace, *args):
    result = subprocess.run(["ip", "netns", "exec", namespace, "tc", *args], capture_output=True, text=True)
    if result.returncode:
        raise harness.UsageError(f"tc {' '.join(args)}: {result.stderr.strip() or 'failed'}")


def machine_addresses(machines):
    return [str(FIRST_MACHINE + i) for i in range(machines)]


def place(addresses, num_workers, num_ps, separate_ps=False):
    """(address of each worker, of each parameter server): workers in blocks over the machines, parameter
    servers round them (Parallax's one per machine) or, with `separate_ps`, on the last `num_ps` machines."""
    worker_machines = len(addresses) - num_ps if separate_ps else len(addresses)
    workers = [addresses[i * worker_machines // num_workers] for i in range(num_workers)]
    servers = [addresses[worker_machines + i if separate_ps else i % len(addresses)] for i in range(num_ps)]
    return workers, servers


class EmulatedCluster:
    """`machines` namespaces joined to a switch by links like `link` (None: unshaped); also a context manager."""

    def __init__(self, machines, link):
        self.machines, self.link = machines, link
        self.name = f"{PREFIX}-{os.getpid()}"
        self.switch = f"{self.name}-switch"
        self.namespaces = [f"{self.name}-m{i}" for i in range(machines)]
        self.addresses = machine_addresses(machines)
        self.devices = None  # the switch's /proc/net/dev, open: the chief reads it (events.switch_ports)

    def __enter__(self):
        return self.build()

    def build(self):
        if os.geteuid() != 0:
            raise harness.UsageError("--net: an emulated cluster needs root (network namespaces, veth pairs, tc)")
        remove_left_behind()
        try:
            self._build()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc):
        self.remove()

    def _build(self):
        ip("netns", "add", self.switch)
        ip("link", "set", "lo", "up", namespace=self.switch)
        ip("link", "add", "switch", "type", "bridge", namespace=self.switch)
        ip("addr", "add", f"{SWITCH_ADDRESS}/{PREFIX_LENGTH}", "dev", "switch", namespace=self.switch)
        ip("link", "set", "switch", "up", namespace=self.switch)
        for i, (namespace, address) in enumerate(zip(self.namespaces, self.addresses)):
            ip("netns", "add", namespace)
            ip("link", "set", "lo", "up", namespace=namespace)
            # Both ends are created where they live: no interface of this run ever appears outside its namespaces.
            ip("link", "add", f"m{i}", "type", "veth", "peer", "name", INTERFACE, "netns", namespace,
               namespace=self.switch)
            ip("link", "set", f"m{i}", "master", "switch", namespace=self.switch)
            ip("addr", "add", f"{address}/{PREFIX_LENGTH}", "dev", INTERFACE, namespace=namespace)
            ip("link", "set", INTERFACE, "up", namespace=namespace)
            ip("link", "set", f"m{i}", "up", namespace=self.switch)
            if self.link:  # None: unshaped (bench/costs.py measures what the protocols themselves carry)
                self.link.shape(INTERFACE, namespace)   # what the machine sends
                self.link.shape(f"m{i}", self.switch)   # what it receives
        self.devices = _open_in(self.switch, "/proc/thread-self/net/dev")

    def remove(self):
        if self.devices is not None:
            os.close(self.devices)
            self.devices = None
        _remove([*self.namespaces, self.switch])

    def namespace_of(self, address):
        return self.namespaces[self.addresses.index(address)]

    def join_switch(self):
        """Move this thread (and those it starts) into the switch's namespace, where the machines reach the
        launcher's Horovod rendezvous at SWITCH_ADDRESS."""
        _enter(f"/run/netns/{self.switch}")

    def machine_counters(self, ports):
        """[(bytes sent, bytes received)] of each machine's link, headers included, from the switch's `ports`
        (events.read_ports): what its port received and sent."""
        return [tuple(ports[f"m{i}"]) for i in range(self.machines)]


def _open_in(namespace, path):
    """Open `path` from inside `namespace`: a /proc/net file stays that namespace's however it is read later."""
    def opener():
        _enter(f"/run/netns/{namespace}")
        return os.open(path, os.O_RDONLY)
    with concurrent.futures.ThreadPoolExecutor(1) as thread:  # its namespace dies with it
        return thread.submit(opener).result()


def _enter(path):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def _remove(namespaces):
    """Kill whatever still runs in `namespaces` and delete them (their veth pairs go with them)."""
    existing = set(_our_namespaces())
    for namespace in namespaces:
        if namespace not in existing:
            continue
        for pid in subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                                  text=True).stdout.split():
            if int(pid) == os.getpid():  # the launcher itself, in the switch's namespace
                continue
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)


def _our_namespaces():
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(PREFIX + "-")]


def left_behind():
    """Our namespaces whose launcher no longer runs (killed with -9)."""
    return [name for name in _our_namespaces() if not os.path.exists(f"/proc/{name.split('-')[1]}")]


def remove_left_behind():
    """Remove, and name, the namespaces of launchers that no longer run."""
    owners = {}
    for namespace in left_behind():
        owners.setdefault(namespace.split("-")[1], []).append(namespace)
    for pid, namespaces in owners.items():
        _remove(namespaces)
        print(f"launch: removed {len(namespaces)} network namespaces left by launcher {pid}, which no longer runs: "
              f"{', '.join(namespaces)}", file=sys.stderr, flush=True)


class NetnsProcess(LocalProcess):
    """A task in its machine's namespace, with the machine's address as host name: Gloo finds its address from it."""

    network_interface = INTERFACE

    def __init__(self, cluster, separate_ps=False):
        self.cluster, self.separate_ps = cluster, separate_ps
        self.next_port = {}

    @classmethod
    def from_flags(cls, args):
        """Build the cluster (--machines, plus one per server with --separate_ps) and join its switch."""
        # SIGTERM must unwind like Ctrl-C, through the tasks' stop and the cluster's removal.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        cluster = EmulatedCluster(args.machines + args.ps * args.separate_ps, args.net).build()
        try:
            cluster.join_switch()
        except BaseException:
            cluster.remove()
            raise
        print(f"launch: {cluster.machines} machines ({', '.join(cluster.addresses)}), links of {args.net}"
              f"{'' if args.net.delay else ' (no added latency: --delay, where the kernel has netem)'}",
              file=sys.stderr, flush=True)
        return cls(cluster, args.separate_ps)

    def close(self):
        self.cluster.remove()

    def place(self, num_workers, num_ps):
        return place(self.cluster.addresses, num_workers, num_ps, self.separate_ps)

    def byte_counter(self):
        return ByteCounter(self.cluster)

    def start(self, task, stdin=subprocess.DEVNULL):
        namespace = f"/run/netns/{self.cluster.namespace_of(task.host)}"
        hostname = task.host.encode()

        def in_machine():
            _enter(namespace)
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(CLONE_NEWUTS) != 0 or libc.sethostname(hostname, len(hostname)) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUTS) or sethostname")
            lifeline.die_with_parent()
        return subprocess.Popen(task.argv, env={**os.environ, **task.env, events.PORTS_FD: str(self.cluster.devices)},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=stdin, start_new_session=True,
                                text=True, errors="replace", preexec_fn=in_machine, pass_fds=(self.cluster.devices,))

    def free_ports(self, host, count):
        """Ports in order: a machine's namespace is new and holds only this run's tasks."""
        first = self.next_port.get(host, 20000)
        self.next_port[host] = first + count
        return list(range(first, first + count))


class ByteCounter:
    """Each machine's bytes over the measured steps, from the switch's counters the chief reads as it announces
    their start and end: both at the same point of a step, so the difference covers whole steps."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.samples = {}  # step: (announced at, each machine's counters)

    def env(self, task):
        """Nothing: the chief reads the switch's counters through the descriptor every task inherits."""
        return {}

    def watch(self, task, line, running):
        event = events.parse(line) if task == "worker0" else None
        if event and event["event"] in ("measured_steps_begin", "measured_steps_end") and event.get("ports"):
            self.samples[event["after_step"]] = (event["at"], self.cluster.machine_counters(event["ports"]))

    def result(self, tasks):
        """The measured bytes per step of each machine, or None if the window was never seen."""
        if len(self.samples) < 2:
            return None
        (first, (begun, before)), (last, (ended, after)) = sorted(self.samples.items())
        steps = last - first
        return {
            "link": str(self.cluster.link), "bits_per_second": self.cluster.link.bits_per_second,
            "delay": self.cluster.link.delay, "from_step": first, "to_step": last, "steps": steps,
            "seconds": ended - begun,
            "machines": [{"namespace": namespace, "address": address,
                          "tasks": [t.name for t in tasks if t.host == address],
                          "sent_bytes_per_step": (a[0] - b[0]) / steps,
                          "received_bytes_per_step": (a[1] - b[1]) / steps}
                         for namespace, address, b, a in zip(self.cluster.namespaces, self.cluster.addresses,
                                                             before, after)],
        }
