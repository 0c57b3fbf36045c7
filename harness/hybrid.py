"""Parallax's hybrid step (run_parallax.py): sparse variables on the parameter servers, dense ones allreduced.
docs/architecture.md, "How each runner synchronises", explains it."""
from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import tensorflow as tf  # noqa: E402

from harness import gradient_queues, placement, reduction, training, update  # noqa: E402


def hybrid_placement(kinds, num_ps, worker_device):
    """A device function: sparse variables (or parts) on the parameter servers by size, other ops on this worker."""
    greedy = placement.GreedyBySize(num_ps)

    def place(op):
        if op.type == "VarHandleOp" and kinds.get(op.name.split("/part_")[0]) == "sparse":
            return f"/job:ps/task:{greedy(op)}"
        return op.device or worker_device
    return place


def send_sparse_gradients(args, parts, gradients, step, rank, num_workers):
    """Send one sparse gradient per worker (--local_aggregation: per machine) and step. Return (send ops, the
    chief's received gradients per sender, the number of senders, the devices the session needs)."""
    send, sender, num_senders, peers = [], rank, num_workers, ["/job:ps"]
    if args.local_aggregation:
        groups = placement.machines(args.worker_hosts)
        sender, num_senders = next((m, len(groups)) for m, group in enumerate(groups) if rank in group)
        group = groups[sender]
        send, from_workers = gradient_queues.collect_gradients(parts, gradients, step, group.index(rank), len(group),
                                                               rank == group[0], f"/job:worker/task:{group[0]}")
        if rank == group[0]:
            gradients = [reduction.mean(g, 1) for g in zip(*from_workers)]
        else:
            gradients, peers = None, peers + [f"/job:worker/task:{group[0]}"]
    received = None
    if gradients is not None:
        to_ps, received = gradient_queues.collect_gradients(parts, gradients, step, sender, num_senders, rank == 0)
        send += to_ps
    return send, received, num_senders, peers


def chief_sparse_update(params, sparse, parts, received, dense_norms, scale_queues, feed, divisor):
    """The chief's sparse update on the servers, clipped by both kinds' global norm, whose factor it publishes.
    Return (the publishing ops, the ops that let the workers start, the sparse rows received this step)."""
    names = list(params.variables)
    combined, rows = [], []
    for part, gradients in zip(parts, zip(*received)):
        with tf.device(part.device):  # on the part's parameter server: no round trip through the chief
            combined.append(reduction.mean(gradients, divisor))
            rows += [tf.shape(g.values)[0] for g in gradients]  # elsewhere, the rows themselves would travel
    combined = tf.nest.pack_sequence_as([params.variable_list[i] for i in sparse], combined)
    rows_received = tf.add_n(rows + [0])
    sparse_norms = {names[i]: update.prepare_gradient(params, names[i], g) for i, g in zip(sparse, combined)}
    norms = {**dense_norms, **sparse_norms}
    global_norm, scale = update.clip_scale(params.rule, [norms[name][1] for name in names])
    with tf.control_dependencies([update.apply_gradient(params, name, sparse_norms[name][0], scale,
                                                        feed.learning_rate, feed.step) for name in sparse_norms]):
        publish = [q.enqueue([scale, global_norm]) for q in scale_queues]
    start = [q.enqueue([0.0, 0.0]) for q in scale_queues]
    return publish, start, rows_received


class HybridStep:
    """A worker's step in one session.run: dense gradients allreduced, sparse ones sent, the chief's sparse update
    and clipping factor, then the dense update with that factor on every replica."""

    def __init__(self, args, hvd, params, kinds, feed, rank, num_workers):
        chief = rank == 0
        objective, self.final_state = feed.loss(params, args.seed)
        objective = training.worker_objective(objective, lambda count: hvd.allreduce(count, op=hvd.Sum) / hvd.size())
        gradients, names = params.gradients(objective), list(params.variables)
        self.sparse = [i for i, name in enumerate(names) if kinds[name] == "sparse"]
        # Dense gradients are averaged by allreduce (--reduction=exact: in rank order), and kept on every worker.
        dense = [name for name in names if kinds[name] == "dense"]
        means = reduction.horovod_mean([gradients[names.index(name)] for name in dense], hvd, args)
        dense_norms = {name: update.prepare_gradient(params, name, g) for name, g in zip(dense, means)}
        parts = tf.nest.flatten([params.variable_list[i] for i in self.sparse])
        send, received, self.num_senders, self.peers = send_sparse_gradients(
            args, parts, tf.nest.flatten([gradients[i] for i in self.sparse]), feed.step, rank, num_workers)
        scale_queues = [gradient_queues.queue(f"scale/worker{r}", [tf.float32, tf.float32], "/job:ps/task:0")
                        for r in range(num_workers)]
        if chief:
            publish, self.start, rows_received = chief_sparse_update(
                params, self.sparse, parts, received, dense_norms, scale_queues, feed,
                num_workers if args.average_sparse else 1)
        self.wait_for_start = scale_queues[rank].dequeue()
        scale, global_norm = scale_queues[rank].dequeue()  # the chief's clipping factor of this step
        dense_update = [update.apply_gradient(params, name, dense_norms[name][0], scale, feed.learning_rate,
                                              feed.step) for name in dense_norms]
        global_objective = hvd.allreduce(objective, op=hvd.Average)
        step_op = [send, dense_update] + ([publish] if chief else [])
        self.fetches = [global_objective, self.final_state, global_norm, step_op] + ([rows_received] if chief else [])
