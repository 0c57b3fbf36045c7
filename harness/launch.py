"""Starting the tasks of a distributed run, watching them, and tearing them down.

    python -m harness.launch tf --workers=2 --ps=1 -- --config=small --steps=300     (make run-tf)
    python -m harness.launch horovod --workers=2 -- --config=small --steps=300       (make run-horovod)
    python -m harness.launch parallax --workers=2 --ps=1 -- --config=small ...       (make run-parallax)
    python -m harness.launch tf --hosts=h1:2,h2:2 -- ...                             (make run-tf HOSTS=...)

A Task is what to run: a name ("worker1", "ps0"), a command line, its extra environment and its host; the
`*_tasks` functions build them for each architecture. A starter is how to start a task: `LocalProcess`
starts it as a child process of this machine, `Ssh` on its host through a local ssh client. (Later
starters wrap the same Task in a network namespace, a Docker container or srun.) `run_tasks` is the one
place where a run's tasks are started, their output is prefixed with their names, their exit statuses are
read and, when one fails or the user presses Ctrl-C, the others are stopped: a dead task takes the whole run
down at once, with a message naming it.
"""
import ctypes
import dataclasses
import fcntl
import importlib
import json
import os
import shlex
import socket
import struct
import subprocess
import sys
import threading
import time

import harness
from harness import data, flags, lifeline, partition_search
import model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A collective whose peer died fails after this many seconds (Horovod's default is 30). The launcher stops
# the other tasks as soon as it sees one die; the timeout covers tasks started by other means (horovodrun).
GLOO_TIMEOUT_SECONDS = 30


@dataclasses.dataclass
class Task:
    name: str
    argv: list
    env: dict = dataclasses.field(default_factory=dict)
    host: str = "127.0.0.1"


class LocalProcess:
    """A task as a local child process, in a process group of its own so that stopping it reaches every
    process it started. It dies with the launcher, even when the launcher is killed with -9."""

    def start(self, task, stdin=subprocess.DEVNULL):
        return subprocess.Popen(task.argv, env={**os.environ, **task.env}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=stdin, start_new_session=True,
                                text=True, errors="replace", preexec_fn=lifeline.die_with_parent)

    def stop(self, process, grace_seconds):
        lifeline.stop(process, grace_seconds)

    def free_ports(self, host, count):
        """Ports free on this machine now (the OS picks them; a task binds its port moments later)."""
        sockets = [socket.socket() for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        ports = [sock.getsockname()[1] for sock in sockets]
        for sock in sockets:
            sock.close()
        return ports


class Ssh:
    """A task on its host, run by a local ssh client (BatchMode: keys, no passwords), as horovodrun and mpirun
    do. The repository, its .venv and the working directory (where outputs go) must be at the same paths on
    every host, as for mpirun. On the host the task runs under
    harness/lifeline.py, which stops it when the connection closes, so stopping the local ssh client stops
    the task."""

    FREE_PORTS = ("import socket, sys; s = [socket.socket() for _ in range(int(sys.argv[1]))]; "
                  "[x.bind(('', 0)) for x in s]; print(*[x.getsockname()[1] for x in s])")

    def __init__(self, config_file=None):
        self.ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                    *(["-F", config_file] if config_file else [])]
        self.local = LocalProcess()

    def command(self, host, argv, env=None):
        assignments = [f"{name}={value}" for name, value in (env or {}).items()]
        return [*self.ssh, host, f"cd {shlex.quote(os.getcwd())} && exec {shlex.join(['env', *assignments, *argv])}"]

    def start(self, task):
        argv = [sys.executable, os.path.join(REPO, "harness", "lifeline.py"), *task.argv]
        return self.local.start(Task(task.name, self.command(task.host, argv, task.env)), stdin=subprocess.PIPE)

    def stop(self, process, grace_seconds):
        self.local.stop(process, grace_seconds)  # closes the connection: lifeline.py stops the task

    def free_ports(self, host, count):
        """Ports free on `host` now; this is also the check that the host answers over ssh and has the
        working directory and the .venv."""
        result = subprocess.run(self.command(host, [sys.executable, "-c", self.FREE_PORTS, str(count)]),
                                stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if result.returncode:
            why = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
            raise harness.UsageError(f"host {host}: {'unreachable over ssh: ' if result.returncode == 255 else ''}"
                                     f"{why}")
        return [int(port) for port in result.stdout.split()]


def _copy_output(name, stream, lock):
    for line in stream:
        with lock:
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()


def run_tasks(tasks, starter=None, grace_seconds=5.0, poll_seconds=0.1):
    """Runs `tasks` to the end. Returns 0 when all succeed; otherwise names the first task that failed, stops
    the others and returns its exit status (2 stays 2: bad input; anything else becomes 1). Ctrl-C stops
    every task and returns 130."""
    starter = starter or LocalProcess()
    lock = threading.Lock()
    running, readers = {}, []
    try:
        for task in tasks:
            process = starter.start(task)
            running[task.name] = process
            reader = threading.Thread(target=_copy_output, args=(task.name, process.stdout, lock), daemon=True)
            reader.start()
            readers.append(reader)
        status = 0
        while running and not status:
            for name, process in list(running.items()):
                code = process.poll()
                if code is None:
                    continue
                del running[name]
                if code != 0:
                    how = (f"was killed by signal {-code}" if code < 0 else
                           f"was killed by signal {code - 128} (status {code})" if 128 < code < 128 + 65 else
                           f"exited with status {code}")  # 128 + N: killed on its host (lifeline.py, a shell)
                    print(f"launch: task {name} {how}; stopping {', '.join(running) or 'nothing else'}",
                          file=sys.stderr, flush=True)
                    status = 2 if code == 2 else 1
            time.sleep(poll_seconds)
        return status
    except KeyboardInterrupt:
        print(f"launch: interrupted; stopping {', '.join(running)}", file=sys.stderr, flush=True)
        return 130
    finally:
        for process in running.values():
            starter.stop(process, grace_seconds)
        for reader in readers:
            reader.join(timeout=grace_seconds)


def horovod_environments(worker_hosts, network_interface=None):
    """The environment of each rank of a Horovod job whose rank r runs on worker_hosts[r], as horovodrun --gloo
    sets it up: Horovod's rendezvous server runs in this process, and each rank learns its rank, its host's
    share of the ranks and where the rendezvous is. Returns (one environment per rank, stop_rendezvous)."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars
    from horovod.runner.http.http_server import RendezvousServer

    address, interface = _address_towards(worker_hosts[0])
    rendezvous = RendezvousServer()
    port = rendezvous.start()
    hosts = ",".join(f"{host}:{worker_hosts.count(host)}" for host in dict.fromkeys(worker_hosts))
    slots = get_host_assignments(parse_hosts(hosts), len(worker_hosts))
    rendezvous.init(slots)
    shared = {**create_run_env_vars(address, [network_interface or interface], port), "PYTHONUNBUFFERED": "1",
              "HOROVOD_GLOO_TIMEOUT_SECONDS": str(GLOO_TIMEOUT_SECONDS)}
    return [{k: str(v) for k, v in {**shared, **create_slot_env_vars(slot)}.items()} for slot in slots], \
        rendezvous.stop


def _address_towards(host):
    """(this machine's address on the route to `host`, the name of its network interface)."""
    import psutil  # a dependency of Horovod's runner

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))  # UDP: no packet is sent, the kernel only picks the route
        address = probe.getsockname()[0]
    for interface, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addresses):
            return address, interface
    raise harness.UsageError(f"no network interface has {address}, the address towards {host}: "
                             f"name one with --network_interface")


def parameter_server_tasks(script, runner_flags, ps_addresses, worker_addresses):
    """The tasks of a parameter-server runner: ps0.. and worker0.., each a gRPC server at its host:port, each
    told the whole cluster and its own place in it."""
    cluster = [f"--ps_hosts={','.join(ps_addresses)}", f"--worker_hosts={','.join(worker_addresses)}"]
    return [Task(f"{job}{i}", [sys.executable, os.path.join(REPO, script), f"--job_name={job}", f"--task_index={i}",
                               *cluster, *runner_flags], {"PYTHONUNBUFFERED": "1"}, address.rsplit(":", 1)[0])
            for job, addresses in (("ps", ps_addresses), ("worker", worker_addresses))
            for i, address in enumerate(addresses)]


def place(num_workers, num_ps, hosts=None, machines=1):
    """(host of each worker, host of each parameter server).

    With `hosts` ([(host, slots)]), the workers fill the hosts' slots in order and the parameter servers go
    round the hosts. Without, everything is on this machine and the workers are spread in blocks over
    `machines` loopback addresses, 127.0.0.1, 127.0.0.2...: every byte still crosses this machine's
    loopback, but a runner that groups workers by host (run_parallax.py --local_aggregation) sees that many
    machines."""
    if not hosts:
        return [f"127.0.0.{1 + i * machines // num_workers}" for i in range(num_workers)], ["127.0.0.1"] * num_ps
    slots = [host for host, count in hosts for _ in range(count)]
    if len(slots) < num_workers:
        raise harness.UsageError(f"--hosts: {len(slots)} slots for {num_workers} workers")
    return slots[:num_workers], [hosts[i % len(hosts)][0] for i in range(num_ps)]


def with_ports(hosts, starter):
    """host:port for each of `hosts`, with a port free on that host."""
    free = {host: starter.free_ports(host, hosts.count(host)) for host in dict.fromkeys(hosts)}
    return [f"{host}:{free[host].pop()}" for host in hosts]


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


SCRIPTS = {"tf": "run_tf.py", "horovod": "run_horovod.py", "parallax": "run_parallax.py"}


def launch(architecture, num_workers, num_ps, runner_flags, hosts=None, machines=1, starter=None,
           network_interface=None):
    """Runs one job of `architecture`, on `hosts` ([(host, slots)]) through `starter` or on this machine;
    returns its exit status."""
    starter = starter or LocalProcess()
    script = SCRIPTS[architecture]
    worker_hosts, ps_hosts = place(num_workers, num_ps, hosts, machines)
    if architecture == "horovod":
        tasks = [Task(f"worker{r}", [sys.executable, os.path.join(REPO, script), *runner_flags], host=host)
                 for r, host in enumerate(worker_hosts)]
    else:
        tasks = parameter_server_tasks(script, runner_flags, with_ports(ps_hosts, starter),
                                       with_ports(worker_hosts, starter))
    stop_rendezvous = None
    if architecture != "tf":  # the workers are Horovod ranks
        environments, stop_rendezvous = horovod_environments(worker_hosts, network_interface)
        for task, environment in zip([t for t in tasks if t.name.startswith("worker")], environments):
            task.env.update(environment)
    try:
        return run_tasks(tasks, starter)
    finally:
        if stop_rendezvous:
            stop_rendezvous()


def main():
    parser = flags.empty_parser("python -m harness.launch", __doc__)
    parser.add_argument("architecture", choices=sorted(SCRIPTS))
    parser.add_argument("--workers", type=flags.positive_int, default=2, help="worker processes")
    parser.add_argument("--ps", type=flags.positive_int, default=1, help="parameter-server tasks (tf, parallax)")
    parser.add_argument("--hosts", type=flags.host_slots,
                        help="host:slots,... to run on over ssh (make HOSTS=); the workers fill the slots in order, "
                             "the parameter servers go round the hosts. Default: every task on this machine")
    parser.add_argument("--ssh_config", help="an ssh_config(5) file for reaching the hosts (ssh -F)")
    parser.add_argument("--network_interface",
                        help="the interface Horovod's ranks talk over (default: this machine's towards the first host)")
    parser.add_argument("--machines", type=flags.positive_int, default=1,
                        help="without --hosts: the loopback addresses the workers are spread over, as if on that "
                             "many machines (tf, parallax)")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)  # after "--": the runner's flags
    args = parser.parse_args(argv[:split])
    if args.machines > args.workers:
        raise harness.UsageError(f"--machines={args.machines}: more machines than the {args.workers} workers")
    if args.hosts and args.machines > 1:
        raise harness.UsageError("--machines: only without --hosts (the hosts are the machines)")
    for host, _ in args.hosts or []:  # every task must reach every other by this name, not only ssh
        try:
            socket.getaddrinfo(host, None)
        except OSError:
            raise harness.UsageError(f"--hosts: unknown host {host}")
    if args.ssh_config and not os.path.isfile(args.ssh_config):
        raise harness.UsageError(f"--ssh_config: {args.ssh_config} does not exist")
    runner_flags = argv[split + 1:]
    # Parallax's partition search relaunches the job; it is asked for among the runner's flags.
    search = "--search_partitions" in runner_flags
    runner_flags = [f for f in runner_flags if f != "--search_partitions"]
    if search and args.architecture != "parallax":
        raise harness.UsageError("--search_partitions: only for parallax")
    # The runner's flags are checked here, once: bad input is one line before any task starts, not one line
    # per task.
    cluster_flags = ["--job_name=worker", "--task_index=0", "--ps_hosts=127.0.0.1:1",
                     f"--worker_hosts={','.join(['127.0.0.1:1'] * args.workers)}"]
    runner = importlib.import_module(SCRIPTS[args.architecture][:-3])
    runner_args = runner.parse_flags(runner_flags + (cluster_flags if args.architecture != "horovod" else []))
    data.shard(model.CONFIGS[runner_args.config].batch_size, 0, args.workers)
    starter = Ssh(args.ssh_config) if args.hosts else LocalProcess()
    if not args.hosts:
        isolate_network()

    def run(runner_flags):
        return launch(args.architecture, args.workers, args.ps, runner_flags, args.hosts, args.machines, starter,
                      args.network_interface)
    if search:
        def trial(n):
            name = f"partition-search-{n}"
            status = run(runner_flags + [f"--partitions={n}", f"--run_name={name}",
                                         f"--ckpt_dir={os.path.join(runner_args.ckpt_dir, name)}"])
            if status:
                raise SystemExit(status)
            with open(os.path.join(runner_args.results_dir, name + ".json")) as f:
                return json.load(f)["throughput"]["median_step_seconds"]
        best = partition_search.search(trial, runner_args.results_dir,
                                       min(64, model.CONFIGS[runner_args.config].vocab_size))
        runner_flags = runner_flags + [f"--partitions={best}"]
    return run(runner_flags)


if __name__ == "__main__":
    harness.main(main)
