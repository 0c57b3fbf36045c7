"""Shared by starters on other hosts: the heartbeat to a task's lifeline.py, and `OnHosts`, the base of ssh and srun."""
import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
import typing
import uuid

import harness
from harness import REPO, environment, events
from launcher import lifeline, tasks
from launcher.starters.local import LocalProcess


# The launcher's variables a task's behaviour depends on, handed to tasks on other hosts (ssh passes none, mpirun
# only what -x names); TF_CONFIG is not: a task's place in the cluster comes from the launcher.
FORWARDED = ("OMP_", "KMP_", "MKL_", "TF_CPP_", "HOROVOD_", "NCCL_", "LIFELINE_", "PYTHONHASHSEED")


def forwarded_environment():
    """The variables of this process that tasks on other hosts are given (FORWARDED)."""
    return {name: value for name, value in os.environ.items() if name.startswith(FORWARDED)}


def heartbeat(process):
    """Tell the task's lifeline.py that the launcher is alive, until the connection is gone."""
    while process.poll() is None:
        try:
            process.stdin.write("\n")
            process.stdin.flush()
        except (BrokenPipeError, ValueError):  # closed: the task is over or being stopped
            return
        time.sleep(lifeline.HEARTBEAT_SECONDS)


# Run on a host: `count` ports free there, below its ephemeral range (where an outgoing connection, such as a task's
# gRPC client, could take one before its task binds it; as local.listening_ports), then the token file's text.
PROBE = """
import os, random, socket, sys
count, token_file = int(sys.argv[1]), sys.argv[2]
try:
    ephemeral_start = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    ephemeral_start = 32768
ports, held = [], []
for port in random.sample(range(10000, ephemeral_start), ephemeral_start - 10000):
    if len(ports) == count:
        break
    held.append(socket.socket())
    try:
        held[-1].bind(("", port))
        ports.append(port)
    except OSError:
        pass
print(*ports)
print(open(token_file).read() if os.path.exists(token_file) else "")
"""


# Run on a host: its interface whose address the host reaches argv[1] from, that interface's network and address,
# and whether the host's own name resolves to loopback there (Debian's and Ubuntu's 127.0.1.1).
INTERFACE_PROBE = """
import fcntl, ipaddress, socket, struct, sys
route = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
route.connect((sys.argv[1], 9))  # UDP: nothing is sent, the kernel only picks the route
mine = route.getsockname()[0]
for _, name in socket.if_nameindex():
    request = struct.pack("256s", name.encode())
    try:  # SIOCGIFADDR and SIOCGIFNETMASK: the interface's IPv4 address and mask
        if socket.inet_ntoa(fcntl.ioctl(route, 0x8915, request)[20:24]) == mine:
            mask = socket.inet_ntoa(fcntl.ioctl(route, 0x891B, request)[20:24])
            try:
                own = ipaddress.ip_address(socket.gethostbyname(socket.gethostname())).is_loopback
            except OSError:
                own = False
            print(name, ipaddress.ip_interface(f"{mine}/{mask}").network, mine, int(own))
    except OSError:
        pass
"""


# Preloaded into Horovod's ranks on a host whose name resolves to loopback: Gloo then binds to LSTM_GLOO_HOSTNAME.
GLOO_HOSTNAME_SHIM = os.path.join(REPO, ".venv", "lib", "gloo_hostname.so")


class Interface(typing.NamedTuple):
    """A host's interface towards this machine, as INTERFACE_PROBE finds it."""
    name: str
    network: str
    address: str
    name_on_loopback: bool  # the host's own name resolves to loopback there


def address_towards(host):
    """(this machine's address on the route to `host`, (name, network) of its network interface)."""
    import psutil  # a dependency of Horovod's runner

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))  # UDP: no packet is sent, the kernel only picks the route
        address = probe.getsockname()[0]
    for interface, addresses in psutil.net_if_addrs().items():
        for a in addresses:
            if a.family == socket.AF_INET and a.address == address:
                return address, (interface, str(ipaddress.ip_interface(f"{address}/{a.netmask}").network))
    raise harness.UsageError(f"no network interface has {address}, the address towards {host}: "
                             f"name one with --network_interface")


def probe(command, host, count):
    """Return (`count` ports free on `host`, whether it sees a token file written here), by a probe run through
    `command` (argv -> its command line on `host`); a host where it fails is a UsageError naming it."""
    token = uuid.uuid4().hex
    marker = os.path.join(os.getcwd(), f".launch-probe-{token}")
    with open(marker, "w") as f:
        f.write(token)
    try:
        output = run_there(command, host, PROBE, str(count), marker)
    finally:
        os.remove(marker)
    ports, seen = (output.splitlines() + ["", ""])[:2]
    return [int(port) for port in ports.split()], seen.strip() == token


def run_there(command, host, program, *args):
    """The output of a Python `program` run on `host` through `command`; a failure is a UsageError naming the host."""
    result = subprocess.run(command([sys.executable, "-c", program, *args]), stdin=subprocess.DEVNULL,
                            capture_output=True, text=True)
    if result.returncode:
        why = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        raise harness.UsageError(f"host {host}: {'unreachable over ssh: ' if result.returncode == 255 else ''}"
                                 f"{why}")
    return result.stdout


class OnHosts(LocalProcess):
    """Tasks on the slots of `hosts` ([(host, slots)]), each started by a local client that `command` builds."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.shared = {}  # host: whether it sees this machine's working directory (found by the probe)

    def place(self, num_workers, num_ps):
        return tasks.place(num_workers, num_ps, self.hosts)

    def command(self, host, argv):
        raise NotImplementedError

    def where(self, host):
        return f" on {host}"

    def free_ports(self, host, count):
        """Ports free on `host` now; the probe also checks the host and whether it shares this working directory."""
        ports, self.shared[host] = probe(lambda argv: self.command(host, argv), host, count)
        return ports

    def environment(self, host):
        """environment.host() of `host`, by a probe run there."""
        return json.loads(run_there(lambda argv: self.command(host, argv), host, environment.PROBE, REPO))

    def interface_on(self, host, address):
        """The Interface `host` reaches `address` through, by a probe run there (None if none)."""
        found = run_there(lambda argv: self.command(host, argv), host, INTERFACE_PROBE, address).split()
        return Interface(*found[:3], found[3] == "1") if found else None

    def fetch(self, host, paths):
        """Copy `paths` (files or directories, absent ones skipped) from `host` to the same paths here."""
        from_root = [os.path.relpath(os.path.abspath(path), "/") for path in paths]
        sender = subprocess.Popen(self.command(host, ["tar", "-C", "/", "--ignore-failed-read", "-c", *from_root]),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        received = subprocess.run(["tar", "-C", "/", "-x"], stdin=sender.stdout, capture_output=True, text=True)
        if sender.wait() or received.returncode:
            raise harness.UsageError(f"copying {', '.join(paths)} back from {host}: "
                                     f"{received.stderr.strip() or f'tar exited {sender.returncode}'}")

    def shares_workdir(self, host):
        """Whether `host` sees this working directory, where the chief writes what verify and partition search read."""
        if host not in self.shared:
            self.free_ports(host, 0)
        return self.shared[host]


class HostByteCounter:
    """Each host's bytes over the measured steps (launch --count_bytes): the first worker on each host announces its
    host's interface counters after every step (events.host_bytes), and the chief's measured_steps events say which
    steps to difference. The interface is the one the host reaches this machine through; its counters include
    every frame's header, as an emulated switch's do. `asynchronous`: the other workers' steps are their own, so
    each other host's counters are those last seen when the chief's event arrives."""

    def __init__(self, starter, worker_hosts, asynchronous=False):
        self.hosts = [host for host, _ in starter.hosts]
        self.counting = {}  # host: the worker that counts its bytes
        for i, host in enumerate(worker_hosts):
            self.counting.setdefault(host, f"worker{i}")
        self.host_of = {task: host for host, task in self.counting.items()}
        self.interfaces = {host: starter.interface_on(host, address_towards(host)[0]) for host in self.counting}
        self.samples = {host: {} for host in self.counting}  # host: {after_step: (sent, received)}
        self.window = {}  # after_step: the chief's time.monotonic() then
        self.asynchronous = asynchronous
        self.last_seen = {}  # host: its latest (sent, received)
        self.seen_at_window = {}  # after_step: last_seen when the chief's event for it arrived

    def env(self, task):
        """The variable that makes `task` count its host's bytes, if it is the worker that does."""
        interface = self.interfaces.get(task.host)
        return {events.HOST_INTERFACE: interface[0]} if self.counting.get(task.host) == task.name and interface else {}

    def watch(self, task, line, running):
        event = events.parse(line)
        if not event:
            return
        if event["event"] == "host_bytes" and task in self.host_of:
            host = self.host_of[task]
            self.samples[host][event["after_step"]] = self.last_seen[host] = (event["sent"], event["received"])
        elif task == "worker0" and event["event"] in ("measured_steps_begin", "measured_steps_end"):
            self.window[event["after_step"]] = event["at"]
            self.seen_at_window[event["after_step"]] = dict(self.last_seen)

    def sample(self, host, step):
        """`host`'s counters after the chief's `step`, or None if never seen."""
        if self.asynchronous and self.counting[host] != "worker0":
            return self.seen_at_window.get(step, {}).get(host)
        return self.samples[host].get(step)

    def result(self, tasks):
        """The measured bytes per step of each host (None for a host without a worker), or None if the window or a
        host's counters at its ends were never seen."""
        if len(self.window) < 2:
            return None
        (first, begun), (last, ended) = sorted(self.window.items())
        if any(self.sample(host, step) is None for host in self.counting for step in (first, last)):
            return None
        steps = last - first

        def per_step(host, direction):
            if host not in self.counting:
                return None
            return (self.sample(host, last)[direction] - self.sample(host, first)[direction]) / steps
        return {"link": "hosts", "from_step": first, "to_step": last, "steps": steps, "seconds": ended - begun,
                "machines": [{"host": host, "interface": (self.interfaces.get(host) or (None,))[0],
                              "tasks": [t.name for t in tasks if t.host == host],
                              "sent_bytes_per_step": per_step(host, 0), "received_bytes_per_step": per_step(host, 1)}
                             for host in self.hosts]}
