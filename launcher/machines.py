"""Where a run's tasks go, as one object of one of three kinds: this machine's loopback (no root), machines emulated
on shaped links (root), or real hosts over ssh. Each kind knows its launcher flags, where the workers go, the cores
its machines have, how its links are priced and what a record and a table say of it; a fourth kind is a class."""
import dataclasses
import functools
import os

import harness
from harness import flags
from launcher import tasks
from launcher.starters import netns
from launcher.starters.ssh import Ssh

CORES = len(os.sched_getaffinity(0))  # this machine's, which loopback's and the emulated machines' tasks share


@dataclasses.dataclass(frozen=True)
class Machines:
    """What every kind answers; as given here, this machine's loopback's."""
    cores: int = CORES
    shared_cores: int = CORES
    name = "loopback"  # in run names and tables
    said = "loopback"  # the report's word for the kind (reporting.load)
    link = None  # what prices the links: none
    priced = False
    real = False  # real hosts: links measured, each host's environment recorded
    latency_seconds = None  # added to every message by the model: none measured
    apart = False  # the machines have cores of their own
    slots = None  # the workers they hold: any number

    def __str__(self):
        return "loopback"

    def launcher_flags(self):
        """The launcher's flags that put a run's tasks here."""
        return []

    def bench_flags(self):
        """The launcher's flags of a bench run here: where, and what the bench counts there."""
        return self.launcher_flags()

    def count(self, workers):
        """The machines a run of `workers` workers uses."""
        return 1

    def check_workers(self, counts):
        """Raise a UsageError unless runs of each of `counts` workers fit these machines."""

    def default_ps(self, workers):
        """Parameter servers when none are asked for: one per machine (Parallax's setup), a worker's here."""
        return workers

    def worker_hosts(self, workers):
        """Where the launcher puts each worker (None: this machine)."""
        return [None] * workers

    def command(self, host, argv):
        """`argv` as run on `host`."""
        return argv

    def fetch(self, host, paths):
        """Copy what a run on `host` wrote at `paths` here, where this working directory is not shared with it."""

    def record(self):
        """The fields a bench record has of the machines."""
        return {"link": None, "emulated": False, "bits_per_second": None}

    def added_latency(self):
        """Whether the links' latency is in the model (added or measured)."""
        return False


@dataclasses.dataclass(frozen=True)
class Loopback(Machines):
    """Every task on this machine's loopback, unshaped: nothing is emulated, counted or priced."""


@dataclasses.dataclass(frozen=True)
class Emulated(Machines):
    """A network namespace per worker, joined by links shaped to `link` (netns.Link): a machine per worker, all on
    this machine's cores."""
    link: netns.Link = None
    said = "emulated"
    priced = True

    @property
    def name(self):
        return self.link.rate

    def __str__(self):
        return str(self.link)

    def launcher_flags(self):
        return [f"--net={self.link.rate}", *([f"--delay={self.link.delay}"] if self.link.delay else [])]

    def count(self, workers):
        return workers

    def placement(self, workers, ps):
        """(each machine's address, each worker's, each parameter server's), as the launcher places them."""
        addresses = netns.machine_addresses(workers)
        return (addresses, *netns.place(addresses, workers, ps))

    def record(self):
        return {"link": str(self.link), "emulated": True, "bits_per_second": self.link.bits_per_second}

    def added_latency(self):
        return bool(self.link.delay)


@dataclasses.dataclass(frozen=True)
class Hosts(Machines):
    """Real machines over ssh (`hosts`: ((host, slots), ...); `ssh_config`, an ssh_config(5) file reaching them);
    `link`, their measured links (bench.link_probe.HostLinks), prices them, and their cores are their own unless
    one kernel runs them all (`shared_cores`: then its cores; else 0)."""
    hosts: tuple = ()
    ssh_config: str = None
    link: object = None
    name = "hosts"
    said = "real"
    priced = True
    real = True

    def __str__(self):
        return str(self.link) if self.link else ", ".join(host for host, _ in self.hosts)

    @property
    def latency_seconds(self):
        return self.link.latency_seconds

    @property
    def apart(self):
        return not self.shared_cores

    @property
    def slots(self):
        return sum(slots for _, slots in self.hosts)

    def check_workers(self, counts):
        if not all(len(self.hosts) <= w <= self.slots for w in counts):
            raise harness.UsageError(f"--workers={','.join(map(str, counts))}: with --hosts, from {len(self.hosts)} "
                                     f"(a worker on each host) to {self.slots} (their slots)")

    def launcher_flags(self):
        return [f"--hosts={','.join(f'{host}:{slots}' for host, slots in self.hosts)}",
                *([f"--ssh_config={self.ssh_config}"] if self.ssh_config else [])]

    def bench_flags(self):
        return [*self.launcher_flags(), "--count_bytes"]

    def count(self, workers):
        return len(self.hosts)

    def default_ps(self, workers):
        return len(self.hosts)

    def worker_hosts(self, workers):
        return tasks.place(workers, 0, list(self.hosts))[0]

    @functools.cached_property
    def starter(self):
        """The launcher's starter reaching these hosts."""
        return Ssh(list(self.hosts), self.ssh_config)

    def command(self, host, argv):
        return self.starter.command(host, argv)

    def fetch(self, host, paths):
        if not self.starter.shares_workdir(host):
            self.starter.fetch(host, paths)

    def placement(self, workers, ps):
        return ([host for host, _ in self.hosts], *tasks.place(workers, ps, list(self.hosts)))

    def record(self):
        return {"link": str(self.link), "emulated": False, "bits_per_second": self.link.bits_per_second,
                "link_probe": self.link.record(), "latency_seconds": self.link.latency_seconds}

    def added_latency(self):
        return True


def kind_of(record):
    """The kind of machines a bench record ran on, from the fields their record() gave it."""
    return Hosts if record.get("link_probe") else Emulated if record.get("link") else Loopback


def define_flags(parser, net="one"):
    """--hosts and --ssh_config, and unless `net` is None, --net and --delay: where a run's tasks go, as every
    command that places them takes them. `net`: "one" rate, or "several" swept in turn (the bench's)."""
    flags.DEFINE_parsed("hosts", None, flags.host_slots, "host:slots,...: the tasks on these hosts over ssh (make "
                        "HOSTS=): the workers fill the slots in order, the parameter servers go round the hosts. "
                        "Default: every task on this machine", parser)
    flags.DEFINE_string("ssh_config", None, "an ssh_config(5) file for reaching the hosts (ssh -F)", flag_values=parser)
    if net == "one":
        flags.DEFINE_parsed("net", None, netns.Link.parse, "an emulated cluster: every machine a network namespace, "
                            "its link to one switch shaped to this rate in both directions (100mbit, 1gbit; needs "
                            "root). Default: loopback", parser)
    elif net == "several":
        flags.DEFINE_parsed("net", None, rates, "every machine's link rate; several (100mbit,1gbit) sweep each in "
                            "turn; loopback: every task on this machine's loopback, unshaped (no root needed). "
                            "Default: 100mbit as root, loopback otherwise", parser)
    if net:
        flags.DEFINE_parsed("delay", None, netns.Link.parse_delay, "with --net: added latency per link direction (tc "
                            "netem, e.g. 5ms), where the kernel has netem", parser)


def rates(text):
    """--net's rates, "100mbit,1gbit": each as netns.Link.parse takes it; "loopback" as None."""
    return [None if rate.strip() == "loopback" else netns.Link.parse(rate) for rate in text.split(",")]


def of(args):
    """The machines that --hosts, --ssh_config, --net and --delay name."""
    if args.delay and not args.net:
        raise harness.UsageError("--delay: only with --net")
    if args.hosts and args.net:
        raise harness.UsageError("--net: not with --hosts (it emulates the machines on this one)")
    if args.hosts:
        return Hosts(hosts=tuple(args.hosts), ssh_config=args.ssh_config)
    if args.net:
        return Emulated(link=dataclasses.replace(args.net, delay=args.delay or args.net.delay))
    return Loopback()
