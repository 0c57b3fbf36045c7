"""Update rules (`Rule`) applied to the global batch's gradient, and the one order in which W workers' gradients
combine into it. A rule's three stages may run in different places (run_parallax.py); each gives the same bits
for a sparse gradient and its densified form, and for any partitioning. docs/architecture.md explains."""
import dataclasses
from typing import Callable

from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import tensorflow as tf  # noqa: E402

from harness.partitioning import join_rows  # noqa: E402
from harness.variables import deduplicate, uncached  # noqa: E402


@dataclasses.dataclass(frozen=True)
class SGD:
    """var -= lr * g."""
    slots = ()
    updates_every_row = False  # a sparse gradient updates its rows only (the bench prices the update so)

    def apply(self, part, slots, g, learning_rate, step):
        if isinstance(g, tf.IndexedSlices):
            return [part.scatter_sub(tf.IndexedSlices(learning_rate * g.values, g.indices, g.dense_shape))]
        return [part.assign_sub(learning_rate * g)]


@dataclasses.dataclass(frozen=True)
class Adagrad:
    """acc += g * g; var -= lr * g / sqrt(acc + epsilon), a sparse gradient's rows only (Keras' Adagrad; epsilon 0:
    TensorFlow 1's). Not TensorFlow's fused kernels: their dense and sparse kernels round 1/sqrt(acc) differently."""
    initial_accumulator: float = 0.1
    epsilon: float = 0.0
    updates_every_row = False

    @property
    def slots(self):
        return (("Adagrad", self.initial_accumulator),)

    def _root(self, accumulated):
        return tf.sqrt(accumulated + self.epsilon if self.epsilon else accumulated)

    def apply(self, part, slots, g, learning_rate, step):
        (accumulator,) = slots
        if isinstance(g, tf.IndexedSlices):
            accumulated = tf.gather(accumulator, g.indices) + g.values * g.values
            return [accumulator.scatter_update(tf.IndexedSlices(accumulated, g.indices, g.dense_shape)),
                    part.scatter_sub(tf.IndexedSlices(learning_rate * g.values / self._root(accumulated), g.indices,
                                                      g.dense_shape))]
        accumulated = accumulator + g * g
        return [accumulator.assign(accumulated), part.assign_sub(learning_rate * g / self._root(accumulated))]


def dense(g, part):
    """A gradient as a dense tensor of the part's shape: a sparse one (each row once) summed into zeros, so that
    0 + g gives the bits of the densified gradient."""
    if isinstance(g, tf.IndexedSlices):
        return tf.math.unsorted_segment_sum(g.values, g.indices, part.shape[0])
    return g


@dataclasses.dataclass(frozen=True)
class Momentum:
    """accum = momentum * accum + g; var -= lr * accum (Nesterov: lr * (g + momentum * accum)). A sparse gradient
    updates every row: each row's momentum keeps moving it (TensorFlow 1's sparse kernel updated only the rows
    touched, another rule)."""
    momentum: float = 0.9
    nesterov: bool = False

    slots = (("Momentum", 0.0),)
    updates_every_row = True

    def apply(self, part, slots, g, learning_rate, step):
        (accumulator,) = slots
        g = dense(g, part)
        accumulated = self.momentum * accumulator + g
        step_ = g + self.momentum * accumulated if self.nesterov else accumulated
        return [accumulator.assign(accumulated), part.assign_sub(learning_rate * step_)]


@dataclasses.dataclass(frozen=True)
class RMSProp:
    """ms = rho * ms + (1 - rho) * g * g; var -= lr * g / sqrt(ms + epsilon), as Keras' RMSprop. A sparse gradient
    decays every row's mean square, as its densified form does."""
    rho: float = 0.9
    epsilon: float = 1e-7

    slots = (("RMSProp", 0.0),)
    updates_every_row = True

    def apply(self, part, slots, g, learning_rate, step):
        (mean_square,) = slots
        g = dense(g, part)
        mean_square_new = self.rho * mean_square + (1.0 - self.rho) * g * g
        return [mean_square.assign(mean_square_new),
                part.assign_sub(learning_rate * g / tf.sqrt(mean_square_new + self.epsilon))]


@dataclasses.dataclass(frozen=True)
class Adam:
    """Adam with bias correction from the step; a sparse gradient updates every row, whose moments all decay, as
    TensorFlow's does. weight_decay > 0 makes it AdamW (Loshchilov and Hutter 2019): var -= lr * weight_decay *
    var besides, decoupled from the moments, as Keras' AdamW."""
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    weight_decay: float = 0.0

    slots = (("Adam", 0.0), ("Adam_1", 0.0))
    updates_every_row = True

    def apply(self, part, slots, g, learning_rate, step):
        m, v = slots
        g = dense(g, part)
        t = tf.cast(step, tf.float32) + 1.0
        m_new = self.beta1 * m + (1.0 - self.beta1) * g
        v_new = self.beta2 * v + (1.0 - self.beta2) * g * g
        rate = learning_rate * tf.sqrt(1.0 - self.beta2 ** t) / (1.0 - self.beta1 ** t)
        step_ = rate * m_new / (tf.sqrt(v_new) + self.epsilon)
        if self.weight_decay:
            step_ += learning_rate * self.weight_decay * part
        return [m.assign(m_new), v.assign(v_new), part.assign_sub(step_)]


@dataclasses.dataclass(frozen=True)
class Rule:
    """How the gradient of the global batch updates the variables."""
    optimizer: object
    learning_rate: Callable  # (step, epoch), int64 tensors -> the rate, a float32 tensor
    clip_norm: float = 0.0   # clip the `clipped` gradients' global norm to this; 0: no clipping
    clipped: Callable = lambda name: True  # the variables whose norm is the step's global norm
    scale: dict = dataclasses.field(default_factory=dict)  # {name: factor}: a variable's gradient times factor


def describe(rule, names):
    """The rule in one line, over the variables `names`: its optimizer, clipping and scaled gradients."""
    clipped = [name for name in names if rule.clipped(name)]
    clipping = ("no clipping" if not rule.clip_norm else f"the global norm of "
                f"{'every gradient' if clipped == list(names) else ', '.join(clipped)} clipped to {rule.clip_norm:g}")
    return "; ".join([repr(rule.optimizer), clipping,
                      *(f"{name}'s gradient x {factor:g}" for name, factor in rule.scale.items())])


def update(params, gradients, learning_rate, step):
    """Apply the rule to the global batch's gradient (structured as params.variable_list); return (train_op, the
    clipped variables' global norm before clipping)."""
    names = list(params.variables)
    prepared, squares = zip(*[prepare_gradient(params, name, g) for name, g in zip(names, gradients)])
    global_norm, scale = clip_scale(params.rule, squares)
    return tf.group(*[apply_gradient(params, name, g, scale, learning_rate, step)
                      for name, g in zip(names, prepared)]), global_norm


def _row_squares(values):
    """The sum of squares of each row (of each element, for a vector)."""
    return tf.reduce_sum(tf.square(values), axis=list(range(1, values.shape.rank)))


def prepare_gradient(params, name, gradient):
    """(each part's gradient, sparse ones with each row once; the squared norm, None outside the global norm). The
    norm sums one number per row in the variable's row order, so any kind or partitioning gives the same bits."""
    partitioned = name in params.partitioned
    parts, gradients = (params.variables[name], gradient) if partitioned else ([params.variables[name]], [gradient])
    prepared, row_squares, norm_needed = [], [], params.rule.clipped(name)
    for part, g in zip(parts, gradients):
        with tf.device(part.device):
            if isinstance(g, tf.IndexedSlices):
                g = deduplicate(g)
                if norm_needed:
                    row_squares.append(tf.math.unsorted_segment_sum(_row_squares(g.values), g.indices,
                                                                    part.shape[0]))
            elif norm_needed:
                row_squares.append(_row_squares(g) if g.shape.rank else tf.reshape(tf.square(g), [1]))
            prepared.append(g)
    if not norm_needed:
        return prepared, None
    # Summed where the variable lives: a sparse variable's vector is as long as its rows.
    with tf.device(parts[0].device):
        return prepared, tf.reduce_sum(join_rows(row_squares, params.strategy))


def clip_scale(rule, squares):
    """(global norm, the factor clipping it to clip_norm) from the squared norms (None: outside it), added left to
    right in the model's order (add_n's order is the kernel's)."""
    squares = [square for square in squares if square is not None]
    global_norm = tf.sqrt(sum(squares[1:], squares[0]))
    if not rule.clip_norm:
        return global_norm, 1.0
    return global_norm, rule.clip_norm / tf.maximum(global_norm, rule.clip_norm)


def apply_gradient(params, name, gradients, scale, learning_rate, step):
    """The update of variable `name` from its prepared gradients (one per part), times the clipping factor and the
    rule's scale of it."""
    rule = params.rule
    factor = scale if rule.clipped(name) else None
    if name in rule.scale:
        factor = float(rule.scale[name]) if factor is None else factor * float(rule.scale[name])
    parts = tf.nest.flatten(params.variables[name])
    slots = [tf.nest.flatten(params.slots[name][slot]) for slot, _ in rule.optimizer.slots]
    updates = []
    for index, (part, g) in enumerate(zip(parts, gradients)):
        with tf.device(part.device), uncached(part):
            if factor is not None:
                g = tf.IndexedSlices(g.values * factor, g.indices, g.dense_shape) \
                    if isinstance(g, tf.IndexedSlices) else g * factor
            updates += rule.optimizer.apply(part, [s[index] for s in slots], g, learning_rate, step)
    return tf.group(*updates)
