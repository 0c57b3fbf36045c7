"""The links between real hosts, measured before make bench HOSTS= runs on them: for every ordered pair of hosts, a
TCP connection's round trip (small messages, one at a time) and then its rate (a stream for a few seconds), each
end run on its host through the launcher's starter (ssh, srun). docs/bench.md, "On your machines", explains it.

    python -m bench.link_probe --hosts=node1:1,node2:1        (prints each pair; make bench HOSTS= runs it first)
"""
import dataclasses
import itertools
import statistics
import subprocess
import sys

import harness
from harness import flags
from launcher import machines
from launcher.starters.ssh import Ssh

SECONDS = 3.0  # of the stream; its first fifth (TCP's slow start) is left out of the rate
PINGS = 20
# Beyond a segment's payload (TCP_MAXSEG, timestamps taken out) a frame carries TCP's 32 bytes with timestamps, IP's
# 20 and Ethernet's 14: the bytes an interface's counters (and a shaper) count.
FRAME_OVERHEAD = 32 + 20 + 14

# Run on the receiving host: print the port, echo the pings, then read the stream and print its rate's samples.
RECEIVER = """
import socket, sys, time
server = socket.socket()
server.bind(("", 0))
server.listen(1)
server.settimeout(60)
print(server.getsockname()[1], flush=True)
connection, _ = server.accept()
connection.settimeout(60)
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(int(sys.argv[1])):
    connection.sendall(connection.recv(1))
samples, total = [], 0
while chunk := connection.recv(1 << 20):
    total += len(chunk)
    samples.append((time.monotonic(), total))
start = samples[0][0] + (samples[-1][0] - samples[0][0]) / 5
at, before = next((t, n) for t, n in samples if t >= start)
print((samples[-1][1] - before) / (samples[-1][0] - at) * 8, flush=True)
connection.close()
"""

# Run on the sending host (argv: receiver, port, pings, seconds): the pings' median round trip and the segment size.
SENDER = """
import socket, statistics, sys, time
host, port, pings, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
connection = socket.create_connection((host, port), timeout=60)
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
trips = []
for _ in range(pings):
    start = time.monotonic()
    connection.sendall(b"x")
    connection.recv(1)
    trips.append(time.monotonic() - start)
block, end = bytes(1 << 16), time.monotonic() + seconds
while time.monotonic() < end:
    connection.sendall(block)
segment = connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
connection.shutdown(socket.SHUT_WR)
connection.recv(1)
print(statistics.median(trips), segment)
"""


@dataclasses.dataclass(frozen=True)
class Pair:
    """What one direction between two hosts carried: TCP's payload rate, the frames' rate, a median round trip."""
    source: str
    destination: str
    payload_bits_per_second: float
    frame_bits_per_second: float
    round_trip_seconds: float


@dataclasses.dataclass(frozen=True)
class HostLinks:
    """The measured links between `hosts`: the slowest direction's frame rate prices every link, as one rate
    prices an emulated cluster's."""
    hosts: tuple
    pairs: tuple

    @property
    def bits_per_second(self):
        return min(pair.frame_bits_per_second for pair in self.pairs)

    @property
    def latency_seconds(self):
        """One way: half the median round trip."""
        return statistics.median(pair.round_trip_seconds for pair in self.pairs) / 2

    @property
    def rate(self):
        return "hosts"

    @property
    def delay(self):
        """No latency is added: what the links have is measured (latency_seconds)."""
        return None

    def __str__(self):
        return f"{', '.join(self.hosts)}: measured {self.bits_per_second / 1e6:.1f} Mbit/s"

    def record(self):
        return [dataclasses.asdict(pair) for pair in self.pairs]


def run_on(starter, host, program, *args):
    """Start a Python `program` on `host`; its output read as lines."""
    return subprocess.Popen(starter.command(host, [sys.executable, "-c", program, *map(str, args)]),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def measure_pair(starter, source, destination, seconds=SECONDS, pings=PINGS):
    """One direction, source to destination; a host that fails is a UsageError naming both."""
    receiver = run_on(starter, destination, RECEIVER, pings)
    try:
        port = receiver.stdout.readline().strip()
        if not port:
            raise harness.UsageError(f"link probe: no receiver on {destination}: "
                                     f"{(receiver.stderr.read().strip().splitlines() or ['it exited'])[-1]}")
        sender = run_on(starter, source, SENDER, destination, port, pings, seconds)
        sent, failed = sender.communicate(timeout=60 + seconds)
        received = receiver.stdout.readline().strip()
        receiver.wait(timeout=60)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    if sender.returncode or not received:
        why = (failed.strip().splitlines() or [f"exit status {sender.returncode}"])[-1]
        raise harness.UsageError(f"link probe: {source} could not stream to {destination}: {why}")
    round_trip, segment = sent.split()
    payload = float(received)
    return Pair(source, destination, payload, payload * (int(segment) + FRAME_OVERHEAD) / int(segment),
                float(round_trip))


def measure(starter, hosts, seconds=SECONDS):
    """Every ordered pair of `hosts`, one at a time (two at once would share a link)."""
    return HostLinks(tuple(hosts), tuple(measure_pair(starter, a, b, seconds)
                                         for a, b in itertools.permutations(hosts, 2)))


def describe(links):
    lines = [f"{'from':>12s} {'to':>12s} {'TCP payload':>14s} {'frames':>14s} {'round trip':>11s}"]
    lines += [f"{p.source:>12s} {p.destination:>12s} {p.payload_bits_per_second / 1e6:9.1f} Mbit/s "
              f"{p.frame_bits_per_second / 1e6:9.1f} Mbit/s {p.round_trip_seconds * 1e3:8.3f} ms" for p in links.pairs]
    return "\n".join(lines)


def main():
    parser = flags.FlagSet("python -m bench.link_probe", __doc__)
    machines.define_flags(parser, net=None)  # two or more hosts
    args = flags.parse(parser)
    hosts = [host for host, _ in args.hosts or []]
    if len(set(hosts)) < 2:
        raise harness.UsageError("--hosts: two or more hosts, a link between each pair")
    print(describe(measure(Ssh(args.hosts, args.ssh_config), hosts)))
    return 0


if __name__ == "__main__":
    harness.main(main)
