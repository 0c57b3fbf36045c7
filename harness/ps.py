"""The parameter-server machinery that run_tf.py and run_parallax.py share: the cluster flags, each task's gRPC
server and its failure handling, placement by size, shared queues, the parameter-server task itself, and the
synchronous collection of exactly one gradient per worker per step."""
import socket
import sys
import time

import tensorflow as tf

import harness
from harness import cluster_spec, data, determinism, flags
import model


def add_cluster_flags(parser):
    """The cluster flags; without them the cluster comes from TF_CONFIG or the Slurm step (harness/cluster_spec.py)."""
    flags.DEFINE_enum("job_name", None, ["ps", "worker"], "this task's job", flag_values=parser)
    flags.DEFINE_integer("task_index", None, "this task's index in its job", lower_bound=0, flag_values=parser)
    flags.DEFINE_parsed("ps_hosts", None, flags.host_list, "host:port,... of the PS tasks", parser)
    flags.DEFINE_parsed("worker_hosts", None, flags.host_list, "host:port,... of the workers", parser)
    flags.DEFINE_integer("ps_tasks", 1, "with the cluster from a Slurm step (srun, no cluster flags, no TF_CONFIG): "
                         "how many of the step's tasks, the first ones, are parameter servers", lower_bound=1,
                         flag_values=parser)
    flags.DEFINE_integer("partitions", 1, "parts each sparse variable is split into, by rows", lower_bound=1, flag_values=parser)
    flags.DEFINE_enum("partition_strategy", "mod", list(model.PARTITION_STRATEGIES), "which rows each part holds: "
                      "mod, round robin (word i in part i % P, TensorFlow 1's default, which Parallax ran), or div, "
                      "contiguous ranges (TensorFlow 2's tf.nn.embedding_lookup)", flag_values=parser)
    flags.DEFINE_integer("timeout", 20, "seconds without progress after which a task looks for a dead task and exits",
                         lower_bound=1, flag_values=parser)
    flags.DEFINE_integer("startup_timeout", 120, "seconds a task waits for the others to start before it calls "
                         "them missing", lower_bound=1, flag_values=parser)


def check_cluster_flags(args):
    cluster_spec.resolve(args)
    tasks = args.ps_hosts if args.job_name == "ps" else args.worker_hosts
    if args.task_index >= len(tasks):
        raise harness.UsageError(f"--task_index={args.task_index}: there are only {len(tasks)} {args.job_name} tasks")
    config = flags.model_config(args)
    data.shard(config.batch_size, 0, len(args.worker_hosts))
    if args.partitions > config.vocab_size:
        raise harness.UsageError(f"--partitions={args.partitions}: more parts than the {config.vocab_size:,} rows "
                                 f"of a {config.name} table")
    for flag, addresses in (("--ps_hosts", args.ps_hosts), ("--worker_hosts", args.worker_hosts)):
        for host in {address.rsplit(":", 1)[0] for address in addresses}:
            try:
                socket.getaddrinfo(host, None)
            except OSError:
                raise harness.UsageError(f"{flag}: unknown host {host}")


class Cluster:
    """This task's gRPC server, and the failure handling every session.run of the task goes through.

    While the cluster is starting, a task that does not answer may still be on its way up, so the task waits
    --startup_timeout seconds for it; if it never answers, its address is wrong or it was never started,
    which is bad input (exit 2). Once training runs, a task that stops answering has died (exit 1)."""

    def __init__(self, args):
        self.args = args
        self.spec = tf.train.ClusterSpec({"ps": args.ps_hosts, "worker": args.worker_hosts})
        self.addresses = {f"{job}{i}": address for job in ("ps", "worker")
                          for i, address in enumerate(self.spec.job_tasks(job))}
        self.devices = {f"{job}{i}": f"/job:{job}/task:{i}" for job in ("ps", "worker")
                        for i in range(self.spec.num_tasks(job))}
        self.name = f"{args.job_name}{args.task_index}"
        self.config = determinism.session_config(args)
        # gRPC would report a taken port in many lines of its own; TensorFlow binds every interface.
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("", int(self.addresses[self.name].rsplit(":", 1)[1])))
            except OSError as error:
                raise harness.UsageError(f"cannot start the {self.name} server on {self.addresses[self.name]}: "
                                         f"{error.strerror}")
        self.server = tf.distribute.Server(self.spec, args.job_name, args.task_index, config=self.config)

    def session(self, graph, peers):
        """A session that needs only this task and `peers` (device filters: the others may come and go).

        TensorFlow waits without end for a peer that never starts, so the peers are first probed over TCP
        for up to --startup_timeout seconds."""
        waiting = {task for task, device in self.devices.items()
                   if any(device == peer or device.startswith(peer + "/") for peer in peers)}
        deadline = time.monotonic() + self.args.startup_timeout
        while waiting := {task for task in waiting if not self.reachable(task)}:
            if time.monotonic() > deadline:
                self.exit_if_unreachable(sorted(waiting), starting=True)
            time.sleep(0.5)
        config = tf.compat.v1.ConfigProto()
        config.CopyFrom(self.config)
        config.device_filters[:] = [f"/job:{self.args.job_name}/task:{self.args.task_index}", *peers]
        return tf.compat.v1.Session(self.server.target, graph=graph, config=config)

    def run(self, session, fetches, feed=None, starting=False, timeout=None):
        """session.run that gives up after `timeout` seconds (--timeout; --startup_timeout while `starting`)
        without a result, and then names the task that does not answer."""
        seconds = timeout or (self.args.startup_timeout if starting else self.args.timeout)
        try:
            return session.run(fetches, feed, options=tf.compat.v1.RunOptions(timeout_in_ms=1000 * seconds))
        except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError, tf.errors.AbortedError) as error:
            self.exit_if_unreachable(self.addresses, starting)
            self.stop(f"no progress ({' '.join(error.message.split())})")

    def exit_if_unreachable(self, tasks, starting=False):
        dead = [task for task in tasks if task != self.name and not self.reachable(task)]
        if dead and starting:
            raise harness.UsageError(f"[{self.name}] {', '.join(f'{t} ({self.addresses[t]})' for t in dead)} never "
                                     f"answered: a wrong address, or a task that was not started")
        if dead:
            self.stop(f"{', '.join(dead)} is unreachable")

    def reachable(self, task):
        host, port = self.addresses[task].rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return True
        except OSError:
            return False

    def stop(self, why):
        print(f"[{self.name}] stopping: {why}", file=sys.stderr, flush=True)
        sys.exit(1)


class GreedyBySize:
    """replica_device_setter's ps_strategy: each variable goes to the parameter server with the fewest bytes
    so far (TF 1.x's GreedyLoadBalancingStrategy with byte_size_load_fn, which TF 2 no longer ships). Every
    worker builds its graph in the same order, so every worker computes the same placement."""

    def __init__(self, num_ps):
        self.loads = [0] * num_ps

    def __call__(self, op):
        size = tf.TensorShape(op.get_attr("shape")).num_elements() * tf.as_dtype(op.get_attr("dtype")).size
        task = self.loads.index(min(self.loads))
        self.loads[task] += size
        return task


def queue(name, dtypes, device, capacity=1):
    """A queue on `device` that every task's graph names alike, so they all share it."""
    with tf.device(device):
        return tf.queue.FIFOQueue(capacity, dtypes, shared_name=name, name=name.replace("/", "_"))


def serve(cluster, args):
    """A parameter server: holds variables until the chief says the run is over (or is gone)."""
    graph = tf.Graph()
    with graph.as_default():
        done = queue(f"done/ps{args.task_index}", [tf.int32], f"/job:ps/task:{args.task_index}").dequeue()
    with cluster.session(graph, []) as session:  # the chief is watched by TCP probes, not by this session
        started, chief_seen = time.monotonic(), False
        while True:
            try:
                session.run(done, options=tf.compat.v1.RunOptions(timeout_in_ms=2000))
                return
            except tf.errors.DeadlineExceededError:
                chief_seen = chief_seen or cluster.reachable("worker0")
                if chief_seen or time.monotonic() - started > args.startup_timeout:
                    cluster.exit_if_unreachable(["worker0"], starting=not chief_seen)


def machines(worker_hosts):
    """The workers grouped by machine: one list of worker indices per host of `worker_hosts`, in order."""
    groups = {}
    for index, address in enumerate(worker_hosts):
        groups.setdefault(address.rsplit(":", 1)[0], []).append(index)
    return list(groups.values())


def collect_gradients(parts, gradients, step, sender, num_senders, collect, device=None):
    """Synchronous collection of exactly one gradient per sender per step, for the variable parts `parts`.

    Every sender (a worker, or a machine: run_parallax.py --local_aggregation) puts its gradient of each part,
    tagged with `step`, into a queue of its own (capacity 1) on `device`, by default the part's parameter
    server. Returns those enqueue ops and, where `collect`, the `num_senders` senders' gradients taken from
    the queues in sender order, on that device (lists structured as `parts`); a gradient tagged with another
    step fails the run."""
    def gradient_queue(part, index):
        return queue(f"gradient/{part.op.name}/sender{index}", [tf.int64, tf.float32, tf.int32], device or part.device)

    send = [gradient_queue(part, sender).enqueue(_as_tuple(step, g)) for part, g in zip(parts, gradients)]
    if not collect:
        return send, None
    received = [[] for _ in range(num_senders)]
    for part, own in zip(parts, gradients):
        with tf.device(device or part.device):
            for index in range(num_senders):
                tag, values, indices = gradient_queue(part, index).dequeue()
                with tf.control_dependencies([tf.debugging.assert_equal(tag, step, message="stale gradient")]):
                    values = tf.identity(values)
                received[index].append(_from_tuple(values, indices, own, part))
    return send, received


def _as_tuple(step, gradient):
    """(step, values, indices) of a gradient; a dense one has no indices."""
    if isinstance(gradient, tf.IndexedSlices):
        return [step, gradient.values, gradient.indices]
    return [step, gradient, tf.zeros([0], tf.int32)]


def _from_tuple(values, indices, like, part):
    """The gradient of `part` from a queue's (values, indices), of the same kind as `like`."""
    if isinstance(like, tf.IndexedSlices):
        values.set_shape([None] + part.shape.as_list()[1:])
        indices.set_shape([None])
        return tf.IndexedSlices(values, indices, like.dense_shape)
    return tf.reshape(values, part.shape)


def gradient_kinds(names, gradients):
    """{variable name: "sparse" or "dense"} from the type of its gradient (Parallax's classification); a
    partitioned variable's gradient is the list of its parts'."""
    return {name: "sparse" if isinstance(tf.nest.flatten(g)[0], tf.IndexedSlices) else "dense"
            for name, g in zip(names, gradients)}


def print_placement(runner, lm, kinds):
    """The placement table: variable (or part), kind of gradient, shape, bytes, device."""
    print(f"[{runner}] placement:", flush=True)
    for name, variable in zip(lm.variables, lm.variable_list):
        for part in tf.nest.flatten(variable):
            size = part.shape.num_elements() * part.dtype.size
            print(f"[{runner}]   {part.op.name:20s} {kinds[name]:6s} {str(part.shape.as_list()):12s} "
                  f"{size:>11,d} bytes  {part.device}", flush=True)
