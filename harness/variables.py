"""A model's variables in a graph (`Params`: initial values keyed by (seed, name), parts, slots, whole-table
checkpoints) and a step's randomness (`StepRandom`, keyed by (seed, step) so that sharding the batch cannot change
it). docs/your-model.md says how a model declares its variables."""
import contextlib
import dataclasses
import math
import zlib

from harness import UsageError, determinism, models  # noqa: F401  (determinism before TensorFlow: it fixes its kernels)
import tensorflow as tf  # noqa: E402

from harness.partitioning import join_rows, part_rows  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Variable:
    """A variable's shape and its initializer: an elementwise function of uniform [0, 1) numbers."""
    shape: tuple
    initializer: object

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))


def uniform(scale):
    """Uniform in [-scale, scale]."""
    return lambda u: u * (2 * scale) - scale


def glorot_uniform(fan_in, fan_out):
    """Glorot and Bengio's uniform initializer."""
    return uniform(math.sqrt(6.0 / (fan_in + fan_out)))


def normal(stddev):
    """Normal with this standard deviation, by the inverse of the normal CDF (u never reaches 0 or 1)."""
    return lambda u: tf.math.ndtri(u + 2.0 ** -24) * stddev


def constant(value):
    """Every element `value`."""
    return lambda u: tf.zeros_like(u) + value


_PHILOX = 1  # tf.random.Algorithm.PHILOX: a counter-based generator, 4 numbers per counter value


def initial_value(variable, seed, name, rows=None):
    """Rows `rows` (default all) of a variable's initial value: its initializer of stateless uniform numbers
    keyed by (seed, crc32 of the name). Element k of the whole row-major value is number k % 4 of the Philox
    block at counter k // 4, so a part holds exactly its rows of the whole and builds no others."""
    shape = variable.shape or (1,)
    rows = range(shape[0]) if rows is None else rows
    row_size = math.prod(shape[1:])
    key, _ = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.constant([seed, zlib.crc32(name.encode())], tf.int64))
    if rows.step == 1:
        block, skip = divmod(rows.start * row_size, 4)
        uniform_ = tf.raw_ops.StatelessRandomUniformV2(shape=[skip + len(rows) * row_size], key=key,
                                                       counter=tf.constant([block, 0], tf.uint64), alg=_PHILOX)
        uniform_ = uniform_[skip:]
    else:
        first = tf.range(rows.start, rows.stop, rows.step, dtype=tf.int64) * row_size  # each row's first element
        blocks_per_row = (3 + row_size + 3) // 4  # a row starts anywhere in a block of 4
        blocks = first[:, None] // 4 + tf.range(blocks_per_row, dtype=tf.int64)
        numbers = tf.reshape(_philox_uniform(key, blocks), [len(rows), 4 * blocks_per_row])
        uniform_ = tf.gather(numbers, first[:, None] % 4 + tf.range(row_size, dtype=tf.int64), batch_dims=1)
    values = variable.initializer(tf.reshape(uniform_, [len(rows), *shape[1:]]))
    return tf.reshape(values, variable.shape) if not variable.shape else values


def _philox_uniform(key, blocks):
    """What StatelessRandomUniformV2 gives at counters `blocks` (int64) with `key`, 4 floats in [0, 1) per block:
    TensorFlow's Philox-4x32-10 and float conversion, written out so that any set of blocks can be drawn."""
    u32, u64 = tf.uint32, tf.uint64

    def low_high(x):
        return (tf.cast(x & tf.constant(0xFFFFFFFF, u64), u32),
                tf.cast(tf.bitwise.right_shift(x, tf.constant(32, u64)), u32))

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


class Params:
    """A model's variables, created in the current device scope, with the rule's slots beside each; those named
    in `partitioned` are split by rows into `partitions` parts (part_rows)."""

    def __init__(self, model, config, seed, partitioned=(), partitions=1, strategy="mod", reads_on="", whole=()):
        self.config, self.seed, self.strategy = config, seed, strategy
        # Where a whole variable's value is read, once a step, for every use (TensorFlow 1's caching_device):
        # run_tf.py's worker, so that a layer's loop or a tied weight does not pull it from its server per use.
        self.reads_on = reads_on
        self.whole = tuple(whole)  # variables read whole anyway (dense gradients): their lookups gather from it
        self.model_name = getattr(model, "NAME", "the model")
        self.rule = models.update_rule(model, config)
        self.specs, self.variables, self.slots = {}, {}, {}
        self.partitioned = tuple(partitioned) if partitions > 1 else ()
        self.partitions, self.built, self.sealed = partitions, {}, False
        for name, spec in models.declared_variables(model, config).items():
            self.declare(name, spec)

    def declare(self, name, spec, create=None):
        """Add variable `name` (in parts when partitioned) and its slots; `create(initial_value=, shape=)` makes
        a whole one, never split (default: tf.compat.v1.get_variable; harness/layers.py passes a layer's own)."""
        self.specs[name] = spec
        if create is not None and name in self.partitioned:  # a layer reads its variable whole: never split
            self.partitioned = tuple(n for n in self.partitioned if n != name)
        if name in self.partitioned:
            if self.partitions > spec.shape[0]:
                raise UsageError(f"--partitions={self.partitions}: more parts than the {spec.shape[0]:,} rows of "
                                 f"{name}")
            self.variables[name] = [_variable(f"{name}/part_{p}", spec, self.seed, name, rows) for p, rows in
                                    enumerate(part_rows(spec.shape[0], self.partitions, self.strategy))]
        elif create is not None:
            self.variables[name] = create(initial_value=lambda: initial_value(spec, self.seed, name),
                                          shape=spec.shape, caching_device=self.reads_on)
        else:
            self.variables[name] = _variable(name, spec, self.seed, name, None, self.reads_on)
        if name in self.whole:
            lookups_from_the_read(self.variables[name])
        self.slots[name] = {}
        for slot, value in self.rule.optimizer.slots:
            parts = []
            for part in tf.nest.flatten(self.variables[name]):
                # Beside its variable: device(None) drops the caller's device functions (a parameter-server
                # placement would otherwise place it, and count it, as a variable of its own).
                with tf.compat.v1.device(None), tf.compat.v1.device(part.device):
                    parts.append(tf.compat.v1.get_variable(f"{part.op.name}/{slot}", part.shape, tf.float32,
                                                           tf.compat.v1.constant_initializer(value),
                                                           trainable=False))
            self.slots[name][slot] = parts if isinstance(self.variables[name], list) else parts[0]
        return self.variables[name]

    def build(self, make):
        """make() the first time a graph's loss asks, the same objects after: copied code's layers (whose
        variables belong to one graph) made once, however many workers run.py emulates."""
        key = make.__code__
        if key not in self.built:
            self.built[key] = make()
        return self.built[key]

    def __getitem__(self, name):
        """The whole value of a variable, read once (its gradient is dense)."""
        variable = self.variables[name]
        if isinstance(variable, list):
            return join_rows([part.read_value() for part in variable], self.strategy)
        return tf.identity(variable)

    def gather(self, name, ids):
        """Rows `ids` of a variable, each from the part that holds it (its gradient is tf.IndexedSlices)."""
        return tf.compat.v1.nn.embedding_lookup(self.variables[name], ids, partition_strategy=self.strategy)

    @property
    def variable_list(self):
        """The variables in the model's order; a partitioned one is the list of its parts."""
        return list(self.variables.values())

    def state(self, names=None):
        """Every variable (part) and slot of `names` (default: all): what initialising or broadcasting covers."""
        names = list(self.variables) if names is None else names
        return tf.nest.flatten([[self.variables[n], list(self.slots[n].values())] for n in names])

    def gradients(self, objective):
        """One worker's gradients, structured as `variable_list`; a sparse one with each index once (rows summed
        in order), so every architecture adds up only one row per worker."""
        flat = tf.nest.flatten(self.variable_list)
        # Not colocated with the forward ops: a gather's gradient would be reshaped on its parameter server, so
        # the rows would travel there and back before being sent for real.
        raw = tf.compat.v1.gradients(objective, flat, colocate_gradients_with_ops=False)
        missing = [v.op.name for v, g in zip(flat, raw) if g is None]
        if missing:
            raise UsageError(f"--model={self.model_name}: the loss does not depend on {', '.join(missing)}: every "
                             f"variable needs a gradient (a layer called but its output unused? or called on "
                             f"constants alone, as tf.range, while a functional model is built: TensorFlow 2 "
                             f"computes that once, a constant never trained; call it inside a layer's call)")
        gradients = [deduplicate(g) if isinstance(g, tf.IndexedSlices) else g for g in raw]
        return tf.nest.pack_sequence_as(self.variable_list, gradients)

    def saver(self):
        """A Saver of whole tables by the model's names (a slot as "<name>/<slot>"), so that a checkpoint
        depends neither on the partitioning nor on the strategy."""
        from harness.whole_table import WholeTable  # here: importing it loads TensorFlow
        saved = []
        for name, variable in self.variables.items():
            for kind, value in [("", variable), *[(f"/{slot}", v) for slot, v in self.slots[name].items()]]:
                saved.append(WholeTable(value, self.strategy, name + kind) if isinstance(value, list) else value)
        return tf.compat.v1.train.Saver(saved, max_to_keep=None)  # Checkpoints.prune keeps what resumes need


def _variable(variable_name, spec, seed, name, rows, caching_device=None):
    rows_shape = list(spec.shape) if rows is None else [len(rows), *spec.shape[1:]]
    return tf.compat.v1.get_variable(variable_name, rows_shape, tf.float32,
                                     lambda *_, **__: initial_value(spec, seed, name, rows),
                                     caching_device=caching_device)


def lookups_from_the_read(variable):
    """Make a variable's lookups gather from its one read a step, where it is cached: a tied embedding, read whole
    by an output layer, would otherwise also pull its looked-up rows from its server."""
    def sparse_read(indices, name=None):
        with tf.compat.v1.colocate_with(variable._cached_value, ignore_existing=True):
            return tf.gather(variable._cached_value, indices, name=name)
    variable.sparse_read = sparse_read


@contextlib.contextmanager
def uncached(part):
    """The variable as its update sees it, where it lives: read there, written after this step's read of it there.
    A variable with a caching_device makes each assignment wait for the cached copy, which would pull the whole
    variable to the worker that runs the update (run_tf.py's chief, in a run of its own)."""
    cached, part._cached_value = part._cached_value, None
    try:
        with tf.control_dependencies([] if cached is None else [cached.op.inputs[0]]):  # the read on its device
            yield part
    finally:
        part._cached_value = cached


def deduplicate(slices):
    """The same tf.IndexedSlices with each index once, rows summed in order of appearance; int32 indices whatever
    the ids' type (numpy's int64 too), as every runner's queues and collectives carry them."""
    unique_indices, position = tf.unique(tf.cast(slices.indices, tf.int32))
    values = tf.math.unsorted_segment_sum(slices.values, position, tf.shape(unique_indices)[0])
    return tf.IndexedSlices(values, unique_indices, slices.dense_shape)


class StepRandom:
    """The randomness of one step of rows `rows` (a slice of the global batch of `batch_size` rows), keyed by
    (seed, step, name): a row gets the same numbers whichever worker computes it."""

    def __init__(self, seed, step, rows, batch_size):
        self.key = tf.stack([tf.constant(seed, tf.int64), tf.cast(step, tf.int64)])
        self.rows_, self.batch_size = rows, batch_size

    def _key(self, name):
        return tf.random.experimental.stateless_fold_in(self.key, zlib.crc32(name.encode()))

    def rows(self, name, shape, dtype="float32"):
        """Uniform [0, 1) numbers of shape [rows, *shape]: drawn for the whole global batch, then sliced."""
        return tf.random.stateless_uniform([self.batch_size, *shape], self._key(name), dtype=dtype)[self.rows_]

    def shared(self, name, shape, dtype="float32"):
        """Uniform [0, 1) numbers of `shape`, the same for every worker."""
        return tf.random.stateless_uniform(list(shape), self._key(name), dtype=dtype)
