"""Parallax's hybrid architecture: sparse variables on parameter servers, dense variables replicated on the
workers and averaged by allreduce (Kim et al., "Parallax: Sparsity-aware Data Parallel Training of Deep
Neural Networks", EuroSys 2019, arXiv:1808.02621).

    make run-parallax WORKERS=2 PS=1

Parallax itself needs its own TensorFlow 1.x fork and Python 2.7/3.6 and cannot be installed on a current
Python (docs/setup.md). This runner rebuilds its architecture on real engines, TensorFlow's distributed
runtime for the parameter servers and Horovod for the allreduce; it does not run Parallax's code.

As Parallax does, it decides placement from the gradients: a variable whose gradient is tf.IndexedSlices
is sparse and lives on the parameter servers (the embedding, and lm1b's softmax, each in --partitions parts,
round robin as Parallax's TensorFlow 1 split them, spread by size); every
other variable is dense, replicated on every worker and averaged with hvd.allreduce. Each step, in one
session.run per worker: every worker sends its sparse gradient, tagged with the step, to a queue of its
own on the parameter servers and allreduces its dense gradients; the chief takes exactly one sparse
gradient from each worker, averages them (or sums them, --average_sparse=false, Parallax's default),
computes the global norm from both kinds, applies the sparse update on the parameter servers and hands
every worker the clipping factor, with which every worker applies the same dense update to its replica.

With --local_aggregation, the workers of one machine (one host of --worker_hosts) first put their sparse
gradients into queues on the machine's first worker, which sums them and sends one gradient per machine.
"""

import harness.determinism  # first: it fixes TensorFlow's kernels before TensorFlow loads
from harness import data, flags, gradient_queues, grpc_cluster, placement, runner_flags, training
from harness.checkpoints import Checkpoints
from harness.recorder import Recorder, remove_stale_outputs
from harness.training import StepFeed
import tensorflow as tf

import model

try:
    import horovod.tensorflow as hvd
except ImportError as error:  # absent, or built against another TensorFlow
    hvd, HOROVOD_ERROR = None, error


def hybrid_placement(kinds, num_ps, worker_device):
    """A device function: sparse variables (or their parts) on the parameter servers, spread by size; every
    other op without a device of its own on this worker."""
    greedy = placement.GreedyBySize(num_ps)

    def place(op):
        if op.type == "VarHandleOp" and kinds.get(op.name.split("/part_")[0]) == "sparse":
            return f"/job:ps/task:{greedy(op)}"
        return op.device or worker_device
    return place


def variable_kinds(config, seed, batches, rows):
    """Parallax: {variable: "sparse" or "dense"} from the types of the model's gradients, built once in a
    scratch graph."""
    with tf.Graph().as_default():
        scratch = model.LSTMLanguageModel(config, seed)
        feed = StepFeed(config, batches, rows)
        return placement.gradient_kinds(scratch.variables, scratch.worker_gradients(
            scratch.loss(feed.inputs, feed.targets, feed.initial_state,
                         candidates=scratch.sampled_candidates(seed, feed.step))[0]))


def send_sparse_gradients(args, parts, gradients, step, rank, num_workers):
    """Parallax: the sparse gradients go to the parameter servers, exactly one per worker per step, or with
    --local_aggregation one per machine, the sum of its workers' on its first worker. Returns (this worker's
    send ops, the gradients the chief receives (one list per sender), the number of senders, the devices
    this worker's session needs)."""
    send, sender, num_senders, peers = [], rank, num_workers, ["/job:ps"]
    if args.local_aggregation:
        groups = placement.machines(args.worker_hosts)
        sender, num_senders = next((m, len(groups)) for m, group in enumerate(groups) if rank in group)
        group = groups[sender]
        send, from_workers = gradient_queues.collect_gradients(parts, gradients, step, group.index(rank), len(group),
                                                               rank == group[0], f"/job:worker/task:{group[0]}")
        if rank == group[0]:
            gradients = [model.deduplicate(model.concatenate_slices(g)) for g in zip(*from_workers)]
        else:
            gradients, peers = None, peers + [f"/job:worker/task:{group[0]}"]
    received = None
    if gradients is not None:
        to_ps, received = gradient_queues.collect_gradients(parts, gradients, step, sender, num_senders, rank == 0)
        send += to_ps
    return send, received, num_senders, peers


def chief_sparse_update(config, lm, sparse, parts, received, dense_norms, scale_queues, learning_rate, divisor):
    """Parallax: the chief combines the sparse gradients on their parameter servers, computes the global norm
    from both kinds (`dense_norms`: the dense variables' prepared gradients and squared norms, by name), applies
    the sparse update there and hands every worker the clipping factor. Returns (the publishing ops, the ops
    that let the workers start, the sparse rows received this step)."""
    variables = lm.variable_list
    names = list(lm.variables)
    combined, rows = [], []
    for part, gradients in zip(parts, zip(*received)):
        with tf.device(part.device):  # on the part's parameter server: no round trip through the chief
            combined.append(model.concatenate_slices(gradients, divisor))
            rows += [tf.shape(g.values)[0] for g in gradients]  # elsewhere, the rows themselves would travel
    combined = tf.nest.pack_sequence_as([variables[i] for i in sparse], combined)
    rows_received = tf.add_n(rows + [0])
    sparse_norms = {names[i]: model.prepare_gradient(lm, names[i], g) for i, g in zip(sparse, combined)}
    norms = {**dense_norms, **sparse_norms}
    global_norm, scale = model.clip_scale(config, [norms[name][1] for name in names])
    with tf.control_dependencies([model.apply_gradient(lm, name, sparse_norms[name][0], scale, learning_rate)
                                  for name in sparse_norms]):
        publish = [q.enqueue([scale, global_norm]) for q in scale_queues]
    start = [q.enqueue([0.0, 0.0]) for q in scale_queues]
    return publish, start, rows_received


class HybridStep:
    """One step of every worker, in one session.run: dense gradients allreduced and kept on every worker,
    sparse ones sent to the parameter servers, the chief's sparse update and clipping factor, then the dense
    update with that factor on every replica."""

    def __init__(self, args, config, lm, kinds, feed, rank, num_workers):
        chief = rank == 0
        loss, final_state = feed.loss(lm, args.seed)
        gradients, variables, names = lm.worker_gradients(loss), lm.variable_list, list(lm.variables)
        self.sparse = [i for i, name in enumerate(names) if kinds[name] == "sparse"]
        # Parallax: dense gradients are averaged by allreduce, and kept on every worker.
        dense_norms = {name: model.prepare_gradient(lm, name, hvd.allreduce(g, op=hvd.Average))
                       for name, g in zip(names, gradients) if kinds[name] == "dense"}
        parts = tf.nest.flatten([variables[i] for i in self.sparse])
        send, received, self.num_senders, self.peers = send_sparse_gradients(
            args, parts, tf.nest.flatten([gradients[i] for i in self.sparse]), feed.step, rank, num_workers)
        scale_queues = [gradient_queues.queue(f"scale/worker{r}", [tf.float32, tf.float32], "/job:ps/task:0")
                        for r in range(num_workers)]
        if chief:
            publish, self.start, rows_received = chief_sparse_update(
                config, lm, self.sparse, parts, received, dense_norms, scale_queues, feed.learning_rate,
                num_workers if args.average_sparse else 1)
        self.wait_for_start = scale_queues[rank].dequeue()
        scale, global_norm = scale_queues[rank].dequeue()  # the chief's clipping factor of this step
        dense_update = [model.apply_gradient(lm, name, dense_norms[name][0], scale, feed.learning_rate)
                        for name in dense_norms]
        global_loss = hvd.allreduce(loss, op=hvd.Average)
        step_op = [send, dense_update] + ([publish] if chief else [])
        self.fetches = [global_loss, final_state, global_norm, step_op] + ([rows_received] if chief else [])


def train(args, config, cluster, lm, kinds, hybrid, feed, num_workers):
    """Initialises (the dense replicas from rank 0, the sparse variables by the chief), runs the steps and,
    on the chief, records them and writes the checkpoint."""
    chief = args.task_index == 0
    done = grpc_cluster.run_over(len(args.ps_hosts))
    saver = lm.saver()
    checkpoints = Checkpoints(args, saver, num_workers)
    carried = gradient_queues.CarriedState(args.task_index, num_workers, feed.state_shape)
    replicated = lm.state([name for name in lm.variables if kinds[name] == "dense"])  # with their accumulators
    if chief:
        placement.print_placement("run_parallax", lm, kinds)

    with cluster.session(tf.compat.v1.get_default_graph(), hybrid.peers) as session:
        session.run(tf.compat.v1.variables_initializer(replicated))
        first_step, state = 0, None
        if chief:  # the first run waits for the parameter servers to come up
            cluster.run(session, tf.compat.v1.variables_initializer(
                lm.state([name for name in lm.variables if kinds[name] == "sparse"])), starting=True)
            if args.resume:
                first_step, state = checkpoints.restore(session)
        session.run(hvd.broadcast_variables(replicated, root_rank=0))  # Parallax: rank 0's dense values
        if args.resume:  # every worker continues from the chief's step, with its rows of the state
            first_step, state = carried.share(cluster, session, first_step, state)
        if chief:
            cluster.run(session, hybrid.start)
            recorder = Recorder(args, config, "run_parallax", num_workers, first_step if args.resume else None)
        cluster.run(session, hybrid.wait_for_start, starting=True)

        def run_step(step, state):
            step_loss, state, norm, _, *rows = cluster.run(session, hybrid.fetches, feed(step, state),
                                                           starting=step == first_step)
            # Only the chief fetches the rows the parameter servers received, and only the chief records.
            return state, step_loss, config.words_per_batch, (
                {"grad_norm": norm, "sparse_rows_received": rows[0]} if chief else {})

        def after_step(done, state):
            if checkpoints.due(done, args.steps):
                everyone = carried.gather(cluster, session, state)  # every worker's rows, to the chief
                if chief:
                    checkpoints.save(session, done, everyone)
        training.loop(args.steps, run_step, recorder.step if chief else None, first_step, state, after_step)
        if chief:
            recorder.finish(session, saver, parameter_servers=len(args.ps_hosts), partitions=args.partitions,
                            partition_strategy=args.partition_strategy, average_sparse=args.average_sparse,
                            local_aggregation=args.local_aggregation, sparse_senders=hybrid.num_senders,
                            variable_kinds=kinds)
            cluster.run(session, done)  # the parameter servers may exit


def main():
    args = runner_flags.parse("run_parallax", __doc__)
    if args.job_name == "worker" and args.task_index == 0:  # the chief: this run's outputs are its
        remove_stale_outputs(args)
    if hvd is None:
        raise harness.UsageError(f"Horovod is not usable ({HOROVOD_ERROR}): run make setup")
    config = flags.model_config(args)
    cluster = grpc_cluster.Cluster(args)
    if args.job_name == "ps":
        return grpc_cluster.serve(cluster, args)
    hvd.init()  # Parallax: every worker is also a Horovod rank, the same as its task index
    rank, num_workers = args.task_index, len(args.worker_hosts)
    if (hvd.rank(), hvd.size()) != (rank, num_workers):
        raise harness.UsageError(f"Horovod rank {hvd.rank()} of {hvd.size()} is not worker {rank} of {num_workers}")
    rows = data.shard(config.batch_size, rank, num_workers)
    batches = data.load(args, config)

    tf.compat.v1.disable_eager_execution()
    kinds = variable_kinds(config, args.seed, batches, rows)
    feed = StepFeed(config, batches, rows)
    with tf.compat.v1.device(hybrid_placement(kinds, len(args.ps_hosts), f"/job:worker/task:{rank}")):
        lm = model.LSTMLanguageModel(config, args.seed, args.partitions, args.partition_strategy)
        hybrid = HybridStep(args, config, lm, kinds, feed, rank, num_workers)
    train(args, config, cluster, lm, kinds, hybrid, feed, num_workers)


if __name__ == "__main__":
    harness.main(main)
