"""One task of bench/costs.py's protocol measurements on an emulated two-machine cluster (or under mpirun).
--probe=grpc: worker0 times pulls from and pushes to ps0 over gRPC; --probe=collective: every rank times Horovod's
allreduce and allgather, then its idle background CPU; --probe=beside: allreduce every --period seconds, saying
READY after the first, until --stop_file exists where one of the ranks runs (with --hosts, one rank a slot of those
hosts, started over ssh as make bench HOSTS= starts its). Rank 0 writes --timings_file, {operation: {size: [seconds]}} plus "cpu_seconds" (a file, as
mpirun interleaves its ranks' lines). docs/bench.md explains the measurements."""
import os
import sys
import time

from harness import determinism
import tensorflow as tf  # noqa: E402  (after determinism: it fixes TensorFlow's kernels)

import harness
from harness import flags, grpc_cluster, results, runner_flags
from launcher import machines

READY = "beside: the first allreduce is done"
SMALL_TENSOR_BYTES = 256  # a tensor whose bytes cost nothing: what is left is the cost of a message


def parse_flags():
    parser = flags.parser("protocol_probe", __doc__)
    runner_flags.cluster(parser)
    flags.DEFINE_enum("probe", None, ["grpc", "collective", "beside"], "what to time", flag_values=parser)
    flags.DEFINE_names("sizes", ["4096", "1048576", "8388608"], "tensor sizes in bytes", parser)
    flags.DEFINE_integer("tensors", 64, "small tensors pulled in one run (the cost of a message)", lower_bound=2,
                         flag_values=parser)
    flags.DEFINE_string("timings_file", None, "where worker0 (rank 0) writes the timings", flag_values=parser)
    flags.DEFINE_integer("repeats", 15, "timed runs of each operation", lower_bound=3, flag_values=parser)
    flags.DEFINE_float("idle_seconds", 5.0, "how long each rank idles while its background CPU is measured",
                       lower_bound=0.1, flag_values=parser)
    flags.DEFINE_float("period", 1.0, "beside: seconds from one allreduce's start to the next's", lower_bound=0,
                       flag_values=parser)
    flags.DEFINE_string("stop_file", None, "beside: its existence where any rank runs stops every rank",
                        flag_values=parser)
    machines.define_flags(parser, net=None)  # --hosts: the ranks there over ssh, the launcher's rendezvous here
    args = flags.parse(parser)
    if args.probe is None:
        raise harness.UsageError("--probe: say what to time (grpc, collective or beside)")
    if not all(size.isdigit() for size in args.sizes):
        raise harness.UsageError(f"--sizes={','.join(args.sizes)}: expected sizes in bytes")
    args.sizes = [int(size) for size in args.sizes]
    return args


def timed(session, op, repeats):
    """Return the seconds of `repeats` runs of `op` after an untimed one, and the machine's CPU seconds per run
    (both ends of a transfer share this machine)."""
    session.run(op)
    seconds, cpu = [], machine_cpu_seconds()
    for _ in range(repeats):
        started = time.perf_counter()
        session.run(op)
        seconds.append(time.perf_counter() - started)
    return seconds, (machine_cpu_seconds() - cpu) / repeats


def machine_cpu_seconds():
    """The CPU seconds this machine's cores have spent busy (/proc/stat; a network namespace sees all of them)."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq = map(int, stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def timed_with_cpu(session, operations, repeats):
    """{name: {size: [seconds]}} of every operation, plus "cpu_seconds": {name: the machine's CPU seconds per run
    of its largest size}."""
    measured = {name: {size: timed(session, op, repeats) for size, op in by_size.items()}
                for name, by_size in operations.items()}
    return {**{name: {size: seconds for size, (seconds, _) in by_size.items()} for name, by_size in measured.items()},
            "cpu_seconds": {name: by_size[max(by_size)][1] for name, by_size in measured.items()}}


def floats(size_bytes):
    return tf.zeros([max(1, size_bytes // 4)], tf.float32)


def grpc_operations(args):
    """{name: {size: op}}: pulls and pushes between worker0 and ps0, both at once, and one pull of many small ones."""
    ps, worker = "/job:ps/task:0", "/job:worker/task:0"
    operations = {"pull": {}, "push": {}, "pull_and_push": {}}
    for size in args.sizes:
        with tf.device(ps):
            remote = tf.Variable(floats(size))
        with tf.device(worker):
            local = tf.Variable(floats(size))
            operations["pull"][size] = local.assign(remote.read_value()).op  # the read runs on ps0
        with tf.device(ps):
            operations["push"][size] = remote.assign(local.read_value()).op  # the read runs on worker0
            there = tf.Variable(floats(size))
            operations["pull_and_push"][size] = tf.group(operations["pull"][size],
                                                         there.assign(local.read_value()).op)
    pulls = []
    for _ in range(args.tensors):
        with tf.device(ps):
            remote = tf.Variable(floats(SMALL_TENSOR_BYTES))
        with tf.device(worker):
            pulls.append(tf.Variable(floats(SMALL_TENSOR_BYTES)).assign(remote.read_value()).op)
    operations["pull_one_small"] = {SMALL_TENSOR_BYTES: pulls[0]}
    operations["pull_many_small"] = {SMALL_TENSOR_BYTES * args.tensors: tf.group(*pulls)}
    return operations


def grpc_probe(args):
    cluster = grpc_cluster.Cluster(args)
    if args.job_name == "ps":
        return grpc_cluster.serve(cluster, args)
    graph = tf.Graph()
    with graph.as_default():
        operations = grpc_operations(args)
        over = grpc_cluster.run_over(1)
        initialise = tf.compat.v1.global_variables_initializer()
    with cluster.session(graph, ["/job:ps"]) as session:
        cluster.run(session, initialise, starting=True)
        timings = timed_with_cpu(session, {name: operations[name] for name in ("pull", "push")}, args.repeats)
        timings.update({name: {size: timed(session, op, args.repeats)[0] for size, op in operations[name].items()}
                        for name in ("pull_and_push", "pull_one_small", "pull_many_small")})
        session.run(over)
    results.write_json(args.timings_file, timings)


def background_share(seconds):
    """The CPU seconds per second Horovod's background thread takes while this process idles: it coordinates the
    ranks every cycle, tensor or not, so a computing worker pays it too."""
    cpu, wall = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


def collective_probe(args):
    import horovod.tensorflow as hvd
    hvd.init()
    tf.compat.v1.disable_eager_execution()
    operations = {"allreduce": {}, "allgather": {}, "alltoall": {}}
    for size in args.sizes:
        # A variable, not a constant: a collective of a constant runs once and is then cached.
        tensor = tf.Variable(floats(size)).read_value()
        operations["allreduce"][size] = tf.reduce_sum(hvd.allreduce(tensor, op=hvd.Sum)[:1])
        operations["allgather"][size] = tf.reduce_sum(hvd.allgather(tensor)[:1])
        # twice the size: at two ranks each sends half of it, `size` bytes, as the other two send
        operations["alltoall"][size] = tf.reduce_sum(hvd.alltoall(tf.Variable(floats(2 * size)).read_value())[:1])
    own = tf.compat.v1.placeholder(tf.float64, [1])
    every_rank = hvd.allgather(own)
    with tf.compat.v1.Session(config=determinism.session_config(args)) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        timings = timed_with_cpu(session, operations, args.repeats)
        timings["background_cpu_share"] = session.run(every_rank, {own: [background_share(args.idle_seconds)]}).tolist()
    if hvd.rank() == 0:
        results.write_json(args.timings_file, timings)


def beside_probe(args):
    import horovod.tensorflow as hvd
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)  # a worker's threads
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    tensor = floats(args.sizes[0])
    ready = False
    while True:
        started = time.perf_counter()
        hvd.allreduce(tensor, op=hvd.Sum, name="beside")
        if hvd.rank() == 0 and not ready:
            print(READY, flush=True)  # on stdout, which the launcher passes on from any host
            ready = True
        # every rank stops after the same allreduce: the one that saw the file tells the others
        if hvd.allreduce(tf.constant(float(os.path.exists(args.stop_file))), op=hvd.Sum, name="stop") > 0:
            return
        time.sleep(max(0.0, args.period - (time.perf_counter() - started)))


def on_hosts(args):
    """Run this probe as Horovod ranks on the slots of --hosts (ssh), as the launcher starts a Horovod job."""
    from launcher import launch, tasks
    from launcher.starters.ssh import Ssh
    argv = [sys.executable, os.path.abspath(__file__), *(a for a in sys.argv[1:] if not a.startswith("--hosts"))]
    starter = Ssh(args.hosts, args.ssh_config)
    workers = tasks.place(sum(slots for _, slots in args.hosts), 0, args.hosts)[0]
    environments, stop_rendezvous = launch.horovod_environments(workers, starter=starter)
    try:
        return tasks.run_tasks([tasks.Task(f"worker{r}", argv, {"PYTHONPATH": harness.REPO, **environment}, host)
                                for r, (host, environment) in enumerate(zip(workers, environments))], starter)
    finally:
        stop_rendezvous()


def main():
    args = parse_flags()
    if args.hosts:
        return on_hosts(args)
    return {"grpc": grpc_probe, "collective": collective_probe, "beside": beside_probe}[args.probe](args)


if __name__ == "__main__":
    harness.main(main)
