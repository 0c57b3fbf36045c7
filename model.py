"""The word-level LSTM language model of Zaremba, Sutskever & Vinyals 2014, "Recurrent Neural Network
Regularization" (arXiv:1409.2329), as tensorflow/models' ptb_word_lm.py builds it, and its update rule; plus
`lm1b`, a scaled-down version of the sampled-softmax model of Parallax's LM1B benchmark.

Defined once; every runner builds exactly this graph (TF1-style graph mode, which between-graph
parameter-server training needs) and applies exactly this update.

Variables, by the names the checkpoints use (d = config.output_size: the hidden size, or the projection's):

    name                shape                   gradient
    embedding           [vocab, d]              SPARSE  tf.IndexedSlices: only the looked-up rows
    lstm_<l>/kernel     [2*d, 4*hidden]         dense   gates i, j, f, o of layer l = 0, 1, ...
    lstm_<l>/bias       [4*hidden]              dense
    lstm_<l>/projection [hidden, d]             dense   only with a projection (lm1b)
    softmax_w           [vocab, d]              dense; SPARSE with a sampled softmax (lm1b)
    softmax_b           [vocab]                 dense; SPARSE with a sampled softmax (lm1b)

softmax_w is stored [vocab, d] in every config, one row per word, so that a sampled softmax gathers (and
a partitioner splits) it by row like the embedding. The hybrid runner places variables by that last
column: sparse ones on parameter servers, dense ones replicated and allreduced. Every sparse variable can
be split by rows into parts (`partitions`).

Determinism contract:
- initial values come from a stateless generator keyed by (seed, crc32 of the variable's name), built in the
  graph on the variable's device; a part of a partitioned variable generates exactly its rows of the whole
  value, so the values depend neither on the runner nor on the partitioning;
- dropout masks are drawn for the whole global batch from (seed, step) and sliced by global row, so
  sharding the batch cannot change them; the sampled softmax's candidates come from (seed, step) alone, the
  same for every worker;
- the update is applied to the gradient of the global batch, combined from per-worker gradients in one
  documented order (`average_worker_gradients`), so a W-worker run can reproduce it bit for bit.
"""
import dataclasses
import math
import zlib

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Config:
    """Hyperparameters, with the names of ptb_word_lm.py (and of Parallax's lm1b for the last two)."""
    name: str
    vocab_size: int
    hidden_size: int      # LSTM units (the size of the cell state)
    num_layers: int
    num_steps: int        # unrolled time steps per training step (truncated backpropagation)
    batch_size: int       # rows of the GLOBAL batch; each of W workers trains batch_size / W of them
    init_scale: float     # initial values are uniform in [-init_scale, init_scale]
    learning_rate: float
    max_grad_norm: float  # clip the global gradient norm to this; 0 disables clipping
    keep_prob: float      # dropout keep probability; 1.0 disables dropout
    max_epoch: int        # epochs at the initial learning rate ...
    lr_decay: float       # ... after which it is multiplied by lr_decay every epoch
    projection_size: int = 0  # each LSTM layer's output projected to this size (LSTMCell's num_proj); 0: none
    num_sampled: int = 0      # a sampled softmax over this many candidates per step; 0: the full softmax

    @property
    def output_size(self):
        """The size of an embedding row, of every LSTM layer's output and of a softmax_w row."""
        return self.projection_size or self.hidden_size

    @property
    def words_per_batch(self):
        return self.batch_size * self.num_steps


# Parallax's LM1B example (snuspl/parallax, examples/lm1b; arXiv:1808.02621) against `lm1b` here. Only the
# width of the rows shrinks: the vocabulary is the paper's, so a step touches the same few of its rows, and
# the LSTM, the candidates and the batch are the paper's, so a step computes what one GPU's step does.
#
#                     Parallax           lm1b               why
#   vocabulary        793,470            793,470            kept: the rows a step touches are the paper's fraction
#   embedding         512                32                 793,470 x 32 x 4 bytes = 101.6 MB per table (paper:
#   projection        512                32                 1.6 GB each, which 2 cores cannot train)
#   LSTM              1 layer, 2048      1 layer, 2048      kept: 2.4 MB of dense variables (paper 37.8 MB)
#   sampled softmax   8,192 candidates   8,192              kept
#   unrolled steps    20                 20                 kept
#   batch             128 per GPU        128 global         one worker's step (W = 1) about 0.9 s on one core
#                                                           here; W workers train 128/W rows each
#   shards            32                 --partitions=N     placement is the runner's (--partitions=32 is theirs)
#   optimiser         Adagrad, lr 0.2    SGD, lr 0.2        the one update rule of every config here
#   gradient clipping 10                 10
#   dropout           keep 0.9           keep 0.9
#   forget-gate bias  +1                 0                  ptb_word_lm's cell, as in every config here
#   initial values    unit-scaling       uniform +-0.05     one initialiser for every config here
# (Parallax's numbers are those of its example as the paper ran it; a later revision of its
# language_model.py has a 128-unit state and batch x steps candidates.)

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
    # Parallax's LM1B benchmark, scaled down (the table above): both big tables get sparse gradients.
    "lm1b": Config("lm1b", vocab_size=793_470, hidden_size=2048, num_layers=1, num_steps=20, batch_size=128,
                   init_scale=0.05, learning_rate=0.2, max_grad_norm=10.0, keep_prob=0.9,
                   max_epoch=4, lr_decay=0.5, projection_size=32, num_sampled=8192),
    # lm1b's code paths at test size; a projection of 6 puts partitions at rows that do not start a Philox
    # block of 4 numbers.
    "lm1b-tiny": Config("lm1b-tiny", vocab_size=500, hidden_size=16, num_layers=1, num_steps=5, batch_size=4,
                        init_scale=0.1, learning_rate=0.2, max_grad_norm=10.0, keep_prob=0.9,
                        max_epoch=4, lr_decay=0.5, projection_size=6, num_sampled=32),
}


def variable_shapes(config):
    """{name: shape} of every trainable variable, in the canonical order used everywhere."""
    h, d, v = config.hidden_size, config.output_size, config.vocab_size
    shapes = {"embedding": (v, d)}
    for layer in range(config.num_layers):
        shapes[f"lstm_{layer}/kernel"] = (2 * d, 4 * h)
        shapes[f"lstm_{layer}/bias"] = (4 * h,)
        if config.projection_size:
            shapes[f"lstm_{layer}/projection"] = (h, d)
    shapes["softmax_w"] = (v, d)
    shapes["softmax_b"] = (v,)
    return shapes


def sparse_variables(config):
    """The variables whose gradient is tf.IndexedSlices: the embedding, and the softmax when it is sampled."""
    return ("embedding", "softmax_w", "softmax_b") if config.num_sampled else ("embedding",)


def state_shape(config, rows):
    """The LSTM state that `rows` rows carry from step to step: per layer and row, the cell state (hidden_size)
    followed by the output (output_size)."""
    return [config.num_layers, rows, config.hidden_size + config.output_size]


_PHILOX = 1               # tf.random.Algorithm.PHILOX: a counter-based generator, 4 numbers per counter value
_SAMPLER_STREAM = 0x5A3   # folded into (seed, step): the candidates' stream, apart from the dropout masks'


def initial_value(config, seed, name, first_row=0, rows=None):
    """Rows [first_row, first_row + rows) of a variable's initial value, as a graph tensor: uniform in
    [-init_scale, init_scale], float32, from a stateless generator keyed by (seed, crc32 of the name).

    Element k of the whole row-major value is number k % 4 of the Philox block at counter k // 4, so a
    part starts its generator at the block of its first element and drops the numbers before it: the
    parts of a partitioned variable hold exactly the rows of the whole value, and no process ever builds
    (or sends) more than its own rows."""
    shape = variable_shapes(config)[name]
    rows = shape[0] - first_row if rows is None else rows
    row_size = math.prod(shape[1:])
    block, skip = divmod(first_row * row_size, 4)
    key, _ = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.constant([seed, zlib.crc32(name.encode())], tf.int64))
    uniform = tf.raw_ops.StatelessRandomUniformV2(shape=[skip + rows * row_size], key=key,
                                                  counter=tf.constant([block, 0], tf.uint64), alg=_PHILOX)
    values = tf.reshape(uniform[skip:], [rows, *shape[1:]])
    return values * (2 * config.init_scale) - config.init_scale


class LSTMLanguageModel:
    """The variables (created in the current device scope) and the forward pass of one worker's rows."""

    def __init__(self, config, seed, partitions=1):
        """Creates the variables in the current device scope; every sparse variable is split along its rows
        into `partitions` parts (the parameter-server runners spread them over their servers)."""
        self.config = config
        self.partitioned = sparse_variables(config) if partitions > 1 else ()
        self.variables = {}
        for name, shape in variable_shapes(config).items():
            def initializer(shape, dtype=tf.float32, partition_info=None, name=name):
                # A part gets its rows of the whole value: initial values do not depend on partitioning.
                first_row = partition_info.var_offset[0] if partition_info else 0
                return initial_value(config, seed, name, first_row, shape[0])

            partitioner = tf.compat.v1.fixed_size_partitioner(partitions) if name in self.partitioned else None
            self.variables[name] = tf.compat.v1.get_variable(name, shape, tf.float32, initializer,
                                                             partitioner=partitioner)

    def parts(self, name):
        """A variable, or the list of its parts if it is partitioned."""
        return list(self.variables[name]) if name in self.partitioned else self.variables[name]

    @property
    def variable_list(self):
        """The variables in canonical order; a partitioned one is the list of its parts."""
        return [self.parts(name) for name in self.variables]

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
            [sites, c.batch_size, c.num_steps, c.output_size],
            seed=tf.stack([tf.constant(seed, tf.int64), tf.cast(step, tf.int64)]))
        masks = tf.where(uniform < c.keep_prob, 1.0 / c.keep_prob, 0.0)
        return masks[:, rows]

    def sampled_candidates(self, seed, step):
        """The sampled softmax's candidate words of step `step` (int32 [num_sampled]), or None with the full
        softmax: log-uniform (Zipfian) over the vocabulary, with replacement, as TF's
        log_uniform_candidate_sampler draws them, but from a stateless generator on (seed, step) alone. Every
        worker, and every shard of run.py --emulate_workers, draws the same candidates (TF's samplers keep
        state of their own)."""
        c = self.config
        if not c.num_sampled:
            return None
        stream = tf.random.experimental.stateless_fold_in(
            tf.stack([tf.constant(seed, tf.int64), tf.cast(step, tf.int64)]), _SAMPLER_STREAM)
        uniform = tf.random.stateless_uniform([c.num_sampled], seed=stream, dtype=tf.float64)
        words = tf.cast(tf.floor(tf.exp(uniform * math.log(c.vocab_size + 1))), tf.int32) - 1
        return tf.minimum(words, c.vocab_size - 1)  # exp may round up to vocab_size + 1

    def _sampled_softmax_cross_entropy(self, output, labels, candidates):
        """The cross-entropy of each position against its label and the shared candidates: what
        tf.nn.sampled_softmax_loss computes (Jean et al. 2015), with its defaults: logits minus the log of the
        expected count of each word among the candidates, and a candidate equal to a position's label is no
        negative for it. Written out because TF's version draws a seed for an op that needs none, which op
        determinism refuses. The gradients of softmax_w and softmax_b are tf.IndexedSlices: their rows of
        the labels, then of the candidates."""
        c = self.config

        def log_expected_count(words):  # of each word in num_sampled log-uniform draws
            probability = tf.math.log1p(1.0 / tf.cast(words + 1, tf.float64)) / math.log(c.vocab_size + 1)
            return tf.cast(tf.math.log(c.num_sampled * probability), tf.float32)

        words = tf.concat([labels, candidates], 0)
        weights = tf.nn.embedding_lookup(self.parts("softmax_w"), words)  # [positions + num_sampled, output_size]
        biases = tf.nn.embedding_lookup(self.parts("softmax_b"), words)
        positions = tf.shape(labels)[0]
        true_logits = (tf.reduce_sum(output * weights[:positions], axis=1) + biases[:positions]
                       - log_expected_count(labels))
        sampled_logits = (tf.matmul(output, weights[positions:], transpose_b=True) + biases[positions:]
                          - log_expected_count(candidates))
        sampled_logits = tf.where(labels[:, None] == candidates[None, :], tf.float32.min, sampled_logits)
        logits = tf.concat([true_logits[:, None], sampled_logits], axis=1)  # the label is class 0
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.zeros_like(labels), logits=logits)

    def loss(self, inputs, targets, initial_state, dropout_masks=None, candidates=None):
        """Forward pass of one worker's rows.

        inputs, targets: int32 [rows, num_steps]; initial_state: float32 state_shape(config, rows); candidates:
        sampled_candidates() of the step, needed with a sampled softmax. Returns (loss, final_state). The loss
        is ptb_word_lm's training objective: the cross-entropy (of the full or of the sampled softmax) summed
        over the unrolled steps and averaged over the rows, so averaging the gradients of W equal shards gives
        the gradient of the global batch."""
        c = self.config
        rows = inputs.shape[0]
        x = tf.nn.embedding_lookup(self.parts("embedding"), inputs)  # [rows, steps, output_size]
        if dropout_masks is not None:
            x = x * dropout_masks[0]
        steps = tf.unstack(x, num=c.num_steps, axis=1)
        final_state = []
        for layer in range(c.num_layers):
            # Read once per step: every use of a resource variable is a read of its own, and from a parameter
            # server every read is a transfer of its own (num_steps copies of the kernel per step, not one).
            kernel = tf.identity(self.variables[f"lstm_{layer}/kernel"])
            bias = tf.identity(self.variables[f"lstm_{layer}/bias"])
            projection = tf.identity(self.variables[f"lstm_{layer}/projection"]) if c.projection_size else None
            cell, output = tf.split(initial_state[layer], [c.hidden_size, c.output_size], axis=1)
            outputs = []
            for x_t in steps:
                gates = tf.matmul(tf.concat([x_t, output], axis=1), kernel) + bias
                i, j, f, o = tf.split(gates, 4, axis=1)  # ptb_word_lm's BasicLSTMCell, forget_bias=0
                cell = tf.sigmoid(f) * cell + tf.sigmoid(i) * tf.tanh(j)
                output = tf.sigmoid(o) * tf.tanh(cell)
                if projection is not None:
                    output = tf.matmul(output, projection)
                outputs.append(output)
            final_state.append(tf.concat([cell, output], axis=1))
            if dropout_masks is not None:
                outputs = tf.unstack(tf.stack(outputs, axis=1) * dropout_masks[layer + 1], axis=1)
            steps = outputs
        output = tf.reshape(tf.stack(steps, axis=1), [-1, c.output_size])  # row-major: (row, step)
        labels = tf.reshape(targets, [-1])
        if c.num_sampled:
            if candidates is None:
                raise ValueError("a sampled softmax needs sampled_candidates(seed, step): TF's own samplers are "
                                 "stateful and would differ between workers")
            cross_entropy = self._sampled_softmax_cross_entropy(output, labels, candidates)
        else:
            logits = tf.matmul(output, self.variables["softmax_w"], transpose_b=True) + self.variables["softmax_b"]
            cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        loss = tf.reduce_sum(cross_entropy) / rows
        return loss, tf.stack(final_state)

    def worker_gradients(self, loss):
        """One worker's gradients, structured as `variable_list`.

        A sparse variable's gradient is a tf.IndexedSlices with one row per looked-up position; it is reduced
        here to one row per distinct word, summed in position order. Every architecture then only has to add
        up one row per worker, which is what lets a sparse (allgather, sparse accumulator) and a dense
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

    A sparse gradient is first summed to one row per word (rows in the order they arrive: what a dense sum
    of them would give, bit for bit), and only those rows are updated, so its cost follows the rows touched,
    not the vocabulary. A dense gradient of a sparse variable (Horovod's --sparse_as_dense) gets the same
    bits: its untouched rows are 0, and var - lr * 0 == var.

    A variable may come as the list of its partitions along the first axis, with the list of their
    gradients. The arithmetic of each part runs on the part's device, and the result does not depend on the
    partitioning (see gradient_and_squared_norm). The three stages are separate functions for an
    architecture that runs them in different places (run_parallax.py); composed as here, they are the rule."""
    prepared, squares = zip(*[gradient_and_squared_norm(v, g) for v, g in zip(variables, gradients)])
    global_norm, scale = clip_scale(config, squares)
    updates = [apply_gradient(v, g, scale, learning_rate) for v, g in zip(variables, prepared)]
    return tf.group(*updates), global_norm


def _parts(variable, gradient):
    return (variable, gradient) if isinstance(variable, list) else ([variable], [gradient])


def _row_squares(values):
    """The sum of squares of each row (of each element, for a vector)."""
    return tf.reduce_sum(tf.square(values), axis=list(range(1, values.shape.rank)))


def gradient_and_squared_norm(variable, gradient):
    """(the gradient of each part ready for apply_gradient: dense, or tf.IndexedSlices with each row once;
    the variable's squared gradient norm).

    The squared norm is the sum, in row order, of one number per row of the WHOLE variable: its sum of
    squares, 0 for an untouched row. A sparse gradient's row sums are scattered into that vector (as long as
    the vocabulary, but one number per row, which is cheap), so sparse and dense gradients, and any
    partitioning, give the norm the same bits."""
    prepared, row_squares = [], []
    for part, g in zip(*_parts(variable, gradient)):
        with tf.device(part.device):
            if isinstance(g, tf.IndexedSlices):
                g = deduplicate(g)
                row_squares.append(tf.math.unsorted_segment_sum(_row_squares(g.values), g.indices, part.shape[0]))
            else:
                row_squares.append(_row_squares(g))
            prepared.append(g)
    # Summed where the variable lives: a sparse variable's vector is as long as the vocabulary (3 MB for lm1b),
    # and from a parameter server it would otherwise travel to the worker every step.
    with tf.device(_parts(variable, gradient)[0][0].device):
        return prepared, tf.reduce_sum(tf.concat(row_squares, 0) if len(row_squares) > 1 else row_squares[0])


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


def apply_gradient(variable, gradients, scale, learning_rate):
    """var -= learning_rate * (gradient * scale), part by part on each part's device; a sparse gradient (from
    gradient_and_squared_norm: each row once) as a scatter into its rows only."""
    parts = variable if isinstance(variable, list) else [variable]
    updates = []
    for part, g in zip(parts, gradients):
        with tf.device(part.device):
            if isinstance(g, tf.IndexedSlices):
                updates.append(part.scatter_sub(
                    tf.IndexedSlices(learning_rate * (g.values * scale), g.indices, g.dense_shape)))
            else:
                updates.append(part.assign_sub(learning_rate * (g * scale)))
    return tf.group(*updates)


def learning_rate(config, epoch):
    """The paper's schedule: constant for max_epoch epochs, then decayed by lr_decay per epoch."""
    return config.learning_rate * config.lr_decay ** max(epoch + 1 - config.max_epoch, 0)
