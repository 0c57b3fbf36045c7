"""Starting the tasks of a distributed run, watching them, and tearing them down.

    python -m harness.launch tf --workers=2 --ps=1 -- --config=small --steps=300     (make run-tf)
    python -m harness.launch horovod --workers=2 -- --config=small --steps=300       (make run-horovod)
    python -m harness.launch parallax --workers=2 --ps=1 -- --config=small ...       (make run-parallax)

A Task is what to run: a name ("worker1", "ps0"), a command line and its extra environment; the
`*_tasks` functions build them for each architecture. A starter is how to start a task: `LocalProcess`
starts it as a child process of this machine. (Later starters wrap the same Task in a network namespace, a
Docker container, ssh or srun.) `run_tasks` is the one place where a run's tasks are started, their output
is prefixed with their names, their exit statuses are read and, when one fails or the user presses Ctrl-C,
the others are stopped: a dead task takes the whole run down at once, with a message naming it.
"""
import ctypes
import dataclasses
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import harness
from harness import data, flags, partition_search
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


class LocalProcess:
    """A task as a local child process, in a process group of its own so that stopping it reaches every
    process it started."""

    def start(self, task):
        return subprocess.Popen(task.argv, env={**os.environ, **task.env}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                text=True, errors="replace", preexec_fn=_die_with_parent)

    def stop(self, process, grace_seconds):
        """SIGTERM to the task's process group, SIGKILL to what is left after `grace_seconds`."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(grace_seconds)
                # The leader is gone, but what it started may not be: the SIGKILL round reaches them.
            except subprocess.TimeoutExpired:
                pass


def _die_with_parent():
    """Linux: the task gets SIGKILL if the launcher dies, even by kill -9, so no task outlives it."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


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
                    how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
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


def horovod_environments(num_workers):
    """The environment of each rank of a Horovod job on this machine, as horovodrun --gloo sets it up:
    Horovod's rendezvous server runs in this process, and each rank learns its rank and where the
    rendezvous is. Returns (one environment per rank, stop_rendezvous)."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars
    from horovod.runner.http.http_server import RendezvousServer

    rendezvous = RendezvousServer()
    port = rendezvous.start()
    slots = get_host_assignments(parse_hosts(f"localhost:{num_workers}"), num_workers)
    rendezvous.init(slots)
    shared = {**create_run_env_vars("127.0.0.1", ["lo"], port), "PYTHONUNBUFFERED": "1",
              "HOROVOD_GLOO_TIMEOUT_SECONDS": str(GLOO_TIMEOUT_SECONDS)}
    return [{k: str(v) for k, v in {**shared, **create_slot_env_vars(slot)}.items()} for slot in slots], \
        rendezvous.stop


def free_loopback_ports(count):
    """Ports free on 127.0.0.1 now (the OS picks them; a task binds its port moments later)."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def parameter_server_tasks(script, num_workers, num_ps, runner_flags, machines=1):
    """The tasks of a parameter-server runner on this machine: ps0.. and worker0.., each a gRPC server on its
    own loopback port, each told the whole cluster and its own place in it. The workers are spread in blocks
    over `machines` loopback addresses, 127.0.0.1, 127.0.0.2...: every byte still crosses this machine's
    loopback, but a runner that groups workers by host (run_parallax.py --local_aggregation) sees that many
    machines."""
    ports = free_loopback_ports(num_ps + num_workers)
    workers = [f"127.0.0.{1 + i * machines // num_workers}:{port}" for i, port in enumerate(ports[num_ps:])]
    cluster = [f"--ps_hosts={','.join(f'127.0.0.1:{p}' for p in ports[:num_ps])}",
               f"--worker_hosts={','.join(workers)}"]
    return [Task(f"{job}{i}", [sys.executable, os.path.join(REPO, script), f"--job_name={job}", f"--task_index={i}",
                               *cluster, *runner_flags], {"PYTHONUNBUFFERED": "1"})
            for job, count in (("ps", num_ps), ("worker", num_workers)) for i in range(count)]


SCRIPTS = {"tf": "run_tf.py", "horovod": "run_horovod.py", "parallax": "run_parallax.py"}


def launch(architecture, num_workers, num_ps, runner_flags, machines=1):
    """Runs one job of `architecture` on this machine; returns its exit status."""
    script = SCRIPTS[architecture]
    if architecture == "horovod":
        tasks = [Task(f"worker{r}", [sys.executable, os.path.join(REPO, script), *runner_flags])
                 for r in range(num_workers)]
    else:
        tasks = parameter_server_tasks(script, num_workers, num_ps, runner_flags, machines)
    stop_rendezvous = None
    if architecture != "tf":  # the workers are Horovod ranks
        environments, stop_rendezvous = horovod_environments(num_workers)
        for task, environment in zip([t for t in tasks if t.name.startswith("worker")], environments):
            task.env.update(environment)
    try:
        return run_tasks(tasks)
    finally:
        if stop_rendezvous:
            stop_rendezvous()


def main():
    parser = flags.empty_parser("python -m harness.launch", __doc__)
    parser.add_argument("architecture", choices=sorted(SCRIPTS))
    parser.add_argument("--workers", type=flags.positive_int, default=2, help="worker processes")
    parser.add_argument("--ps", type=flags.positive_int, default=1, help="parameter-server tasks (tf, parallax)")
    parser.add_argument("--machines", type=flags.positive_int, default=1,
                        help="loopback addresses the workers are spread over, as if on that many machines "
                             "(tf, parallax)")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)  # after "--": the runner's flags
    args = parser.parse_args(argv[:split])
    if args.machines > args.workers:
        raise harness.UsageError(f"--machines={args.machines}: more machines than the {args.workers} workers")
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
    if search:
        def trial(n):
            name = f"partition-search-{n}"
            status = launch(args.architecture, args.workers, args.ps, runner_flags + [
                f"--partitions={n}", f"--run_name={name}", f"--ckpt_dir={os.path.join(runner_args.ckpt_dir, name)}"],
                args.machines)
            if status:
                raise SystemExit(status)
            with open(os.path.join(runner_args.results_dir, name + ".json")) as f:
                return json.load(f)["throughput"]["median_step_seconds"]
        best = partition_search.search(trial, runner_args.results_dir,
                                       min(64, model.CONFIGS[runner_args.config].vocab_size))
        runner_flags = runner_flags + [f"--partitions={best}"]
    return launch(args.architecture, args.workers, args.ps, runner_flags, args.machines)


if __name__ == "__main__":
    harness.main(main)
