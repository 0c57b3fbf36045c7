"""Parameter-server training on TensorFlow's distributed runtime: between-graph replication, variables on
parameter-server tasks, every worker its own process and client, real gRPC servers.

    make run-tf WORKERS=2 PS=1                        # every task on this machine
    python run_tf.py --job_name=ps --task_index=0 --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222
    python run_tf.py --job_name=worker --task_index=0 --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222

It is run.py with the lines marked "PS:" changed. Variables live on the parameter servers, spread by size
(greedy); the embedding may be split into --partitions parts. Each worker trains its rows of the global
batch, reading the variables from the parameter servers.

Synchronous (default): in step t every worker puts its gradient, tagged with t, into a queue of its own
on the parameter server of each variable (capacity 1); the chief worker takes exactly one gradient from
each worker's queue, in worker order, averages them there (model.average_worker_gradients), applies the
update (model.sgd_update), and then hands every worker a token for step t + 1. So each update has exactly
one gradient of each worker for that step, none stale, and no worker reads variables before the update.

Asynchronous (--sync=false): every worker applies its own gradient as soon as it has it, and the results
report the staleness of each update: how many updates other workers applied between its read and its own.
"""
import socket
import sys
import time

import harness  # first: it fixes TensorFlow's kernels before TensorFlow loads
from harness import data, determinism, flags
from harness.recorder import Recorder
from harness.training import StepFeed
import numpy as np
import tensorflow as tf

import model


def parse_flags(argv=None):
    parser = flags.parser("run_tf", __doc__)
    parser.add_argument("--job_name", choices=["ps", "worker"], required=True)
    parser.add_argument("--task_index", type=flags.non_negative_int, required=True)
    parser.add_argument("--ps_hosts", type=flags.host_list, required=True, help="host:port,... of the PS tasks")
    parser.add_argument("--worker_hosts", type=flags.host_list, required=True, help="host:port,... of the workers")
    parser.add_argument("--sync", type=flags.boolean, default=True, help="synchronous (default) or asynchronous")
    parser.add_argument("--partitions", type=flags.positive_int, default=1, help="parts of the embedding")
    parser.add_argument("--timeout", type=flags.positive_int, default=20,
                        help="seconds without progress after which a task looks for a dead task and exits")
    args = flags.parse(parser, argv)
    tasks = args.ps_hosts if args.job_name == "ps" else args.worker_hosts
    if args.task_index >= len(tasks):
        raise harness.UsageError(f"--task_index={args.task_index}: there are only {len(tasks)} {args.job_name} tasks")
    data.shard(model.CONFIGS[args.config].batch_size, 0, len(args.worker_hosts))
    return args


class Cluster:
    """This task's gRPC server, and the failure handling every session.run of the task goes through."""

    def __init__(self, args):
        self.args = args
        self.spec = tf.train.ClusterSpec({"ps": args.ps_hosts, "worker": args.worker_hosts})
        self.addresses = {f"{job}{i}": address for job in ("ps", "worker")
                          for i, address in enumerate(self.spec.job_tasks(job))}
        self.name = f"{args.job_name}{args.task_index}"
        self.config = determinism.session_config(args)
        try:
            self.server = tf.distribute.Server(self.spec, args.job_name, args.task_index, config=self.config)
        except tf.errors.OpError as error:  # e.g. the port is taken
            raise harness.UsageError(f"cannot start the {self.name} server on {self.addresses[self.name]}: "
                                     f"{error.message.splitlines()[0]}")

    def session(self, graph, peers):
        """A session that needs only this task and `peers` (device filters: the others may come and go)."""
        config = tf.compat.v1.ConfigProto()
        config.CopyFrom(self.config)
        config.device_filters[:] = [f"/job:{self.args.job_name}/task:{self.args.task_index}", *peers]
        return tf.compat.v1.Session(self.server.target, graph=graph, config=config)

    def run(self, session, fetches, feed=None, timeout=None):
        """session.run that gives up after `timeout` seconds without a result, and then names the dead task."""
        options = tf.compat.v1.RunOptions(timeout_in_ms=1000 * (timeout or self.args.timeout))
        try:
            return session.run(fetches, feed, options=options)
        except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError, tf.errors.AbortedError) as error:
            self.exit_if_unreachable(self.addresses)
            self.stop(f"no progress ({error.message.splitlines()[0]})")

    def exit_if_unreachable(self, tasks):
        dead = [task for task in tasks if task != self.name and not self.reachable(task)]
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
    with cluster.session(graph, ["/job:worker/task:0"]) as session:
        while True:
            try:
                session.run(done, options=tf.compat.v1.RunOptions(timeout_in_ms=2000))
                return
            except tf.errors.DeadlineExceededError:
                cluster.exit_if_unreachable(["worker0"])  # the chief


def main():
    args = parse_flags()
    config = model.CONFIGS[args.config]
    cluster = Cluster(args)  # PS: every task is a gRPC server
    if args.job_name == "ps":
        return serve(cluster, args)
    rank, num_workers = args.task_index, len(args.worker_hosts)
    chief = rank == 0
    rows = data.shard(config.batch_size, rank, num_workers)
    batches = data.load(args, config)

    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(config, batches, rows)
    # PS: variables on the parameter servers, spread by size; every other op on this worker.
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
            cluster=cluster.spec, worker_device=f"/job:worker/task:{rank}",
            ps_strategy=GreedyBySize(len(args.ps_hosts)))):
        lm = model.LSTMLanguageModel(config, args.seed, embedding_partitions=args.partitions)
        global_step = tf.compat.v1.get_variable("global_step", [], tf.int64, tf.zeros_initializer(),
                                                trainable=False)
        loss, final_state = lm.loss(feed.inputs, feed.targets, feed.initial_state,
                                    lm.dropout_masks(args.seed, feed.step, rows))
        if args.sync:
            step_graph = SynchronousStep(config, lm, feed, loss, final_state, lm.worker_gradients(loss),
                                         global_step, rank, num_workers)
        else:
            step_graph = AsynchronousStep(config, lm, feed, loss, final_state, global_step, rank, num_workers)
    done = [queue(f"done/ps{p}", [tf.int32], f"/job:ps/task:{p}").enqueue([0]) for p in range(len(args.ps_hosts))]
    saver = tf.compat.v1.train.Saver(lm.variables)
    if chief:
        print_placement(lm)

    with cluster.session(tf.compat.v1.get_default_graph(), ["/job:ps"]) as session:
        if chief:  # the first run waits for the parameter servers to come up
            cluster.run(session, tf.compat.v1.global_variables_initializer(), timeout=120)
            recorder = Recorder(args, config, "run_tf", num_workers)
        state = None
        clock = time.perf_counter()
        for step in range(args.steps):
            step_loss, state, norm, words = step_graph.run(cluster, session, step, feed(step, state))
            now = time.perf_counter()
            if chief:
                recorder.step(step, step_loss, now - clock, words, grad_norm=norm)
            clock = now
        summary = step_graph.finish(cluster, session)
        if chief:
            recorder.finish(session, saver, parameter_servers=len(args.ps_hosts), partitions=args.partitions,
                            **summary)
            cluster.run(session, done)  # the parameter servers may exit


class SynchronousStep:
    """PS: in step t every worker puts its gradient, tagged t, into a queue of its own (capacity 1) on the
    parameter server of each variable; the chief takes exactly one from each worker's queue, in worker order,
    averages them on that server, applies the update, and then hands every worker a token for step t + 1."""

    def __init__(self, config, lm, feed, loss, final_state, gradients, global_step, rank, num_workers):
        self.config, self.chief, self.final_state = config, rank == 0, final_state
        parts, part_gradients = tf.nest.flatten(lm.variable_list), tf.nest.flatten(gradients)

        def gradient_queue(part, worker):
            return queue(f"gradient/{part.op.name}/worker{worker}", [tf.int64, tf.float32, tf.int32], part.device)

        loss_queues = [queue(f"loss/worker{r}", [tf.int64, tf.float32], "/job:ps/task:0") for r in range(num_workers)]
        token_queues = [queue(f"token/worker{r}", [tf.int64], "/job:ps/task:0") for r in range(num_workers)]
        self.send = [gradient_queue(part, rank).enqueue(_as_tuple(feed.step, g))
                     for part, g in zip(parts, part_gradients)] + [loss_queues[rank].enqueue([feed.step, loss])]
        self.wait_for_update = token_queues[rank].dequeue()
        if self.chief:
            received, checks = [[] for _ in range(num_workers)], []
            for part, own in zip(parts, part_gradients):
                with tf.device(part.device):
                    for worker in range(num_workers):
                        step, values, indices = gradient_queue(part, worker).dequeue()
                        checks.append(tf.debugging.assert_equal(step, feed.step, message="stale gradient"))
                        received[worker].append(_from_tuple(values, indices, own, part))
            with tf.control_dependencies(checks):
                averaged = model.average_worker_gradients(received)
            train_op, self.global_norm = model.sgd_update(
                config, lm.variable_list, tf.nest.pack_sequence_as(lm.variable_list, averaged), feed.learning_rate)
            self.global_loss = tf.add_n([q.dequeue()[1] for q in loss_queues]) / num_workers
            with tf.control_dependencies([train_op, global_step.assign_add(1)]):
                self.release = tf.group([q.enqueue([feed.step + 1]) for q in token_queues])
            self.start = [q.enqueue([0]) for q in token_queues]

    def run(self, cluster, session, step, step_feed):
        if self.chief and step == 0:
            cluster.run(session, self.start)
        cluster.run(session, self.wait_for_update, timeout=120 if step == 0 else None)
        _, state = cluster.run(session, [self.send, self.final_state], step_feed)
        if not self.chief:
            return None, state, None, None
        loss, norm, _ = cluster.run(session, [self.global_loss, self.global_norm, self.release], step_feed)
        return loss, state, norm, self.config.words_per_batch

    def finish(self, cluster, session):
        return {"mode": "sync"}


class AsynchronousStep:
    """PS: every worker applies the update rule to its own gradient as soon as it has it. The staleness of
    an update is the number of updates other workers applied between its read of global_step and its own."""

    def __init__(self, config, lm, feed, loss, final_state, global_step, rank, num_workers):
        self.config, self.chief, self.num_workers = config, rank == 0, num_workers
        read_step = global_step.read_value()
        train_op, global_norm = model.sgd_update(config, lm.variable_list, lm.worker_gradients(loss),
                                                 feed.learning_rate)
        with tf.control_dependencies([train_op]):
            applied_step = global_step.assign_add(1)
        self.fetches = [loss, final_state, global_norm, read_step, applied_step]
        finished = queue("finished", [tf.int32], "/job:ps/task:0", capacity=num_workers)
        self.finish_own = finished.enqueue([rank])
        self.wait_for_all = [finished.dequeue() for _ in range(num_workers)]
        self.staleness, self.last_applied = [], 0

    def run(self, cluster, session, step, step_feed):
        loss, state, norm, read, applied = cluster.run(session, self.fetches, step_feed,
                                                       timeout=120 if step == 0 else None)
        self.staleness.append(int(applied - 1 - read))
        # The words of every update applied since this worker's previous one, its own included.
        words = int(applied - self.last_applied) * self.config.words_per_batch // self.num_workers
        self.last_applied = applied
        return loss, state, norm, words

    def finish(self, cluster, session):
        cluster.run(session, self.finish_own)
        if not self.chief:
            return {}
        cluster.run(session, self.wait_for_all, timeout=600)  # the checkpoint holds every worker's updates
        return {"mode": "async", "staleness": {"chief_mean": float(np.mean(self.staleness)),
                                               "chief_max": max(self.staleness),
                                               "chief_histogram": np.bincount(self.staleness).tolist()}}


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


def print_placement(lm):
    print("[run_tf] placement:", flush=True)
    for part in tf.nest.flatten(lm.variable_list):
        size = part.shape.num_elements() * 4
        print(f"[run_tf]   {part.op.name:24s} {str(part.shape.as_list()):14s} {size:>12,d} bytes  {part.device}",
              flush=True)


if __name__ == "__main__":
    harness.main(main)
