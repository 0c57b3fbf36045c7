"""A Keras program as tutorials publish it, trained by the toolkit's runners: its `model.fit(...)`, or one
`toolkit_trains(...)` line beside a custom loop, names the model, the data, the loss and the optimizer; this
module makes them the model contract (CONFIGS, data, loss, update_rule). docs/your-model.md, "From copied code".

When the toolkit loads the program, the program runs up to that call and stops there; run on its own (`python
yours.py`), `model.fit` trains as in Keras and `toolkit_trains` does nothing."""
import dataclasses
import hashlib
import math
import random
import typing

import numpy as np

from harness import UsageError, determinism, models  # noqa: F401  (before TensorFlow: it fixes its kernels)
import tensorflow as tf  # noqa: E402

from keras.src.engine import training_v1  # noqa: E402
from keras.src.losses import LossFunctionWrapper  # noqa: E402
from tensorflow.python.framework import config as tf_config  # noqa: E402

from harness import keras_again, update  # noqa: E402

DEFAULT_BATCH_SIZE = 32  # Keras' model.fit, without batch_size


@dataclasses.dataclass(frozen=True)
class Config:
    """A program without CONFIGS of its own: its one configuration."""
    name: str
    batch_size: int


class Program(typing.NamedTuple):
    """What the program trains: each part as the program has it, or a function of a configuration making it."""
    model: object      # a Keras model (Sequential, functional, subclassed), or config -> model(s)
    data: object       # (x, y[, sample_weight]) arrays, a batched tf.data.Dataset, or (config, seed) -> either or
    #                    the contract's batches (a function of the step with epoch_size)
    loss: object       # a Keras loss (as compile takes it), or (model, *batch) -> the objective
    optimizer: object  # a Keras optimizer, or config -> one
    batch_size: int = None
    shuffle: bool = True
    sample_weight: object = None
    validation_split: float = 0.0


def ratio(total, count):
    """total / count, as a tensor the program's own loop uses, that also carries (total, count): the runners divide
    the global batch's total by its count (a mean over real tokens), where a mean of the workers' means would not."""
    quotient = total / count
    quotient.toolkit_sum_count = (total, count)
    return quotient


def toolkit_trains(model, data, loss, optimizer, batch_size=None, shuffle=True):
    """Where the toolkit takes over a program with its own training loop; run on its own, nothing happens."""
    if models.LOADING:
        reached(Program(model, data, loss, optimizer, batch_size, shuffle))


def _fit(model, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
         validation_data=None, shuffle=True, class_weight=None, sample_weight=None, *args, **kwargs):
    """model.fit while the toolkit loads the program: what it was given, and the program stops here."""
    if not models.LOADING:
        return _KERAS_FIT(model, x, y, batch_size, epochs, verbose, callbacks, validation_split, validation_data,
                          shuffle, class_weight, sample_weight, *args, **kwargs)
    if keras_again.AGAIN:  # the program run again for its model alone
        reached(Program(model, None, None, None))
    if class_weight:
        raise UsageError("model.fit with class_weight: give the examples' weights as sample_weight")
    if model.optimizer is None:
        raise UsageError("model.fit on a model not compiled: call model.compile(loss=..., optimizer=...) first")
    if type(model).train_step is not tf.keras.Model.train_step:
        raise UsageError(f"{type(model).__name__} overrides train_step, whose loss the toolkit cannot see: call "
                         f"toolkit_trains(model=, data=, loss=, optimizer=) before model.fit (docs/your-model.md)")
    if not model.loss:  # compile makes it {}
        raise UsageError("model.compile without a loss: give it compile's loss, or call toolkit_trains before fit")
    data = x if isinstance(x, tf.data.Dataset) else (x, y)
    loss = model.loss if isinstance(model.loss, (str, tf.keras.losses.Loss, list, dict)) \
        else LossFunctionWrapper(model.loss)
    if isinstance(loss, (list, dict)):
        raise UsageError("compile with a loss per output: give toolkit_trains a loss function of (model, *batch)")
    reached(Program(model, data, loss, model.optimizer, batch_size, bool(shuffle), sample_weight, validation_split))


def reached(program):
    """End the program's run here: the toolkit's loader gives its module the contract of what it trains."""
    if not keras_again.AGAIN:
        _READS[id(program)] = keras_again.loaded(program.model)
    raise models.ProgramReached(program)


_KERAS_FIT = tf.keras.Model.fit
tf.keras.Model.fit = training_v1.Model.fit = _fit  # v1: the class of a model made in a graph


def program_starts():
    """A load of the program begins: its own unseeded randomness (its data, a dataset's shuffle) the same in every
    process."""
    random.seed(0)
    np.random.seed(0)
    tf.random.set_seed(0)
    keras_again.starts()


if models.LOADING:
    program_starts()
elif models.is_run_by_python():
    # it trains as Keras alone would: op determinism (harness.determinism's) refuses a random op without a seed
    tf_config.disable_op_determinism()


def contract(module, program, model_name):
    """Give the program's module the model contract, from what its fit or toolkit_trains named; what the toolkit
    cannot take is a UsageError naming the model."""
    def named(function):
        def call(*args):
            try:
                return function(*args)
            except UsageError as error:
                raise UsageError(f"--model={model_name}: {error}") from None
        return call
    _NAMES[id(program)] = model_name
    configs = getattr(module, "CONFIGS", None) or {"default": Config("default", named(_batch_size)(program))}
    rules = {name: named(rule_of)(_made(program.optimizer, config)) for name, config in configs.items()}
    module.CONFIGS = configs
    module.DATA = "the program's own"
    module.data = named(lambda config, data_path, seed: batches_of(program, config, seed))
    module.loss = named(lambda config, params, inputs, random: objective(program, config, params, inputs))
    module.update_rule = lambda config: rules[config.name]
    return module


def _made(part, config):
    """A part as the program has it, or made from the configuration (a function or class of it)."""
    if callable(part) and not isinstance(part, (tf.keras.Model, tf.keras.optimizers.Optimizer,
                                                 tf.keras.optimizers.legacy.Optimizer)):
        return part(config)
    return part


def _batch_size(program):
    """The global batch's rows: fit's batch_size, the dataset's batches, or Keras' default."""
    if program.batch_size:
        return int(program.batch_size)
    if isinstance(program.data, tf.data.Dataset):
        return int(tf.nest.flatten(next(iter(_checked(program.data).take(1))))[0].shape[0])
    return DEFAULT_BATCH_SIZE


# --- data ---------------------------------------------------------------------------------------------------------

def _checked(dataset):
    """The program's dataset, if the toolkit can read it: finite and batched."""
    if tf.data.experimental.cardinality(dataset) == tf.data.experimental.INFINITE_CARDINALITY:
        raise UsageError("the program's dataset repeats forever: give it finite (the toolkit makes the epochs)")
    if not _has(dataset, "Batch"):
        raise UsageError("the program's dataset is not batched: give it .batch(B), as model.fit needs")
    return dataset


def _has(dataset, kind):
    """Whether a transformation of this kind ("Batch", "Shuffle") is in the dataset's making."""
    while dataset is not None:
        if kind in type(dataset).__name__:
            return True
        dataset = getattr(dataset, "_input_dataset", None)
    return False


def _by_content(arrays):
    """The order of rows sorted by their bytes (each row's in every array): one order whatever order they came in."""
    digests = [hashlib.sha1(b"".join(np.ascontiguousarray(a[i]).tobytes() for a in arrays)).digest()
               for i in range(len(arrays[0]))]
    return np.argsort(np.array(digests, dtype=object), kind="stable")


class Rows:
    """The program's examples as the contract's batches: step t's batch_size rows, an epoch's order drawn from (seed,
    epoch) when shuffled (its last rows, fewer than a batch, left out: every step's batch has the same rows)."""

    def __init__(self, arrays, batch_size, seed, shuffle):
        self.arrays, self.batch_size, self.seed, self.shuffle = arrays, batch_size, seed, shuffle
        self.epoch_size = len(arrays[0]) // batch_size
        if self.epoch_size < 1:
            raise UsageError(f"the program's data has {len(arrays[0])} examples, fewer than a batch of {batch_size}")
        self._order = (None, None)

    def order(self, epoch):
        if self._order[0] != epoch:
            rows = len(self.arrays[0])
            self._order = (epoch, np.random.default_rng([self.seed, epoch]).permutation(rows) if self.shuffle
                           else np.arange(rows))
        return self._order[1]

    def __call__(self, step):
        epoch, index = divmod(step, self.epoch_size)
        rows = self.order(epoch)[index * self.batch_size:(index + 1) * self.batch_size]
        return tuple(a[rows] for a in self.arrays)


def batches_of(program, config, seed):
    """The contract's batches of the program's data: its own batches object, or Rows of its examples."""
    data = program.data
    if callable(data) and not isinstance(data, tf.data.Dataset):
        data = data(config, seed)
    if callable(data) and isinstance(getattr(data, "epoch_size", None), int):
        return data
    x, y, weights = examples(data, program)
    _STRUCTURE[id(program)] = (x, y, weights)
    arrays = tuple(_as_fed(a) for a in tf.nest.flatten((x, y, weights)))
    return Rows(arrays, config.batch_size, seed, program.shuffle)


_STRUCTURE = {}  # {id(a program): (x, y, weights)}: how a batch's flat arrays make the model's inputs again


def examples(data, program):
    """(x, y, sample weights) of every example: arrays as given, or a dataset read once and unbatched."""
    if isinstance(data, tf.data.Dataset):
        batches = list(_checked(data).as_numpy_iterator())
        if not batches:
            raise UsageError("the program's dataset is empty")
        parts = [b if isinstance(b, tuple) else (b,) for b in batches]
        joined = [tf.nest.map_structure(lambda *a: np.concatenate(a), *column) for column in zip(*parts)]
        if _has(data, "Shuffle"):  # its order is the read's: each process puts the examples in one order of theirs
            order = _by_content(tf.nest.flatten(joined))
            joined = tf.nest.map_structure(lambda a: a[order], joined)
        data = tuple(joined) + (None,) * (3 - len(joined))
    elif not isinstance(data, (tuple, list)) or len(data) not in (2, 3):
        raise UsageError(f"the program's data must be (x, y), (x, y, sample_weight) or a tf.data.Dataset, not "
                         f"{type(data).__name__}")
    x, y, weights = (*data, None)[:3]
    weights = program.sample_weight if weights is None else weights
    y, weights = (() if part is None else part for part in (y, weights))  # () has no arrays to flatten
    if program.validation_split:  # Keras holds out the last examples, before any shuffling
        kept = int(math.floor(len(tf.nest.flatten(x)[0]) * (1.0 - program.validation_split)))
        x, y, weights = tf.nest.map_structure(lambda a: a[:kept], (x, y, weights))
    return x, y, weights


def _as_fed(array):
    """An array as the runners feed it: numpy, float64 as float32 (Keras casts it to the layers' float32)."""
    array = np.asarray(array)
    return array.astype(np.float32) if array.dtype == np.float64 else array


# --- the loss -----------------------------------------------------------------------------------------------------

def objective(program, config, params, inputs):
    """The loss of these rows: the program's own function of (model, *batch), or its compiled Keras loss."""
    model = params.build(lambda: graph_model(program, config))
    x, y, weights = tf.nest.pack_sequence_as(_STRUCTURE[id(program)], list(inputs)) \
        if id(program) in _STRUCTURE else (inputs, (), ())
    y, weights = (None if isinstance(part, tuple) and not part else part for part in (y, weights))
    if not _is_keras_loss(program.loss):
        return program.loss(model, *inputs)
    outputs = model(x, training=True)
    if isinstance(outputs, (list, tuple, dict)):
        raise UsageError("a model of several outputs with compile's loss: give toolkit_trains a loss function of "
                         "(model, *batch)")
    return keras_objective(program.loss, y, outputs, weights, model.losses)


def _is_keras_loss(loss):
    """compile's kind of loss (a name, a Keras Loss, a function of (y_true, y_pred)), not toolkit_trains' own."""
    return isinstance(loss, (str, tf.keras.losses.Loss, LossFunctionWrapper))


def keras_objective(loss, y_true, y_pred, weights, regularization):
    """Keras' compiled loss on these rows as the contract's objective: Keras divides the weighted sum by the number
    of values (or of values the output's mask keeps), so the objective is that (sum, count), or their quotient, a
    mean over rows, when nothing is masked (then a layer's regularization losses are added, as Keras adds them)."""
    loss = tf.keras.losses.get(loss) if isinstance(loss, str) else loss
    if not isinstance(loss, tf.keras.losses.Loss):
        loss = LossFunctionWrapper(loss)  # as compile wraps a function: it matches y_true's rank to y_pred's
    reduction = getattr(loss, "reduction", "auto")
    if reduction not in ("auto", "sum_over_batch_size"):
        raise UsageError(f"compile's loss with reduction={reduction!r}: the runners need Keras' default, the mean "
                         f"(reduction='sum_over_batch_size')")
    per_value = tf.cast(loss.call(y_true, y_pred), tf.float32)
    weighted = per_value
    if weights is not None:
        weights = tf.cast(weights, tf.float32)
        while weights.shape.rank > per_value.shape.rank:
            weights = tf.squeeze(weights, -1)
        while weights.shape.rank < per_value.shape.rank:
            weights = weights[..., None]
        weighted = per_value * weights
    mask = getattr(y_pred, "_keras_mask", None)
    if mask is None:
        mean = tf.reduce_sum(weighted) / float(per_value.shape.num_elements())
        return mean + tf.add_n(regularization) if regularization else mean
    if regularization:
        raise UsageError("a masked output with a layer's regularization loss: Keras adds it once to a mean over "
                         "real values, which no sum over workers gives; drop the regularizer or the mask")
    mask = tf.cast(mask, tf.float32)
    while mask.shape.rank < per_value.shape.rank:
        mask = mask[..., None]
    return tf.reduce_sum(weighted * mask), tf.reduce_sum(mask * tf.ones_like(per_value))


def graph_model(program, config):
    """The program's model, made in this graph: by the program's function, or by running the program again."""
    tf.keras.backend.reset_uids()  # its layers' names, hence its variables', the same in every graph of a process
    model = _made(program.model, config)
    if isinstance(model, tf.keras.Model) and model is program.model:  # made at load, in another graph
        with keras_again.model_again(_READS[id(program)]):
            model = _made(models.run_again(_NAMES[id(program)]).model, config)
        # a lookup layer made before its vocabulary leaves a table without an initializer (None), which
        # tables_initializer cannot group
        tables = tf.compat.v1.get_collection_ref(tf.compat.v1.GraphKeys.TABLE_INITIALIZERS)
        tables[:] = [initializer for initializer in tables if initializer is not None]
    return model


_NAMES = {}  # {id(a program): its --model}
_READS = {}  # {id(a program): what its run at load read (keras_again.Reads)}


# --- the optimizer ------------------------------------------------------------------------------------------------

_UNMAPPED = {"clipnorm": "per-variable clipping (clipnorm): use global_clipnorm",
             "clipvalue": "clipping by value (clipvalue): use global_clipnorm", "use_ema": "use_ema",
             "amsgrad": "amsgrad", "centered": "centered", "decay": "the legacy decay: use a LearningRateSchedule"}
_MAPPED = ("weight_decay", "global_clipnorm", "beta_1", "beta_2", "epsilon", "momentum", "nesterov", "rho",
           "initial_accumulator_value")


def _settings(optimizer):
    """{setting: value} of a Keras optimizer, new or legacy (read from it: get_config fails on a schedule of the
    program's own without one)."""
    hyper = getattr(optimizer, "_hyper", {})

    def value(name):
        found = hyper.get(name, getattr(optimizer, name, getattr(optimizer, "_" + name, None)))
        return float(str(found.numpy())) if hasattr(found, "numpy") else found  # a float32's shortest decimal: 0.9
    return {name: value(name) for name in (*_UNMAPPED, *_MAPPED)}


def _rate(optimizer):
    """A Keras optimizer's learning rate: a variable, a number or a LearningRateSchedule."""
    rate = getattr(optimizer, "_learning_rate", None)
    return optimizer._get_hyper("learning_rate") if rate is None else rate


def rule_of(optimizer):
    """The toolkit's update rule doing what a Keras optimizer does, or a UsageError naming what it cannot."""
    if not isinstance(optimizer, (tf.keras.optimizers.Optimizer, tf.keras.optimizers.legacy.Optimizer)):
        optimizer = tf.keras.optimizers.get(optimizer)
    kind, config = type(optimizer).__name__, _settings(optimizer)
    def refuse(what):
        return UsageError(f"the optimizer {kind} with {what}: the toolkit has no rule doing the same "
                          f"(harness/update.py)")
    for option, why in _UNMAPPED.items():
        if config.get(option) not in (None, False, 0, 0.0):
            raise refuse(why)
    weight_decay = config.get("weight_decay") or 0.0
    if weight_decay and kind not in ("Adam", "AdamW"):
        raise refuse(f"weight_decay={weight_decay} (AdamW is the rule with weight decay)")
    if getattr(optimizer, "_exclude_from_weight_decay", None) or getattr(optimizer, "_exclude_from_weight_decay_names",
                                                                           None):
        raise refuse("variables excluded from weight decay")
    if kind in ("Adam", "AdamW"):
        rule = update.Adam(config["beta_1"], config["beta_2"], config["epsilon"], weight_decay)
    elif kind == "SGD":
        momentum = config.get("momentum", 0.0)
        if momentum and isinstance(_rate(optimizer), tf.keras.optimizers.schedules.LearningRateSchedule):
            raise refuse("momentum and a schedule (Keras' velocity keeps each step's rate, the toolkit's Momentum "
                         "applies the current one)")
        rule = update.Momentum(momentum, bool(config.get("nesterov"))) if momentum else update.SGD()
    elif kind == "RMSprop":
        if config.get("momentum"):
            raise refuse(f"momentum={config['momentum']}")
        rule = update.RMSProp(config["rho"], config["epsilon"])
    elif kind == "Adagrad":
        rule = update.Adagrad(config["initial_accumulator_value"], config["epsilon"])
    else:
        raise UsageError(f"the optimizer {kind}: the toolkit's rules are Keras' SGD (with momentum), Adam, AdamW, "
                         f"RMSprop and Adagrad (harness/update.py)")
    rate = _rate(optimizer)
    if isinstance(rate, tf.keras.optimizers.schedules.LearningRateSchedule):
        schedule = lambda step, epoch: tf.cast(rate(step), tf.float32)  # noqa: E731
    else:
        value = float(rate.numpy() if hasattr(rate, "numpy") else rate)
        schedule = lambda step, epoch: tf.constant(value)  # noqa: E731
    return update.Rule(rule, schedule, clip_norm=float(config.get("global_clipnorm") or 0.0))
