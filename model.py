"""The word-level LSTM language model of Zaremba, Sutskever & Vinyals 2014, "Recurrent Neural Network
Regularization" (arXiv:1409.2329), as tensorflow/models' ptb_word_lm.py builds it, and its update rule.

Defined once; every runner builds exactly this graph (TF1-style graph mode, which between-graph
parameter-server training needs) and applies exactly this update.

Variables, by the names the checkpoints use:

    name            shape                   gradient
    embedding       [vocab, hidden]         SPARSE  tf.IndexedSlices: only the looked-up rows
    lstm_<l>/kernel [2*hidden, 4*hidden]    dense   gates i, j, f, o of layer l = 0, 1, ...
    lstm_<l>/bias   [4*hidden]              dense
    softmax_w       [hidden, vocab]         dense
    softmax_b       [vocab]                 dense

The hybrid runner places variables by that last column: sparse ones on parameter servers, dense ones
replicated and allreduced.

Determinism contract:
- initial values come from numpy, seeded by (seed, crc32 of the variable's name): the same in every process,
  whatever the runner or the number of workers;
- dropout masks are drawn for the whole global batch from (seed, step) and sliced by global row, so
  sharding the batch cannot change them;
- the update is applied to the gradient of the global batch, combined from per-worker gradients in one
  documented order (`average_worker_gradients`), so a W-worker run can reproduce it bit for bit.
"""
import dataclasses
import zlib

import numpy as np
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Config:
    """Hyperparameters, with the names of ptb_word_lm.py."""
    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_steps: int        # unrolled time steps per training step (truncated backpropagation)
    batch_size: int       # rows of the GLOBAL batch; each of W workers trains batch_size / W of them
    init_scale: float     # initial values are uniform in [-init_scale, init_scale]
    learning_rate: float
    max_grad_norm: float  # clip the global gradient norm to this; 0 disables clipping
    keep_prob: float      # dropout keep probability; 1.0 disables dropout
    max_epoch: int        # epochs at the initial learning rate ...
    lr_decay: float       # ... after which it is multiplied by lr_decay every epoch

    @property
    def words_per_batch(self):
        return self.batch_size * self.num_steps


CONFIGS = {
    # For tests: seconds on a laptop, yet with dropout, clipping and every code path of the larger ones.
    "tiny": Config("tiny", vocab_size=200, hidden_size=16, num_layers=2, num_steps=5, batch_size=4,
                   init_scale=0.1, learning_rate=1.0, max_grad_norm=5.0, keep_prob=0.9,
                   max_epoch=4, lr_decay=0.5),
    # The paper's "small" (non-regularised) model: ~4.6M parameters, 2 x 200 units.
    "small": Config("small", vocab_size=10000, hidden_size=200, num_layers=2, num_steps=20, batch_size=20,
                    init_scale=0.1, learning_rate=1.0, max_grad_norm=5.0, keep_prob=1.0,
                    max_epoch=4, lr_decay=0.5),
    # The paper's "medium" model: 2 x 650 units, 50% dropout.
    "medium": Config("medium", vocab_size=10000, hidden_size=650, num_layers=2, num_steps=35, batch_size=20,
                     init_scale=0.05, learning_rate=1.0, max_grad_norm=5.0, keep_prob=0.5,
                     max_epoch=6, lr_decay=0.8),
}


def variable_shapes(config):
    """{name: shape} of every trainable variable, in the canonical order used everywhere."""
    h, v = config.hidden_size, config.vocab_size
    shapes = {"embedding": (v, h)}
    for layer in range(config.num_layers):
        shapes[f"lstm_{layer}/kernel"] = (2 * h, 4 * h)
        shapes[f"lstm_{layer}/bias"] = (4 * h,)
    shapes["softmax_w"] = (h, v)
    shapes["softmax_b"] = (v,)
    return shapes


SPARSE_VARIABLES = ("embedding",)


def initial_value(config, seed, name):
    """The initial value of one variable: uniform(-init_scale, init_scale), float32, from (seed, name)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return rng.uniform(-config.init_scale, config.init_scale, variable_shapes(config)[name]).astype(np.float32)


class LSTMLanguageModel:
    """The variables (created in the current device scope) and the forward pass of one worker's rows."""

    def __init__(self, config, seed, embedding_partitions=1):
        """Creates the variables in the current device scope; the embedding is split along its rows into
        `embedding_partitions` parts (the parameter-server runner spreads them over its servers)."""
        self.config = config
        self.embedding_partitions = embedding_partitions
        self.variables = {}
        for name, shape in variable_shapes(config).items():
            full_value = initial_value(config, seed, name)

            def initializer(shape, dtype=tf.float32, partition_info=None, full_value=full_value):
                # A partition gets its slice of the full value: initial values do not depend on partitioning.
                offset = partition_info.var_offset if partition_info else [0] * len(shape)
                return tf.constant(full_value[tuple(slice(o, o + n) for o, n in zip(offset, shape))], dtype)

            partitioner = None
            if name == "embedding" and embedding_partitions > 1:
                partitioner = tf.compat.v1.fixed_size_partitioner(embedding_partitions)
            self.variables[name] = tf.compat.v1.get_variable(name, shape, tf.float32, initializer,
                                                             partitioner=partitioner)

    @property
    def variable_list(self):
        """The variables in canonical order; a partitioned one is the list of its parts."""
        return [list(v) if name == "embedding" and self.embedding_partitions > 1 else v
                for name, v in self.variables.items()]

    def dropout_masks(self, seed, step, rows):
        """Dropout masks (keep/keep_prob or 0) for the global rows `rows`, or None without dropout.

        Drawn for the whole global batch from (seed, step) and then sliced, so worker r of W sees exactly the
        rows of the mask a single device would use. One mask per dropout site: the embedding output and the
        output of each LSTM layer."""
        c = self.config
        if c.keep_prob >= 1.0:
            return None
        sites = c.num_layers + 1
        uniform = tf.random.stateless_uniform(
            [sites, c.batch_size, c.num_steps, c.hidden_size],
            seed=tf.stack([tf.constant(seed, tf.int64), tf.cast(step, tf.int64)]))
        masks = tf.where(uniform < c.keep_prob, 1.0 / c.keep_prob, 0.0)
        return masks[:, rows]

    def loss(self, inputs, targets, initial_state, dropout_masks=None):
        """Forward pass of one worker's rows.

        inputs, targets: int32 [rows, num_steps]; initial_state: float32 [layers, 2 (c, h), rows, hidden].
        Returns (loss, final_state). The loss is ptb_word_lm's training objective: the cross-entropy summed
        over the unrolled steps and averaged over the rows, so averaging the gradients of W equal shards
        gives the gradient of the global batch."""
        c = self.config
        rows = inputs.shape[0]
        x = tf.nn.embedding_lookup(self.variable_list[0], inputs)  # [rows, steps, hidden]
        if dropout_masks is not None:
            x = x * dropout_masks[0]
        steps = tf.unstack(x, num=c.num_steps, axis=1)
        final_state = []
        for layer in range(c.num_layers):
            # Read once per step: every use of a resource variable is a read of its own, and from a parameter
            # server every read is a transfer of its own (num_steps copies of the kernel per step, not one).
            kernel = tf.identity(self.variables[f"lstm_{layer}/kernel"])
            bias = tf.identity(self.variables[f"lstm_{layer}/bias"])
            cell, hidden = initial_state[layer][0], initial_state[layer][1]
            outputs = []
            for x_t in steps:
                gates = tf.matmul(tf.concat([x_t, hidden], axis=1), kernel) + bias
                i, j, f, o = tf.split(gates, 4, axis=1)  # ptb_word_lm's BasicLSTMCell, forget_bias=0
                cell = tf.sigmoid(f) * cell + tf.sigmoid(i) * tf.tanh(j)
                hidden = tf.sigmoid(o) * tf.tanh(cell)
                outputs.append(hidden)
            final_state.append(tf.stack([cell, hidden]))
            if dropout_masks is not None:
                outputs = tf.unstack(tf.stack(outputs, axis=1) * dropout_masks[layer + 1], axis=1)
            steps = outputs
        output = tf.reshape(tf.stack(steps, axis=1), [-1, c.hidden_size])  # row-major: (row, step)
        logits = tf.matmul(output, self.variables["softmax_w"]) + self.variables["softmax_b"]
        cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.reshape(targets, [-1]), logits=logits)
        loss = tf.reduce_sum(cross_entropy) / rows
        return loss, tf.stack(final_state)

    def worker_gradients(self, loss):
        """One worker's gradients, structured as `variable_list`.

        The embedding's gradient is a tf.IndexedSlices with one row per looked-up position; it is reduced here
        to one row per distinct word, summed in position order. Every architecture then only has to add up
        one row per worker, which is what lets a sparse (allgather, sparse accumulator) and a dense
        (allreduce) aggregation reach the same bits."""
        flat = tf.nest.flatten(self.variable_list)
        gradients = [deduplicate(g) if isinstance(g, tf.IndexedSlices) else g for g in tf.gradients(loss, flat)]
        return tf.nest.pack_sequence_as(self.variable_list, gradients)


def deduplicate(slices):
    """The same tf.IndexedSlices with each index once, rows summed in order of appearance."""
    unique_indices, position = tf.unique(slices.indices)
    values = tf.math.unsorted_segment_sum(slices.values, position, tf.shape(unique_indices)[0])
    return tf.IndexedSlices(values, unique_indices, slices.dense_shape)


def average_worker_gradients(per_worker):
    """The gradient of the global batch from W workers' gradients (W lists structured as `variable_list`).

    This is the reference combination that the synchronous runners reproduce: dense gradients are summed in
    worker order and multiplied by 1/W (Horovod's allreduce with op=Average); sparse ones are concatenated in
    worker order with their values divided by W (Horovod's allgather path). For W = 2 every reduction is a
    single commutative addition and scaling by 1/2 is exact, so any correct 2-worker run matches this bit for
    bit; for more workers the summation order of each architecture decides the last bits."""
    num_workers = len(per_worker)
    averaged = []
    for grads in zip(*[tf.nest.flatten(gradients) for gradients in per_worker]):
        if isinstance(grads[0], tf.IndexedSlices):
            averaged.append(concatenate_slices(grads, num_workers))
        else:
            total = grads[0]
            for g in grads[1:]:
                total = total + g
            averaged.append(total * (1.0 / num_workers))
    return tf.nest.pack_sequence_as(per_worker[0], averaged)


def concatenate_slices(slices, divisor=1):
    """tf.IndexedSlices of one variable, their rows concatenated in order, the values divided by `divisor`."""
    values = tf.concat([g.values for g in slices], 0)
    return tf.IndexedSlices(values / divisor if divisor != 1 else values, tf.concat([g.indices for g in slices], 0),
                            slices[0].dense_shape)


def sgd_update(config, variables, gradients, learning_rate):
    """The update rule, applied once per step to the gradient of the global batch: plain SGD after clipping
    by global norm (ptb_word_lm's). Returns (train_op, global_norm).

    Sparse gradients are first summed into dense form (rows in the order they arrive), so the norm and the
    update see exactly the same numbers whatever representation an architecture delivers; untouched rows get
    0, and var - lr * 0 == var, so the result equals a sparse update's.

    A variable may come as the list of its partitions along the first axis, with the list of their
    gradients. The arithmetic of each part runs on the part's device, and the result does not depend on the
    partitioning: a variable's squared norm is the sum of its per-row sums of squares, concatenated over
    the parts first. The three stages are separate functions for an architecture that runs them in
    different places (run_parallax.py); composed as here, they are the rule."""
    dense, squares = zip(*[dense_gradient_and_squared_norm(v, g) for v, g in zip(variables, gradients)])
    global_norm, scale = clip_scale(config, squares)
    updates = [apply_gradient(v, g, scale, learning_rate) for v, g in zip(variables, dense)]
    return tf.group(*updates), global_norm


def _parts(variable, gradient):
    return (variable, gradient) if isinstance(variable, list) else ([variable], [gradient])


def dense_gradient_and_squared_norm(variable, gradient):
    """(the dense gradient of each part, the variable's squared gradient norm)."""
    dense, row_squares = [], []
    for part, g in zip(*_parts(variable, gradient)):
        with tf.device(part.device):
            if isinstance(g, tf.IndexedSlices):
                g = tf.math.unsorted_segment_sum(g.values, g.indices, part.shape[0])
            dense.append(g)
            row_squares.append(tf.reduce_sum(tf.square(g), axis=list(range(1, part.shape.rank))))
    return dense, tf.reduce_sum(tf.concat(row_squares, 0) if len(row_squares) > 1 else row_squares[0])


def clip_scale(config, squares):
    """(global norm, factor that clips it to max_grad_norm) from the variables' squared norms, added in
    canonical order, left to right (unlike add_n, whose order is the kernel's)."""
    total = squares[0]
    for square in squares[1:]:
        total = total + square
    global_norm = tf.sqrt(total)
    if not config.max_grad_norm:
        return global_norm, 1.0
    return global_norm, config.max_grad_norm / tf.maximum(global_norm, config.max_grad_norm)


def apply_gradient(variable, dense_parts, scale, learning_rate):
    """var -= learning_rate * (gradient * scale), part by part on each part's device."""
    parts = variable if isinstance(variable, list) else [variable]
    updates = []
    for part, g in zip(parts, dense_parts):
        with tf.device(part.device):
            updates.append(part.assign_sub(learning_rate * (g * scale)))
    return tf.group(*updates)


def learning_rate(config, epoch):
    """The paper's schedule: constant for max_epoch epochs, then decayed by lr_decay per epoch."""
    return config.learning_rate * config.lr_decay ** max(epoch + 1 - config.max_epoch, 0)
