"""Start the tasks of a distributed run, watch them and tear them down; every flag is checked before any starts.

    python -m launcher tf --workers=2 --ps=1 -- --config=small --steps=300     (make run-tf)
    python -m launcher horovod --workers=2 -- --config=small --steps=300       (make run-horovod)
    python -m launcher parallax --workers=2 --ps=1 --net=100mbit -- ...        (make run-parallax NET=100mbit)

Flags before "--" are the launcher's, after it the runner's. docs/cluster.md shows hosts, Slurm, MPI and Docker.
"""
import concurrent.futures
import dataclasses
import math
import os
import re
import socket
import sys

import harness
from harness import REPO, checkpoints, flags, models, results, runner_flags
from harness.checkpoints import Checkpoints
from harness.experiments import ARCHITECTURES
from launcher import machines, partition_search, preflight
from launcher.tasks import Fault, Task, run_tasks
from launcher.starters import docker, mpirun, netns
from launcher.starters.local import LocalProcess
from launcher.starters.remote import GLOO_HOSTNAME_SHIM, HostByteCounter, address_towards
from launcher.starters.srun import Srun
from launcher.starters.ssh import Ssh


# A collective whose peer died fails after this many seconds (Horovod's default); the launcher stops the others
# as soon as one dies, so this covers tasks started otherwise (horovodrun).
GLOO_TIMEOUT_SECONDS = 30


def gloo_timeout_seconds(runner_args, workers, link):
    """GLOO_TIMEOUT_SECONDS, plus on an emulated link (--net) twice the time of Horovod's first collective (rank
    0's broadcast of every variable and a slot), which on slow links outlasts the default."""
    if link is None:
        return GLOO_TIMEOUT_SECONDS
    model, config = models.from_flags(runner_args)
    variable_bytes = sum(4 * math.prod(v.shape) for v in models.declared_variables(model, config).values())
    broadcast = 2 * variable_bytes * (workers - 1) * 8 / link.bits_per_second
    return GLOO_TIMEOUT_SECONDS + math.ceil(2 * broadcast)


def horovod_environments(worker_hosts, network_interface=None, gloo_timeout=GLOO_TIMEOUT_SECONDS, starter=None):
    """Start Horovod's rendezvous in this process; return (each rank's environment as horovodrun --gloo sets it,
    rank r on worker_hosts[r]; stop_rendezvous). A rank talks over `network_interface`, else the interface its
    host routes this machine's address through (`starter.interface_on`), else the one this machine uses; on a host
    whose name resolves to loopback, Gloo's process sets bind to that interface's address (launcher/gloo_hostname.c)."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars
    from horovod.runner.http.http_server import RendezvousServer

    address, (interface, _), interfaces = host_interfaces(worker_hosts, starter)
    rendezvous = RendezvousServer()
    port = rendezvous.start()
    hosts = ",".join(f"{host}:{worker_hosts.count(host)}" for host in dict.fromkeys(worker_hosts))
    slots = get_host_assignments(parse_hosts(hosts), len(worker_hosts))
    rendezvous.init(slots)
    shared = {**create_run_env_vars(address, [network_interface or interface], port), "PYTHONUNBUFFERED": "1",
              "HOROVOD_GLOO_TIMEOUT_SECONDS": str(gloo_timeout)}
    def routable(found):  # the shim, where the host's name is on loopback
        return {"LD_PRELOAD": GLOO_HOSTNAME_SHIM, "LSTM_GLOO_HOSTNAME": found.address} \
            if found and found.name_on_loopback else {}
    return [{k: str(v) for k, v in {**shared, **create_slot_env_vars(slot),
                                    "HOROVOD_GLOO_IFACE": network_interface or (interfaces[slot.hostname] or
                                                                                (interface,))[0],
                                    **routable(interfaces[slot.hostname])}.items()}
            for slot in slots], rendezvous.stop


def host_interfaces(worker_hosts, starter=None):
    """(this machine's address towards the first worker, (name, network) of its interface, {host: the
    remote.Interface that host reaches it through, None for this machine}): each host names its own interfaces."""
    address, interface = address_towards(worker_hosts[0])
    return address, interface, {host: starter and starter.interface_on(host, address)
                                for host in dict.fromkeys(worker_hosts)}


def mpi_networks(worker_hosts, network_interface=None, starter=None):
    """What mpirun's ranks and daemons are to talk over: `network_interface`, else the networks (a name may differ
    from host to host) of every host's interface and this machine's, where a rank is on another host; else none."""
    if network_interface:
        return [network_interface]
    _, (_, network), interfaces = host_interfaces(worker_hosts, starter)
    return sorted({network, *(found[1] for found in interfaces.values() if found)}) if any(interfaces.values()) \
        else []


def parameter_server_tasks(script, runner_flags, ps_addresses, worker_addresses):
    """The tasks ps0.. and worker0.. of a parameter-server runner, each told the cluster and its place in it."""
    cluster = [f"--ps_hosts={','.join(ps_addresses)}", f"--worker_hosts={','.join(worker_addresses)}"]
    return [Task(f"{job}{i}", [sys.executable, os.path.join(REPO, script), f"--job_name={job}", f"--task_index={i}",
                               *cluster, *runner_flags], {"PYTHONUNBUFFERED": "1"}, address.rsplit(":", 1)[0])
            for job, addresses in (("ps", ps_addresses), ("worker", worker_addresses))
            for i, address in enumerate(addresses)]


def with_ports(ps_hosts, worker_hosts, starter):
    """(host:port of each parameter server, of each worker); a host's free ports are drawn at once so none repeats."""
    hosts = ps_hosts + worker_hosts
    free = {host: starter.free_ports(host, hosts.count(host)) for host in dict.fromkeys(hosts)}
    addresses = [f"{host}:{free[host].pop()}" for host in hosts]
    return addresses[:len(ps_hosts)], addresses[len(ps_hosts):]


def launch(architecture, worker_hosts, ps_hosts, runner_flags, starter, network_interface=None, watch=None,
           mpi=False, gloo_timeout=GLOO_TIMEOUT_SECONDS, fault=None, counter=None):
    """Run one job of `architecture` (an experiments.Architecture) with `starter`; return (exit status, tasks).
    `mpi`: one local mpirun starts all; `fault`: a tasks.Fault, `counter` a byte counter, which `watch` is to be
    given the lines for."""
    script = architecture.script
    runner_flags = [*runner_flags, "--events"]  # the chief's @event lines, which run_tasks reads and keeps apart
    if mpi:
        tasks = [Task("mpirun", mpirun.command(worker_hosts, [sys.executable, os.path.join(REPO, script),
                                                               *runner_flags],
                                               mpi_networks(worker_hosts, network_interface, starter)),
                      untag=mpirun.untag)]
        return run_tasks(tasks, LocalProcess(), watch=watch), tasks
    if not architecture.parameter_servers:
        tasks = [Task(f"worker{r}", [sys.executable, os.path.join(REPO, script), *runner_flags], host=host)
                 for r, host in enumerate(worker_hosts)]
    else:
        tasks = parameter_server_tasks(script, runner_flags, *with_ports(ps_hosts, worker_hosts, starter))
    stop_rendezvous = None
    if architecture.horovod_ranks:
        environments, stop_rendezvous = horovod_environments(worker_hosts, network_interface, gloo_timeout, starter)
        for task, environment in zip([t for t in tasks if t.name.startswith("worker")], environments):
            task.env.update(environment)
    for task in tasks:
        task.env.update({**(fault.env(task.name) if fault else {}), **(counter.env(task) if counter else {})})
    try:
        return run_tasks(tasks, starter, watch=watch, poll=fault and fault.poll), tasks
    finally:
        if stop_rendezvous:
            stop_rendezvous()


# A launcher flag, the flags it cannot be combined with, and why.
CONFLICTS = [
    ("net", ("hosts", "slurm"), "it emulates the machines on this one"),
    ("machines", ("hosts", "slurm"), "the hosts are the machines"),
    ("hosts", ("slurm",), "the allocation's nodes are the hosts"),
    ("docker", ("hosts", "slurm", "mpi", "net", "machines"), "each task is a machine"),
    ("ssh_config", ("mpi",), "mpirun reaches the hosts with its own ssh"),
    ("mpi", ("net",), "mpirun starts the ranks on this machine's network"),
    ("count_bytes", ("mpi",), "mpirun starts the ranks, not the launcher"),
]


def launcher_flags():
    parser = flags.FlagSet("python -m launcher ARCHITECTURE", __doc__)
    flags.DEFINE_integer("workers", 2, "worker processes", lower_bound=1, flag_values=parser)
    flags.DEFINE_integer("ps", 1, "parameter-server tasks (tf, parallax)", lower_bound=1, flag_values=parser)
    machines.define_flags(parser)
    flags.DEFINE_string("network_interface", None, "the interface Horovod's ranks talk over (default: this "
                        "machine's towards the first host)", flag_values=parser)
    flags.DEFINE_integer("machines", None, "without --hosts: the machines the workers are spread over, in blocks; "
                         "on loopback (default 1) addresses 127.0.0.1, 127.0.0.2..., with --net namespaces (default: "
                         "one per worker)", lower_bound=1, flag_values=parser)
    flags.DEFINE_boolean("separate_ps", False, "with --net: parameter servers on machines of their own (default: "
                         "round the workers' machines, one per machine when --ps equals the machines)",
                         flag_values=parser)
    flags.DEFINE_boolean("slurm", False, "start the tasks as Slurm job steps (srun) on the nodes of the allocation "
                         "this runs in (sbatch, salloc): the allocation's task slots are the hosts' slots",
                         flag_values=parser)
    flags.DEFINE_boolean("mpi", False, "horovod: mpirun starts the ranks (Horovod's MPI controller) instead of the "
                         "launcher's Gloo rendezvous", flag_values=parser)
    flags.DEFINE_string("docker", None, "IMAGE: every task in a container of its own from this image (make "
                        "docker-build), on a bridge network of the run's own", flag_values=parser)
    flags.DEFINE_parsed("fault", None, parse_fault, "a crash on purpose, the resume tests', verify --faults' and "
                        "make soak's: TASK:STEP (ps0:17) kills that task with SIGKILL once the chief has announced "
                        "that many steps done (every --log_every steps), TASK:SECONDSs (worker1:2.5s) that long "
                        "after the tasks start; TASK may be launcher, this process. checkpoint:STEP:STAGE "
                        f"(checkpoint:20:variables): the chief kills itself writing that checkpoint, after its "
                        f"{', '.join(checkpoints.STAGES)} (the stage's files written, the next not)", parser)
    flags.DEFINE_boolean("count_bytes", False, "with --hosts or --slurm: count each host's bytes over the measured "
                         "steps (the first worker on a host reads its interface's counters after every step), into "
                         "<run>.network.json as --net's switch does (make bench HOSTS=)", flag_values=parser)
    flags.DEFINE_boolean("require_shared_workdir", False, "with --hosts or --slurm: refuse to start unless every host "
                         "sees this working directory (verify reads the chief's results from it)", flag_values=parser)
    flags.DEFINE_boolean("runner_flags_checked", False, "the caller (verify) has checked the runner's flags as the "
                         "launcher would: it does not load the model to check them again", flag_values=parser)
    return parser


def parse_fault(text):
    """TASK:STEP, TASK:SECONDSs or checkpoint:STEP:STAGE as a Fault; raises ValueError naming the problem."""
    stages = "|".join(checkpoints.STAGES)
    if match := re.fullmatch(rf"checkpoint:(\d+):({stages})", text):
        return Fault(text, "worker0", checkpoint=(int(match[1]), match[2]))
    if match := re.fullmatch(r"((?:worker|ps)\d+|launcher):(?:(\d+)|(\d+(?:\.\d*)?)s)", text):
        step, seconds = match[2], match[3]
        return Fault(text, match[1], after_step=step and int(step), after_seconds=seconds and float(seconds))
    raise ValueError(f"expected TASK:STEP, TASK:SECONDSs or checkpoint:STEP:STAGE ({stages}), such as worker1:17, "
                     f"launcher:2.5s or checkpoint:20:variables, got {text!r}")


def parse_flags(argv):
    """The launcher's flags (before "--") and the runner's (after it), checked before anything starts."""
    split = argv.index("--") if "--" in argv else len(argv)  # after "--": the runner's flags
    args = flags.parse(launcher_flags(), argv[:split], positional=1)
    args.architecture = args.positional[0]
    if args.architecture not in ARCHITECTURES:
        raise harness.UsageError(f"architecture {args.architecture!r}: expected one of {', '.join(ARCHITECTURES)}")
    architecture = ARCHITECTURES[args.architecture]
    for flag, others, why in CONFLICTS:
        given = [f"--{other}" for other in others if getattr(args, flag) and getattr(args, other)]
        if given:
            raise harness.UsageError(f"--{flag}: not with {' or '.join(given)} ({why})")
    for flag in ("delay", "separate_ps"):
        if getattr(args, flag) and not args.net:
            raise harness.UsageError(f"--{flag}: only with --net")
    if args.count_bytes and not (args.hosts or args.slurm):
        raise harness.UsageError("--count_bytes: only with --hosts or --slurm (--net counts at its switch)")
    if args.fault:
        tasks = [f"worker{w}" for w in range(args.workers)] + (
            [f"ps{p}" for p in range(args.ps)] if architecture.parameter_servers else []) + ["launcher"]
        if args.fault.task not in tasks or args.mpi:
            raise harness.UsageError(f"--fault={args.fault.text}: no such task of this "
                                     f"run ({', '.join(tasks) if not args.mpi else 'mpirun starts the ranks'})")
    if args.mpi and (architecture.parameter_servers or not architecture.horovod_ranks):
        raise harness.UsageError(f"--mpi: only where every task is a Horovod rank "
                                 f"({', '.join(n for n, a in ARCHITECTURES.items() if not a.parameter_servers)})")
    if args.delay:
        args.net = dataclasses.replace(args.net, delay=args.delay)
    args.machines = args.machines or (args.workers if args.net else 1)
    if args.machines > args.workers:
        raise harness.UsageError(f"--machines={args.machines}: more machines than the {args.workers} workers")
    args.runner_flags = argv[split + 1:]
    # Parallax's partition search relaunches the job; it is asked for among the runner's flags.
    args.search = "--search_partitions" in args.runner_flags
    args.runner_flags = [f for f in args.runner_flags if f != "--search_partitions"]
    if args.search and not architecture.partition_search:
        raise harness.UsageError(f"--search_partitions: only for "
                                 f"{', '.join(n for n, a in ARCHITECTURES.items() if a.partition_search)}")
    # The runner's flags are checked here: bad input is one line before any task starts, not one per task.
    cluster_flags = ["--job_name=worker", "--task_index=0", "--ps_hosts=127.0.0.1:1",
                     f"--worker_hosts={','.join(['127.0.0.1:1'] * args.workers)}"]
    args.runner_args = runner_flags.parse(architecture.script[:-3], "", args.runner_flags + (
        cluster_flags if architecture.parameter_servers else []), model=False)
    if not args.runner_flags_checked:  # the model's own check: the one that runs its code
        runner_flags.check_model(args.runner_args, args.workers)
    if args.runner_args.resume and not (args.hosts or args.slurm or args.docker):
        # The chief's checkpoints are on this machine: what keeps the run from resuming is said now, once.
        Checkpoints(args.runner_args, None, args.workers).resumable()
    if args.docker:
        docker.check(args.docker, [args.runner_args.data_path, args.runner_args.ckpt_dir,
                                   args.runner_args.results_dir])
    check_environment(args)  # last: bad input is named before what this machine lacks
    return args


def check_environment(args):
    """What the flags ask of this machine and its network: an allocation, known hosts, Horovod, mpirun."""
    if args.slurm and "SLURM_JOB_ID" not in os.environ:
        raise harness.UsageError("--slurm: not inside a Slurm allocation (no SLURM_JOB_ID): submit with sbatch "
                                 "(slurm/*.sbatch) or run under salloc")
    for host, _ in args.hosts or []:  # every task must reach every other by this name, not only ssh
        try:
            socket.getaddrinfo(host, None)
        except OSError:
            raise harness.UsageError(f"--hosts: unknown host {host}")
    itself = [host for host, _ in args.hosts or [] if host in ("localhost", "ip6-localhost") or
              re.fullmatch(r"127\.[\d.]+|::1", host)]
    if itself and len(itself) < len(args.hosts):  # on another host, the name is that host
        raise harness.UsageError(f"--hosts: {itself[0]} means each host itself, and the others' tasks would reach "
                                 f"their own: name this machine as the other hosts do (its host name)")
    if args.ssh_config and not os.path.isfile(args.ssh_config):
        raise harness.UsageError(f"--ssh_config: {args.ssh_config} does not exist")
    if ARCHITECTURES[args.architecture].horovod_ranks:  # (the runner would say the same, once per task)
        try:  # Horovod's runner, for the rendezvous here, and its TensorFlow library, without loading TensorFlow
            import horovod.runner.gloo_run
            from horovod.common.util import get_extension_full_path
            library = get_extension_full_path(horovod.__file__, "tensorflow", "mpi_lib")
            if not os.path.exists(library):
                raise ImportError(f"{library} is not built")
        except ImportError as error:
            raise harness.UsageError(f"Horovod is not usable ({error}): run make setup")
    if args.mpi:
        mpirun.check()


# How the tasks start, by the flag that asks for it; without any, as child processes of this machine.
STARTERS = {"net": netns.NetnsProcess, "docker": docker.Docker, "slurm": Srun, "hosts": Ssh}


def starter_for(args):
    flag = next((flag for flag in STARTERS if getattr(args, flag)), None)
    return (STARTERS[flag] if flag else LocalProcess).from_flags(args)


def main():
    args = parse_flags(sys.argv[1:])
    with starter_for(args) as starter:
        return run_job(args, starter)


def run_job(args, starter):
    """Place the tasks and run the job with `starter` (after Parallax's partition search, if asked)."""
    runner_flags, runner_args = args.runner_flags, args.runner_args
    architecture = ARCHITECTURES[args.architecture]
    worker_hosts, ps_hosts = starter.place(args.workers, args.ps)
    preflight.check(starter, args.require_shared_workdir or args.search,  # other hosts: ready, or named
                    gloo=architecture.horovod_ranks and not args.mpi, model=models.path_of(runner_args.model))
    counter = (HostByteCounter(starter, worker_hosts, asynchronous=not getattr(runner_args, "sync", True))
               if args.count_bytes else starter.byte_counter())
    gloo_timeout = gloo_timeout_seconds(runner_args, args.workers, args.net)

    def run(runner_flags, watch=None, fault=None):
        return launch(architecture, worker_hosts, ps_hosts, runner_flags, starter,
                      args.network_interface or starter.network_interface, watch, args.mpi, gloo_timeout, fault,
                      counter)
    if args.search:
        def trial(n):
            name = f"partition-search-{n}"
            status, _ = run(runner_flags + [f"--partitions={n}", f"--run_name={name}",
                                            f"--ckpt_dir={os.path.join(runner_args.ckpt_dir, name)}"])
            if status:
                raise SystemExit(status)
            summary = results.read_json(results.summary_path(runner_args.results_dir, name), "summary")
            return summary["throughput"]["median_step_seconds"]
        model, config = models.from_flags(runner_args)
        rows = [(v.shape or (1,))[0] for v in models.declared_variables(model, config).values()]
        best = partition_search.search(trial, runner_args.results_dir, min(64, max(rows, default=1)))
        runner_flags = runner_flags + [f"--partitions={best}"]
    watchers = [watcher for watcher in (counter, args.fault) if watcher]

    def watch(task, line, running):  # every task's every line, to the byte counter and the fault
        for watcher in watchers:
            watcher.watch(task, line, running)
    status, tasks = run(runner_flags, watch, args.fault)
    chief = worker_hosts[0]
    if not starter.shares_workdir(chief):  # what the chief wrote is on its own disk
        if status == 0:
            starter.fetch(chief, [runner_args.ckpt_dir, *(path(runner_args.results_dir, runner_args.run_name) for path
                                                          in (results.summary_path, results.steps_path,
                                                              results.tensorboard_path))])
        print(f"launch: the chief's checkpoints and results {'copied back from' if status == 0 else 'stay on'} "
              f"{chief}, which does not share this working directory", file=sys.stderr, flush=True)
    if counter and status == 0:
        results.write_json(results.network_path(runner_args.results_dir, runner_args.run_name),
                           counter.result(tasks))
    if status == 0:
        servers = ps_hosts if architecture.parameter_servers else []
        results.write_json(results.hosts_path(runner_args.results_dir, runner_args.run_name),
                           {"run": runner_args.run_name, "hosts": hosts_of(starter, worker_hosts, servers)}, "hosts")
    return status


def hosts_of(starter, worker_hosts, ps_hosts):
    """Every host that ran a task: its tasks and its environment (the manifest's "every host")."""
    names = {}
    for kind, hosts in (("worker", worker_hosts), ("ps", ps_hosts)):
        for i, host in enumerate(hosts):
            names.setdefault(host, []).append(f"{kind}{i}")
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:  # each host's probe at once
        found = dict(zip(names, pool.map(starter.environment, names)))
    return [{"host": host, "tasks": tasks, "environment": found[host]} for host, tasks in names.items()]

