"""The word-level LSTM language model of Zaremba, Sutskever & Vinyals 2014, "Recurrent Neural Network
Regularization" (arXiv:1409.2329), as tensorflow/models' ptb_word_lm.py builds it, and its update rule; plus
`lm1b`, a scaled-down version of the sampled-softmax model of Parallax's LM1B benchmark.

Defined once; every runner builds exactly this graph (TF1-style graph mode, which between-graph
parameter-server training needs) and applies exactly this update. The configurations, the variables'
shapes and how a table is split into parts are in configs.py, which needs no TensorFlow.

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
import math
import zlib

import numpy as np
import tensorflow as tf
from tensorflow.python.training.saving import saveable_object

import configs


def join_rows(parts, strategy):
    """The whole value from its parts' values (tensors with static shapes), rows in the whole's order."""
    if len(parts) == 1:
        return parts[0]
    if strategy == "div":
        return tf.concat(parts, 0)
    total, longest = sum(p.shape[0] for p in parts), parts[0].shape[0]
    padded = [tf.pad(p, [[0, longest - p.shape[0]]] + [[0, 0]] * (p.shape.rank - 1)) for p in parts]
    # Row j of part p is row j * P + p: stacking the parts on a new second axis interleaves them. The padding
    # of the shorter parts lands past the last row.
    return tf.reshape(tf.stack(padded, 1), [-1, *parts[0].shape[1:]])[:total]


def split_rows(whole, rows_of_parts):
    """The inverse of join_rows: each part's rows (`rows_of_parts`, from part_rows) of the whole value."""
    return [whole[rows.start:rows.stop:rows.step] for rows in rows_of_parts]


_PHILOX = 1               # tf.random.Algorithm.PHILOX: a counter-based generator, 4 numbers per counter value
_SAMPLER_STREAM = 0x5A3   # folded into (seed, step): the candidates' stream, apart from the dropout masks'


def initial_value(config, seed, name, rows=None):
    """The rows `rows` (a range; default all) of a variable's initial value, as a graph tensor: uniform in
    [-init_scale, init_scale], float32, from a stateless generator keyed by (seed, crc32 of the name).

    Element k of the whole row-major value is number k % 4 of the Philox block at counter k // 4. A range of
    contiguous rows starts TensorFlow's generator at the block of its first element and drops the numbers
    before it; a strided range (a "mod" part) computes the blocks of its own rows only. Either way a part
    holds exactly its rows of the whole value, and no process builds (or sends) more than its own rows."""
    shape = configs.variable_shapes(config)[name]
    rows = range(shape[0]) if rows is None else rows
    row_size = math.prod(shape[1:])
    key, _ = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.constant([seed, zlib.crc32(name.encode())], tf.int64))
    if rows.step == 1:
        block, skip = divmod(rows.start * row_size, 4)
        uniform = tf.raw_ops.StatelessRandomUniformV2(shape=[skip + len(rows) * row_size], key=key,
                                                      counter=tf.constant([block, 0], tf.uint64), alg=_PHILOX)
        uniform = uniform[skip:]
    else:
        first = tf.range(rows.start, rows.stop, rows.step, dtype=tf.int64) * row_size  # each row's first element
        blocks_per_row = (3 + row_size + 3) // 4  # a row starts anywhere in a block of 4
        blocks = first[:, None] // 4 + tf.range(blocks_per_row, dtype=tf.int64)
        numbers = tf.reshape(_philox_uniform(key, blocks), [len(rows), 4 * blocks_per_row])
        uniform = tf.gather(numbers, first[:, None] % 4 + tf.range(row_size, dtype=tf.int64), batch_dims=1)
    values = tf.reshape(uniform, [len(rows), *shape[1:]])
    return values * (2 * config.init_scale) - config.init_scale


def _philox_uniform(key, blocks):
    """What StatelessRandomUniformV2 gives at counters `blocks` (int64) with `key`: 4 floats in [0, 1) per
    block, computed elementwise with TensorFlow's Philox-4x32-10 (tensorflow/core/lib/random/philox_random.h)
    and its float conversion (random_distributions.h, Uint32ToFloat), so that any set of blocks can be drawn."""
    u32, u64 = tf.uint32, tf.uint64

    def low_high(x):
        return tf.cast(x & tf.constant(0xFFFFFFFF, u64), u32), tf.cast(tf.bitwise.right_shift(x, tf.constant(32, u64)), u32)

    key0, key1 = low_high(tf.cast(key[0], u64))
    c0, c1 = low_high(tf.cast(blocks, u64))
    c2 = c3 = tf.zeros_like(c0)
    for round_ in range(10):
        lo0, hi0 = low_high(tf.constant(0xD2511F53, u64) * tf.cast(c0, u64))
        lo1, hi1 = low_high(tf.constant(0xCD9E8D57, u64) * tf.cast(c2, u64))
        c0, c1, c2, c3 = hi1 ^ c1 ^ key0, lo1, hi0 ^ c3 ^ key1, lo0
        if round_ < 9:
            key0, key1 = key0 + tf.constant(0x9E3779B9, u32), key1 + tf.constant(0xBB67AE85, u32)
    words = tf.stack([c0, c1, c2, c3], axis=-1)
    return tf.bitcast((words & tf.constant(0x7FFFFF, u32)) | tf.constant(0x3F800000, u32), tf.float32) - 1.0


def draws_for_distinct(config):
    """How many log-uniform draws sampled_candidates makes: twice the number at which the expected count of
    distinct words, sum over words of 1 - (1 - p)^n, reaches num_sampled. The count of distinct words is a sum
    of weakly dependent indicators (standard deviation below sqrt(num_sampled)), so twice the draws fall short
    with a probability too small to matter; the graph checks it all the same."""
    vocab, wanted = config.vocab_size, config.num_sampled
    if wanted > vocab:
        raise ValueError(f"{config.name}: {wanted} distinct candidates from a vocabulary of {vocab}")
    log_miss = np.log1p(-np.log1p(1.0 / np.arange(1, vocab + 1)) / math.log(vocab + 1))  # log(1 - p) per word
    low, high = wanted, wanted
    while -np.expm1(high * log_miss).sum() < wanted:
        low, high = high, 2 * high
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if -np.expm1(middle * log_miss).sum() < wanted else (low, middle)
    return 2 * high


class LSTMLanguageModel:
    """The variables (created in the current device scope), their optimiser state, and the forward pass of one
    worker's rows."""

    def __init__(self, config, seed, partitions=1, partition_strategy="mod"):
        """Creates the variables in the current device scope; every sparse variable is split along its rows
        into `partitions` parts (the parameter-server runners spread them over their servers), holding the
        rows `part_rows(rows, partitions, partition_strategy)`. With Adagrad, each variable (part) gets an
        accumulator on its own device, whatever the device scope says."""
        self.config, self.strategy = config, partition_strategy
        self.partitioned = configs.sparse_variables(config) if partitions > 1 else ()
        self.variables, self.accumulators = {}, {}
        for name, shape in configs.variable_shapes(config).items():
            if name in self.partitioned:
                self.variables[name] = [self._variable(f"{name}/part_{p}", config, seed, name, rows)
                                        for p, rows in enumerate(configs.part_rows(shape[0], partitions,
                                                                                   partition_strategy))]
            else:
                self.variables[name] = self._variable(name, config, seed, name, range(shape[0]))
        if config.update_rule.optimizer == "adagrad":
            for name, variable in self.variables.items():
                accumulators = []
                for part in tf.nest.flatten(variable):
                    # Beside its variable: device(None) drops the caller's device functions (a parameter-server
                    # placement would otherwise place it, and count it, as a variable of its own).
                    with tf.compat.v1.device(None), tf.compat.v1.device(part.device):
                        accumulators.append(tf.compat.v1.get_variable(
                            f"{part.op.name}/Adagrad", part.shape, tf.float32,
                            tf.compat.v1.constant_initializer(config.update_rule.initial_accumulator),
                            trainable=False))
                self.accumulators[name] = accumulators if isinstance(variable, list) else accumulators[0]

    @staticmethod
    def _variable(variable_name, config, seed, name, rows):
        shape = configs.variable_shapes(config)[name]

        def initializer(shape, dtype=tf.float32, partition_info=None):
            return initial_value(config, seed, name, rows)
        return tf.compat.v1.get_variable(variable_name, [len(rows), *shape[1:]], tf.float32, initializer)

    def parts(self, name):
        """A variable, or the list of its parts if it is partitioned."""
        return self.variables[name]

    @property
    def variable_list(self):
        """The variables in canonical order; a partitioned one is the list of its parts."""
        return [self.parts(name) for name in self.variables]

    def state(self, names=None):
        """Every variable (part) and accumulator of `names` (default: all): what initialising, broadcasting or
        checkpointing them covers."""
        names = list(self.variables) if names is None else names
        return tf.nest.flatten([[self.variables[n], self.accumulators.get(n, [])] for n in names])

    def saver(self):
        """A Saver of whole tables by the names of variable_shapes (an accumulator as "<name>/Adagrad"): a
        partitioned variable is saved as its parts joined in row order, so that a checkpoint does not depend
        on the partitioning or on the strategy."""
        saved = []
        for kind, variables in (("", self.variables), ("/Adagrad", self.accumulators)):
            for name, variable in variables.items():
                saved.append(_WholeTable(variable, self.strategy, name + kind) if isinstance(variable, list)
                             else variable)
        return tf.compat.v1.train.Saver(saved)

    def lookup(self, name, ids):
        """Rows `ids` of a variable, gathered from the part that holds each."""
        return tf.compat.v1.nn.embedding_lookup(self.parts(name), ids, partition_strategy=self.strategy)

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
        """The sampled softmax's candidates of step `step`, or None with the full softmax: (num_sampled DISTINCT
        words, int32; the number of draws it took), as TF's log_uniform_candidate_sampler(unique=True) draws
        them: log-uniform (Zipfian) draws with replacement, value = floor(exp(u * log(vocab + 1))) - 1, kept in
        order of first appearance until num_sampled are distinct. The draws come from a stateless generator on
        (seed, step) alone, so every worker, and every shard of run.py --emulate_workers, draws the same
        candidates (TF's samplers keep state of their own).

        A fixed number of draws (`draws_for_distinct`) rather than a loop until enough: a tf.while_loop in the
        graph made the parameter-server runners' arithmetic differ from run.py's in the last bits (lm1b, W = 2)."""
        c = self.config
        if not c.num_sampled:
            return None
        stream = tf.random.experimental.stateless_fold_in(
            tf.stack([tf.constant(seed, tf.int64), tf.cast(step, tf.int64)]), _SAMPLER_STREAM)
        uniform = tf.random.stateless_uniform([draws_for_distinct(c)], stream, dtype=tf.float64)
        draws = tf.cast(tf.floor(tf.exp(uniform * math.log(c.vocab_size + 1))), tf.int32) - 1
        draws = tf.math.floormod(draws, c.vocab_size)  # as TF's sampler; exp may round up to vocab_size + 1
        distinct, position = tf.unique(draws)  # in order of first appearance
        enough = tf.debugging.assert_greater_equal(tf.size(distinct), c.num_sampled,
                                                   message="too few distinct candidates drawn")
        with tf.control_dependencies([enough]):
            tries = tf.cast(tf.where(tf.equal(position, c.num_sampled - 1))[0, 0], tf.int32) + 1  # its first draw
        return distinct[:c.num_sampled], tries

    def log_expected_count(self, words, tries):
        """The log of each word's expected count among the candidates drawn in `tries` draws: TensorFlow's
        ExpectedCountHelper (tensorflow/core/kernels/range_sampler.cc), the probability that the draws include
        the word, 1 - (1 - p)^tries, or p * num_sampled when no draw repeated."""
        c = self.config
        p = tf.math.log1p(1.0 / tf.cast(words + 1, tf.float64)) / math.log(c.vocab_size + 1)
        count = tf.where(tries == c.num_sampled, p * c.num_sampled,
                         -tf.math.expm1(tf.cast(tries, tf.float64) * tf.math.log1p(-p)))
        return tf.cast(tf.math.log(count), tf.float32)

    def _sampled_softmax_cross_entropy(self, output, labels, candidates):
        """The cross-entropy of each position against its label and the shared candidates: what
        tf.nn.sampled_softmax_loss computes (Jean et al. 2015), with its defaults: logits minus the log of the
        expected count of each word among the candidates, and a candidate equal to a position's label is no
        negative for it. Written out because TF's version draws a seed for an op that needs none, which op
        determinism refuses. The gradients of softmax_w and softmax_b are tf.IndexedSlices: their rows of
        the labels, then of the candidates."""
        candidates, tries = candidates
        words = tf.concat([labels, candidates], 0)
        weights = self.lookup("softmax_w", words)  # [positions + num_sampled, output_size]
        biases = self.lookup("softmax_b", words)
        positions = tf.shape(labels)[0]
        true_logits = (tf.reduce_sum(output * weights[:positions], axis=1) + biases[:positions]
                       - self.log_expected_count(labels, tries))
        sampled_logits = (tf.matmul(output, weights[positions:], transpose_b=True) + biases[positions:]
                          - self.log_expected_count(candidates, tries))
        sampled_logits = tf.where(labels[:, None] == candidates[None, :], tf.float32.min, sampled_logits)
        logits = tf.concat([true_logits[:, None], sampled_logits], axis=1)  # the label is class 0
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.zeros_like(labels), logits=logits)

    def loss(self, inputs, targets, initial_state, dropout_masks=None, candidates=None):
        """Forward pass of one worker's rows.

        inputs, targets: int32 [rows, num_steps]; initial_state: float32 configs.state_shape(config, rows); candidates:
        sampled_candidates() of the step, needed with a sampled softmax. Returns (loss, final_state). The loss
        is ptb_word_lm's training objective: the cross-entropy (of the full or of the sampled softmax) summed
        over the unrolled steps and averaged over the rows, so averaging the gradients of W equal shards gives
        the gradient of the global batch."""
        c = self.config
        rows = inputs.shape[0]
        x = self.lookup("embedding", inputs)  # [rows, steps, output_size]
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
                i, j, f, o = tf.split(gates, 4, axis=1)  # ptb_word_lm's BasicLSTMCell
                if c.forget_bias:
                    f = f + c.forget_bias
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
        # Not colocated with the forward ops (TF 2's tf.gradients does that): the gradient of a gather from a
        # parameter server would be reshaped on that server, so the rows' gradient would travel there and back
        # before being sent for real (measured on lm1b: 1.1 MB each way per worker and softmax part).
        raw = tf.compat.v1.gradients(loss, flat, colocate_gradients_with_ops=False)
        gradients = [deduplicate(g) if isinstance(g, tf.IndexedSlices) else g for g in raw]
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


def update(lm, gradients, learning_rate):
    """The update rule (config.update_rule), applied once per step to the gradient of the global batch
    (structured as lm.variable_list). Returns (train_op, global_norm: the norm of the gradients the rule clips,
    before clipping).

    A sparse gradient is first summed to one row per word (rows in the order they arrive: what a dense sum
    of them would give, bit for bit), and only those rows, of the variable and of its accumulator, are updated,
    so its cost follows the rows touched, not the vocabulary. A dense gradient of a sparse variable (Horovod's
    --sparse_as_dense) gets the same bits: its untouched rows are 0, and var - lr * 0 == var, acc + 0 == acc.

    A variable may come as the list of its parts, with the list of their gradients. The arithmetic of each part
    runs on the part's device, and the result does not depend on the partitioning (see prepare_gradient). The
    three stages are separate functions for an architecture that runs them in different places
    (run_parallax.py); composed as here, they are the rule."""
    names = list(lm.variables)
    prepared, squares = zip(*[prepare_gradient(lm, name, g) for name, g in zip(names, gradients)])
    global_norm, scale = clip_scale(lm.config, squares)
    return tf.group(*[apply_gradient(lm, name, g, scale, learning_rate) for name, g in zip(names, prepared)]), global_norm


def _row_squares(values):
    """The sum of squares of each row (of each element, for a vector)."""
    return tf.reduce_sum(tf.square(values), axis=list(range(1, values.shape.rank)))


def prepare_gradient(lm, name, gradient):
    """(the gradient of each part ready for apply_gradient: dense, or tf.IndexedSlices with each row once;
    the variable's squared gradient norm, or None when the rule does not clip it).

    The squared norm is the sum, in the whole variable's row order, of one number per row: its sum of
    squares, 0 for an untouched row. A sparse gradient's row sums are scattered into that vector (as long as
    the vocabulary, but one number per row, which is cheap) and the parts' vectors joined in row order, so
    sparse and dense gradients, any partitioning and either strategy give the norm the same bits."""
    parts, gradients = (lm.variables[name], gradient) if name in lm.partitioned else ([lm.variables[name]], [gradient])
    prepared, row_squares, norm_needed = [], [], configs.clipped(lm.config, name)
    for part, g in zip(parts, gradients):
        with tf.device(part.device):
            if isinstance(g, tf.IndexedSlices):
                g = deduplicate(g)
                if norm_needed:
                    row_squares.append(tf.math.unsorted_segment_sum(_row_squares(g.values), g.indices,
                                                                    part.shape[0]))
            elif norm_needed:
                row_squares.append(_row_squares(g))
            prepared.append(g)
    if not norm_needed:
        return prepared, None
    # Summed where the variable lives: a sparse variable's vector is as long as the vocabulary (3 MB for lm1b),
    # and from a parameter server it would otherwise travel to the worker every step.
    with tf.device(parts[0].device):
        return prepared, tf.reduce_sum(join_rows(row_squares, lm.strategy))


def clip_scale(config, squares):
    """(global norm, factor that clips it to max_grad_norm) from the clipped variables' squared norms (None
    for the others), added in canonical order, left to right (unlike add_n, whose order is the kernel's)."""
    squares = [square for square in squares if square is not None]
    total = squares[0]
    for square in squares[1:]:
        total = total + square
    global_norm = tf.sqrt(total)
    if not config.max_grad_norm:
        return global_norm, 1.0
    return global_norm, config.max_grad_norm / tf.maximum(global_norm, config.max_grad_norm)


def apply_gradient(lm, name, gradients, scale, learning_rate):
    """The rule's update of variable `name` from its prepared gradients (one per part), part by part on each
    part's device; a sparse gradient (each row once) as a scatter into its rows only.

    SGD: var -= lr * g. Adagrad: acc += g * g, var -= lr * g / sqrt(acc), where g is the gradient times the
    clipping factor (for a clipped variable) and times the batch (for the embedding under PARALLAX_LM1B).
    TensorFlow's fused Adagrad kernels are not used: they compute 1/sqrt(acc) approximately, and their dense
    and sparse kernels round it differently (rows of 6 or 1 numbers), so --sparse_as_dense could not match
    the sparse path; sqrt and division are correctly rounded in every kernel."""
    rule = lm.config.update_rule
    factor = scale if configs.clipped(lm.config, name) else None
    if name == "embedding" and rule.embedding_scale == "batch":
        factor = float(lm.config.batch_size) if factor is None else factor * float(lm.config.batch_size)
    parts = tf.nest.flatten(lm.variables[name])
    accumulators = tf.nest.flatten(lm.accumulators[name]) if rule.optimizer == "adagrad" else [None] * len(parts)
    updates = []
    for part, accumulator, g in zip(parts, accumulators, gradients):
        with tf.device(part.device):
            sparse = isinstance(g, tf.IndexedSlices)
            values = g.values if sparse else g
            if factor is not None:
                values = values * factor
            if accumulator is None:
                step = learning_rate * values
            elif sparse:
                accumulated = tf.gather(accumulator, g.indices) + values * values
                updates.append(accumulator.scatter_update(tf.IndexedSlices(accumulated, g.indices, g.dense_shape)))
                step = learning_rate * values / tf.sqrt(accumulated)
            else:
                accumulated = accumulator + values * values
                updates.append(accumulator.assign(accumulated))
                step = learning_rate * values / tf.sqrt(accumulated)
            updates.append(part.scatter_sub(tf.IndexedSlices(step, g.indices, g.dense_shape)) if sparse
                           else part.assign_sub(step))
    return tf.group(*updates)


class _WholeTable(saveable_object.SaveableObject):
    """A partitioned variable in a checkpoint as one tensor, its parts joined in row order (join_rows);
    restoring splits it back."""

    def __init__(self, parts, strategy, name):
        self.parts, self.strategy = parts, strategy
        whole = join_rows([part.read_value() for part in parts], strategy)
        super().__init__(whole, [saveable_object.SaveSpec(whole, "", name)], name)

    def restore(self, restored_tensors, restored_shapes):
        rows = split_rows(restored_tensors[0], configs.part_rows(sum(part.shape[0] for part in self.parts),
                                                                  len(self.parts), self.strategy))
        return tf.group(*[part.assign(value) for part, value in zip(self.parts, rows)])


