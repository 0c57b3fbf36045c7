"""The synchronous protocol of the parameter-server runners: queues shared by name across the tasks' graphs, exactly
one gradient per worker (or machine) per step, and the workers' carried states; docs/architecture.md explains."""
import numpy as np

from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import tensorflow as tf  # noqa: E402


def queue(name, dtypes, device, capacity=1, shapes=None):
    """A queue on `device` that every task's graph names alike, so they all share it."""
    with tf.device(device):
        return tf.queue.FIFOQueue(capacity, dtypes, shapes, shared_name=name, name=name.replace("/", "_"))


def start_gate(rank, num_workers):
    """(the chief's ops that open the gate once every other worker waits at it, worker `rank`'s op that waits for
    it): no worker reads the variables before the chief has initialised them, and an asynchronous chief's
    measured steps do not begin before the others train."""
    started = [queue(f"started/worker{r}", [tf.int32], "/job:ps/task:0") for r in range(num_workers)]
    ready = queue("ready", [tf.int32], "/job:ps/task:0", max(num_workers - 1, 1), [[]])
    if rank == 0:
        waited = [ready.dequeue_many(num_workers - 1)] if num_workers > 1 else []
        with tf.control_dependencies(waited):
            opened = [q.enqueue([0]) for q in started]
        return opened, started[rank].dequeue()
    with tf.control_dependencies([ready.enqueue([rank])]):
        return None, started[rank].dequeue()


def all_sum(value, step, rank, num_workers):
    """The sum of every worker's scalar `value` of this step, on every worker: each sends its own to every
    worker's queue, step-tagged, and adds up the W it receives (whole numbers: any order gives the same bits)."""
    inboxes = [queue(f"sum/worker{r}", [tf.int64, tf.float32], "/job:ps/task:0", num_workers, [[], []])
               for r in range(num_workers)]
    sent = [inbox.enqueue([step, value]) for inbox in inboxes]
    with tf.device(inboxes[rank].queue_ref.device), tf.control_dependencies(sent):
        tags, values = inboxes[rank].dequeue_many(num_workers)
        with tf.control_dependencies([tf.debugging.assert_equal(tags, step, message="stale count")]):
            return tf.reduce_sum(values)


class CarriedState:
    """The workers' carried state, through queues on the first server: gathered in worker (row) order for the
    chief's checkpoints, and handed back with the step in a resumed run."""

    def __init__(self, rank, num_workers, state_shape):
        self.rank, self.num_workers, self.stateful = rank, num_workers, state_shape is not None
        shape = state_shape or [0]
        self.own = tf.compat.v1.placeholder(tf.float32, shape)
        states = [queue(f"state/worker{r}", [tf.float32], "/job:ps/task:0") for r in range(num_workers)]
        self.send, self.gathered = states[rank].enqueue([self.own]), tf.concat([q.dequeue() for q in states], 0)
        self.step = tf.compat.v1.placeholder(tf.int64, [])
        self.rows = [tf.compat.v1.placeholder(tf.float32, shape) for _ in range(num_workers)]
        resumed = [queue(f"resume/worker{r}", [tf.int64, tf.float32], "/job:ps/task:0") for r in range(num_workers)]
        self.hand_out = [q.enqueue([self.step, rows]) for q, rows in zip(resumed, self.rows)]
        self.take = resumed[rank].dequeue()

    def gather(self, cluster, session, state):
        """Every worker sends its rows; the chief gets every worker's (the others, and without state: None)."""
        if not self.stateful:
            return None
        cluster.run(session, self.send, {self.own: state})
        return cluster.run(session, self.gathered) if self.rank == 0 else None

    def share(self, cluster, session, step, state):
        """The chief hands every worker `step` and its rows of `state`; every worker returns (step, its rows)."""
        if self.rank == 0:
            rows = np.split(state, self.num_workers, axis=0) if self.stateful else [np.zeros([0], np.float32)] * \
                self.num_workers
            cluster.run(session, self.hand_out, {self.step: step, **dict(zip(self.rows, rows))})
        step, own = cluster.run(session, self.take, starting=True)
        return int(step), own if self.stateful else None


def collect_gradients(parts, gradients, step, sender, num_senders, collect, device=None):
    """Exactly one gradient per sender (a worker, or a machine with --local_aggregation) per step, step-tagged, in a
    queue per sender and part on `device` (default: the part's server); a stale tag fails. Return the enqueue ops
    and, where `collect`, every sender's gradients in sender order."""
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
