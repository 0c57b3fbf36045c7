"""Copied TensorFlow 2 / Keras code inside a model's `loss`, made the toolkit's: the variables its layers (and
`tf.compat.v1.get_variable`) create become the model's, keyed by (seed, layer path) with their layer's kind of
initializer, and its dropout is keyed by (seed, step, row). docs/your-model.md, "From copied code"."""
import contextlib
import math

import numpy as np

from harness import UsageError, determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import tensorflow as tf  # noqa: E402

from harness import variables  # noqa: E402

_NORMAL_2 = (0.022750131948179195, 0.9544997361036416)  # Phi(-2) and Phi(2) - Phi(-2): a normal cut at 2 sigma
_TRUNCATED_STDDEV = 0.87962566103423978  # a standard normal's stddev once cut at 2 sigma (Keras' constant)


def fans(shape):
    """(fan_in, fan_out) of a weight's shape, as Keras and TensorFlow compute them."""
    if not shape:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


def truncated_normal(mean, stddev):
    """Normal cut at two standard deviations, by the inverse of the normal CDF."""
    low, width = _NORMAL_2
    return lambda u: tf.math.ndtri(low + u * width) * stddev + mean


def orthogonal(gain):
    """A (semi-)orthogonal matrix from the QR of normal numbers, as Keras' Orthogonal; not by rows: a layer's
    variable is never split."""
    def initialize(u):
        shape = u.shape.as_list()
        rows, columns = math.prod(shape[:-1]), shape[-1]
        normal = variables.normal(1.0)(tf.reshape(u, [max(rows, columns), min(rows, columns)]))
        q, r = tf.linalg.qr(normal)
        q *= tf.sign(tf.linalg.diag_part(r))
        return gain * tf.reshape(q if rows >= columns else tf.transpose(q), shape)
    return initialize


def initializer_of(initializer, shape):
    """The toolkit's initializer (a function of uniform [0, 1) numbers) of the same kind as a Keras or
    TensorFlow initializer object; None for one it has no equivalent of."""
    kind = type(initializer).__name__
    get = lambda name, default=None: getattr(initializer, name, default)  # noqa: E731
    if hasattr(initializer, "mode") and hasattr(initializer, "distribution"):  # VarianceScaling and its kin
        fan_in, fan_out = fans(shape)
        scale = get("scale") / max(1.0, {"fan_in": fan_in, "fan_out": fan_out,
                                         "fan_avg": (fan_in + fan_out) / 2.0}[get("mode")])
        if get("distribution") == "uniform":
            return variables.uniform(math.sqrt(3.0 * scale))
        if get("distribution") == "untruncated_normal":
            return variables.normal(math.sqrt(scale))
        return truncated_normal(0.0, math.sqrt(scale) / _TRUNCATED_STDDEV)  # "truncated_normal", v1's "normal"
    if kind in ("Zeros", "Zeros_v2"):
        return variables.constant(0.0)
    if kind in ("Ones", "Ones_v2"):
        return variables.constant(1.0)
    if kind in ("Constant", "Constant_v2") and np.ndim(get("value")) == 0:
        return variables.constant(float(get("value")))
    if kind in ("Constant", "Constant_v2") and np.size(get("value")) == math.prod(shape):  # a table given whole
        table = np.reshape(np.asarray(get("value"), np.float32), shape)
        return lambda u: tf.constant(table)
    if kind in ("RandomUniform", "RandomUniform_v2"):
        low, high = float(get("minval")), float(get("maxval"))
        return lambda u: u * (high - low) + low
    if kind in ("RandomNormal", "RandomNormal_v2"):
        return lambda u: variables.normal(float(get("stddev")))(u) + float(get("mean"))
    if kind in ("TruncatedNormal", "TruncatedNormal_v2"):
        return truncated_normal(float(get("mean")), float(get("stddev")))
    if kind in ("Orthogonal", "Orthogonal_v2"):
        return orthogonal(float(get("gain")))
    if kind in ("Identity", "Identity_v2"):
        return lambda u: float(get("gain")) * tf.eye(*u.shape.as_list())
    return None


class _Unmapped(Exception):
    """A part of a composite initializer with no equivalent."""


def composite(function, shape):
    """The toolkit's initializer of a function made of Keras initializers (the LSTM's bias with unit_forget_bias:
    zeros, ones, zeros), each part drawn from the next of the variable's own numbers; None if a part has no
    equivalent or the parts need more numbers than the variable has."""
    def initialize(u):
        flat, used = tf.reshape(u, [-1]), [0]

        def part(initializer, part_shape, *args, **kwargs):
            rule, size = initializer_of(initializer, list(part_shape)), math.prod(part_shape)
            if rule is None or used[0] + size > flat.shape[0]:
                raise _Unmapped()
            used[0] += size
            return rule(tf.reshape(flat[used[0] - size:used[0]], part_shape))
        with _initializers_calling(part):
            return tf.reshape(function(shape, dtype=tf.float32), u.shape)
    try:
        with tf.Graph().as_default():
            initialize(tf.zeros(shape))
    except Exception:  # noqa: BLE001  (any part the function cannot be drawn through)
        return None
    return initialize


@contextlib.contextmanager
def _initializers_calling(part):
    """Within: calling any Keras or TensorFlow initializer object calls part(initializer, shape, ...) instead."""
    from keras.src.initializers import initializers as keras_initializers
    from tensorflow.python.ops import init_ops, init_ops_v2
    classes, seen = [keras_initializers.Initializer, init_ops.Initializer, init_ops_v2.Initializer], []
    while classes:
        cls = classes.pop()
        if cls not in seen:
            seen.append(cls)
            classes += cls.__subclasses__()
    patched = [(cls, cls.__dict__["__call__"]) for cls in seen if "__call__" in cls.__dict__]
    for cls, _ in patched:
        cls.__call__ = lambda self, shape, *args, **kwargs: part(self, shape, *args, **kwargs)
    try:
        yield
    finally:
        for cls, original in patched:
            cls.__call__ = original


def _initializer_object(initial_value):
    """The initializer object behind a variable's initial_value: Keras passes partial(initializer, shape),
    tf.compat.v1.get_variable a closure over it."""
    if hasattr(initial_value, "func"):
        return initial_value.func
    for cell in getattr(initial_value, "__closure__", None) or ():
        if callable(cell.cell_contents) and hasattr(cell.cell_contents, "get_config"):
            return cell.cell_contents
    return None


class Refusals:
    """The first thing in copied code the toolkit refuses, kept as one line: Keras' autograph re-raises an error
    with the traceback of the user's code in its message."""

    def __init__(self):
        self.first = None

    def refuse(self, message):
        self.first = self.first or message
        raise UsageError(message)


class LayerVariables:
    """A variable creator: each variable copied code creates becomes a variable of `params`, declared under the
    name its layers give it ("encoder/gru/gru_cell/kernel"), or is refused in one line naming it."""

    def __init__(self, params, refusals):
        self.params, self.refusals, self.declaring = params, refusals, False

    def __call__(self, next_creator, **kwargs):
        if self.declaring:  # the variable's own slots
            return next_creator(**kwargs)
        graph = tf.compat.v1.get_default_graph()
        name = graph.unique_name(kwargs.get("name") or "Variable", mark_as_used=False)
        refuse = lambda why: self.refusals.refuse(f"loss made the variable {name}, {why}")  # noqa: E731
        if self.params.sealed:
            refuse("on its second call: each call made new layers; make them once with params.build(...) "
                   "(docs/your-model.md, \"From copied code\")")
        if kwargs.get("trainable") is False:
            refuse("not trainable (a layer's statistics, as BatchNormalization's moving mean): the runners update "
                   "only trained variables; use a layer without them (LayerNormalization or GroupNormalization for "
                   "BatchNormalization)")
        if tf.as_dtype(kwargs.get("dtype") or tf.float32) != tf.float32:
            refuse(f"{tf.as_dtype(kwargs['dtype']).name}: the runners train float32 only")
        initial_value = kwargs.get("initial_value")
        initializer = _initializer_object(initial_value)
        shape = kwargs.get("shape")
        if shape is None and hasattr(initial_value, "args"):
            shape = initial_value.args[0]
        shape = tf.TensorShape(shape)
        if not shape.is_fully_defined():
            refuse(f"of no fixed shape ({shape}): give its layer inputs of fixed shapes")
        rule = initializer_of(initializer, shape.as_list())
        if rule is None and callable(initializer) and not hasattr(initializer, "get_config"):
            rule = composite(initializer, shape.as_list())
        if rule is None:
            kind = "a value" if initializer is None else getattr(initializer, "__name__", type(initializer).__name__)
            refuse(f"from {kind}, which cannot be drawn from (seed, name): give it an initializer harness/layers.py "
                   f"maps (Keras' own), or declare it in variables()")
        self.declaring = True
        try:
            variable = self.params.declare(name, variables.Variable(shape.as_list(), rule),
                                           lambda **fixed: next_creator(**{**kwargs, **fixed}))
        finally:
            self.declaring = False
        if variable.op.name != name:
            refuse(f"named {variable.op.name} in the graph: make the layers in loss, not in a variable scope")
        return variable


class KeyedDropout:
    """Dropout that draws its mask from the step's randomness, row by row: the k-th dropout in a call of loss is
    keyed "dropout/k", so every worker drops the same units of a row as the reference. A call on a symbolic batch
    (no fixed rows, or another graph: Keras building a Sequential or functional model) drops nothing, takes no key."""

    def __init__(self, random, refusals):
        self.random, self.refusals, self.calls = random, refusals, 0
        self.graph = tf.compat.v1.get_default_graph()

    def __call__(self, x, rate, noise_shape=None):
        x = tf.convert_to_tensor(x)
        if x.graph is not self.graph or (x.shape.rank and x.shape[0] is None):
            return x  # Keras building a Sequential or functional model on a symbolic batch of None rows
        rows = self.random.rows_.stop - self.random.rows_.start
        shape = tf.TensorShape(noise_shape) if noise_shape is not None else x.shape
        if not shape.is_fully_defined() or shape.rank == 0 or shape[0] != rows:
            self.refusals.refuse(f"dropout on a tensor of shape {shape}: its first dimension must be the batch's "
                                 f"{rows} rows (batch-major), so that each row keeps its mask on any worker")
        name, self.calls = f"dropout/{self.calls}", self.calls + 1
        keep = tf.cast(self.random.rows(name, shape[1:]) >= rate, x.dtype) / (1.0 - rate)
        return x * keep


@contextlib.contextmanager
def captured(params, random, model_name):
    """Within: the variables copied code creates are params', and its dropout (Keras layers, tf.nn.dropout) is
    keyed by (seed, step, row); what it refuses is a UsageError of one line naming the model."""
    from keras.src import backend  # here: Keras loads only with a model's loss
    refusals = Refusals()
    dropout = KeyedDropout(random, refusals)
    keras_dropout, nn_dropouts = backend.RandomGenerator.dropout, [(m, m.dropout) for m in _nn_modules()]

    def tf_dropout(x, rate=None, noise_shape=None, seed=None, name=None, keep_prob=None):
        return dropout(x, 1.0 - keep_prob if rate is None else rate, noise_shape)
    backend.RandomGenerator.dropout = lambda self, x, rate, noise_shape=None: dropout(x, rate, noise_shape)
    for module, _ in nn_dropouts:
        module.dropout = tf_dropout
    try:
        with tf.variable_creator_scope(LayerVariables(params, refusals)), _elementwise_equality():
            yield
    except Exception:
        if refusals.first:
            raise UsageError(f"--model={model_name}: {refusals.first}") from None
        raise
    finally:
        backend.RandomGenerator.dropout = keras_dropout
        for module, original in nn_dropouts:
            module.dropout = original
    params.sealed = True


@contextlib.contextmanager
def _elementwise_equality():
    """Within: `x == y` and `x != y` of tensors compare element by element, as in TensorFlow 2's eager code and
    functions, which copied code is written for; a TensorFlow 1 graph (the runners') compares the objects, so that
    `target != PAD` would be True, one bool, and a mask of it the whole batch. Used as a bool (TensorFlow's and
    Keras' own `if x == y`, `x in list`), the comparison is still of the objects, as the graph's code expects."""
    from tensorflow.python.framework import tensor as tensor_lib
    from tensorflow.python.ops import gen_math_ops, math_ops

    def compare(op, same):
        def elementwise(self, other):
            identical = (self is other) == same
            if other is None:
                return identical
            try:
                result = op(*math_ops.maybe_promote_tensors(self, other), incompatible_shape_error=False)
            except (TypeError, ValueError):
                return identical
            result._toolkit_as_bool = identical
            return result
        return elementwise

    def as_bool(self):
        identical = getattr(self, "_toolkit_as_bool", None)
        return truth(self) if identical is None else identical
    truth = tensor_lib.Tensor.__bool__
    originals = tensor_lib.Tensor.__eq__, tensor_lib.Tensor.__ne__
    tensor_lib.Tensor.__eq__ = compare(gen_math_ops.equal, True)
    tensor_lib.Tensor.__ne__ = compare(gen_math_ops.not_equal, False)
    tensor_lib.Tensor.__bool__ = as_bool
    try:
        yield
    finally:
        tensor_lib.Tensor.__eq__, tensor_lib.Tensor.__ne__ = originals
        tensor_lib.Tensor.__bool__ = truth


def _nn_modules():
    """The modules through which code reaches tf.nn.dropout (TensorFlow 2's, compat.v1's and compat.v2's)."""
    return list({id(m): m for m in (tf.nn, tf.compat.v1.nn, tf.compat.v2.nn)}.values())
