"""A Keras program run again in a runner's graph for its model alone (harness/keras_program.py's graph_model).

Its first run, at load, is eager, as Python runs it; this one is a TensorFlow 1 graph's, where nothing is computed.
So what the program's own code took from eager values at load (a dataset's batches it iterated, a tensor's
`.numpy()`, a layer called on constants) it takes again here, the same values in the same order, and its model's
layers make their variables in the runner's graph. docs/your-model.md, "From copied code"."""
import contextlib
import functools
import sys

from harness import UsageError, models  # noqa: F401  (before TensorFlow: harness.determinism fixes its kernels)
import tensorflow as tf  # noqa: E402

from keras.src.engine import (base_layer, base_layer_utils, base_layer_v1, base_preprocessing_layer,  # noqa: E402
                               keras_tensor, training_v1)
from keras.src.layers.preprocessing import index_lookup, normalization, text_vectorization  # noqa: E402
from tensorflow.python.data.ops import dataset_ops  # noqa: E402
from tensorflow.python.framework import ops, tensor as tensor_lib  # noqa: E402
from tensorflow.python.ops import variables as tf_variables  # noqa: E402

KINDS = {"iteration": "a dataset's elements", "len": "a dataset's length",
         "value": "a tensor's value (.numpy(), a numpy array)", "layer": "a layer's call on constants",
         "vocabulary": "a lookup layer's vocabulary", "adapted": "a preprocessing layer's adapt"}


class Reads:
    """What a program's own code took from eager values at load, by kind (KINDS), each kind in order."""

    def __init__(self, values=None):
        self.values = values or {kind: [] for kind in KINDS}

    def keep(self, kind, value):
        self.values[kind].append(value)
        return value

    def again(self):
        """A copy to take back from, in order."""
        return Reads({kind: list(values) for kind, values in self.values.items()})

    def take(self, kind):
        if not self.values[kind]:
            raise UsageError(f"run again, it read {KINDS[kind]} more often than at load (does it depend on whether "
                             f"TensorFlow runs eagerly?)")
        return self.values[kind].pop(0)

    def settle(self, model):
        """At fit: a layer called on constants that is the model's (a tutorial's call on an example batch) is
        called again as the model's; any other is its value at load, named on stderr if it has weights: a
        constant never trained, as in Keras (keras.io's BERT: a position Embedding of tf.range)."""
        inside = {id(layer) for layer in model._flatten_layers(include_self=True)} \
            if isinstance(model, tf.keras.Model) else set()
        for layer, given in self.values["adapted"]:
            if given is None and id(layer) in inside:
                raise UsageError(f"{layer.name} ({type(layer).__name__}) is adapted to the data and is a layer of the "
                                 f"model: the toolkit makes constants of what a Normalization, StringLookup, "
                                 f"IntegerLookup or TextVectorization adapted, not of this one's; apply it to the data "
                                 f"instead (dataset.map)")
        settled = []
        for layer, output in self.values["layer"]:
            if id(layer) not in inside and layer.trainable_weights:
                print(f"keras: {layer.name} ({type(layer).__name__}) is called on constants while the model is "
                      f"built: computed once, as Keras computes it, a constant never trained", file=sys.stderr,
                      flush=True)
            settled.append(None if id(layer) in inside else output)
        self.values["layer"] = settled
        return self


LOADED = [Reads()]  # [what the program's run at load has read so far]
AGAIN = []  # [what its run again takes back] while a program runs again for its model


def by_the_program():
    """Whether the caller of the function asking is the program's own code (its file), not Keras' or TensorFlow's."""
    return models.LOADING and sys._getframe(2).f_code.co_filename == getattr(sys.modules["__main__"], "__file__",
                                                                              None)


def _read(kind, method):
    """A method giving an eager value, kept when the program calls it at load and taken back in its run again."""
    @functools.wraps(method)
    def read(self, *args, **kwargs):
        if not by_the_program():
            return method(self, *args, **kwargs)
        if AGAIN:
            return AGAIN[0].take(kind)
        return LOADED[0].keep(kind, method(self, *args, **kwargs))
    return read


def _iterated(method):
    """Dataset.__iter__: the elements the program's loop takes at load, kept as it takes them; the same again."""
    @functools.wraps(method)
    def iterate(self):
        if not by_the_program():
            return method(self)
        if AGAIN:
            return iter([constant(element) for element in AGAIN[0].take("iteration")])
        kept = LOADED[0].keep("iteration", [])
        return (kept.append(element) or element for element in method(self))
    return iterate


def _adapted(method):
    """A preprocessing layer's adapt: at load, as Keras does it, keeping what it adapted; in the run again (a
    TensorFlow 1 graph cannot adapt), that state given to the layer as Keras' constructor takes it: constants."""
    @functools.wraps(method)
    def adapt(self, *args, **kwargs):
        if not by_the_program():
            return method(self, *args, **kwargs)
        if AGAIN:
            _, given = AGAIN[0].take("adapted")
            if given:
                given(self)
            return None
        output = method(self, *args, **kwargs)
        LOADED[0].keep("adapted", (self, adapted_state(self)))
        return output
    return adapt


def adapted_state(layer):
    """A function giving a layer of this kind what `layer` adapted, as Keras' constructor would take it, or None
    for a kind the toolkit does not know: a Normalization's mean and variance, a lookup's vocabulary (a table each
    process initialises: tables_initializer)."""
    if isinstance(layer, normalization.Normalization):
        mean, variance = layer.adapt_mean.numpy(), layer.adapt_variance.numpy()

        def given(again):
            again.input_mean, again.input_variance = mean, variance
        return given
    if isinstance(layer, (index_lookup.IndexLookup, text_vectorization.TextVectorization)):
        vocabulary, size = layer.get_vocabulary(), layer.vocabulary_size()

        def given(again):
            again.set_vocabulary(vocabulary)
            # the size a graph's table cannot tell before it runs: a multi-hot output's depth (Keras' config has it)
            getattr(again, "_lookup_layer", again)._frozen_vocab_size = size
        return given
    return None


def _symbolic_numpy(self):
    """A symbolic tensor's .numpy in the program's run again (an attribute only for the program's own code, so that
    Keras, asking hasattr(x, "numpy"), still tells eager tensors apart)."""
    if not (AGAIN and by_the_program()):
        raise AttributeError("numpy")
    return lambda: AGAIN[0].take("value")


def constant(value):
    """An eager value (tensors, ragged ones, their structures) as constants of the graph being built."""
    return tf.nest.map_structure(lambda v: tf.constant(v.numpy()) if isinstance(v, ops._EagerTensorBase) else v,
                                 value, expand_composites=True)


def _on_constants(args, kwargs):
    """Whether a layer's call outside any layer's call takes constants alone (no Keras tensor): at load, eagerly
    (not in a function TensorFlow traces, as a dataset's map); again, in the runner's graph."""
    inputs = tf.nest.flatten(args[0] if args else kwargs.get("inputs"))
    if base_layer_utils.call_context().in_call or not inputs:
        return False
    if not AGAIN:
        return tf.executing_eagerly() and not any(isinstance(x, keras_tensor.KerasTensor) for x in inputs)
    return not tf.compat.v1.get_default_graph().building_function and not base_layer_utils.uses_keras_history(
        [x for x in inputs if isinstance(x, tf.Tensor) and not isinstance(x, ops._EagerTensorBase)])


def _layer_call(call):
    """Layer.__call__ keeping the program's calls on constants at load and, in its run again, giving each call of a
    layer not the model's its value at load, without making that layer's variables."""
    @functools.wraps(call)
    def layer_call(layer, *args, **kwargs):
        if not AGAIN:
            output = call(layer, *args, **kwargs)
            if models.LOADING and _on_constants(args, kwargs):
                LOADED[0].keep("layer", (layer, output))
            return output
        try:
            value = AGAIN[0].take("layer") if _on_constants(args, kwargs) else None
            return call(layer, *args, **kwargs) if value is None else constant(value)
        except Exception as error:
            if not hasattr(error, "in_layer"):  # the innermost layer's name, for the one line run_again gives
                error.in_layer = f"{layer.name} ({type(layer).__name__})"
            raise
    return layer_call


for _layer in (base_layer.Layer, base_layer_v1.Layer):
    _layer.__call__ = _layer_call(_layer.__call__)
dataset_ops.DatasetV2.__iter__ = _iterated(dataset_ops.DatasetV2.__iter__)
dataset_ops.DatasetV2.__len__ = _read("len", dataset_ops.DatasetV2.__len__)
ops._EagerTensorBase.numpy = _read("value", ops._EagerTensorBase.numpy)
ops._EagerTensorBase.__array__ = _read("value", ops._EagerTensorBase.__array__)
for _lookup in (index_lookup.IndexLookup, text_vectorization.TextVectorization):
    _lookup.get_vocabulary = _read("vocabulary", _lookup.get_vocabulary)
    _lookup.vocabulary_size = _read("vocabulary", _lookup.vocabulary_size)
_preprocessing = [base_preprocessing_layer.PreprocessingLayer]
while _preprocessing:
    _kind = _preprocessing.pop()
    _preprocessing += _kind.__subclasses__()
    if "adapt" in vars(_kind):
        _kind.adapt = _adapted(_kind.adapt)
_symbolic_array = tensor_lib.Tensor.__array__


def starts():
    """A load of the program begins: at load, what it reads is kept anew."""
    if not AGAIN:
        LOADED[0] = Reads()


def loaded(model):
    """What the program's run at load read, settled once its fit is reached."""
    reads, LOADED[0] = LOADED[0], Reads()
    return reads.settle(model)


@contextlib.contextmanager
def model_again(reads):
    """While a program runs again in a runner's graph for its model alone: it takes back `reads` (a Reads of its
    run at load); compile does nothing (the first run's compile gave the loss and optimizer); the variables its
    model's layers make are the graph's, any other (its optimizer's step counter, a metric's totals) is made in a
    graph of its own, never run; a layer's `weights=` are its variables' initial values."""
    depth = [0]

    def counted(add_weight):
        @functools.wraps(add_weight)
        def add(layer, *args, **kwargs):
            model_s = not isinstance(layer, tf.keras.metrics.Metric)  # a metric is a layer too
            depth[0] += model_s
            given = getattr(layer, "_initial_weights", None)
            if given is not None:  # Keras would set them after the build, in a session of its own
                kwargs["initializer"] = tf.keras.initializers.Constant(given[len(layer.weights)])
                if len(layer.weights) + 1 == len(given):
                    layer._initial_weights = None
            try:
                return add_weight(layer, *args, **kwargs)
            finally:
                depth[0] -= model_s
        return add

    def elsewhere(next_creator, **kwargs):
        if depth[0]:
            return next_creator(**kwargs)
        with tf.Graph().as_default():
            return tf_variables.default_variable_creator_v2(None, **kwargs)
    layer_kinds, model_kinds = (base_layer.Layer, base_layer_v1.Layer), (tf.keras.Model, training_v1.Model)
    saved = [kind.add_weight for kind in layer_kinds], [vars(kind)["compile"] for kind in model_kinds]
    AGAIN.append(reads.again())
    # Keras would evaluate the constant inputs of TensorFlow ops between layers in a session of its own, on the
    # runner's devices, which that session does not have; kept as ops, they are computed where the model runs.
    base_layer_utils._UNSAFE_GRAPH_OP_LAYER_CREATION = True
    tensor_lib.Tensor.numpy = property(_symbolic_numpy)
    tensor_lib.Tensor.__array__ = lambda self, dtype=None: (
        AGAIN[0].take("value") if by_the_program() else _symbolic_array(self, dtype))
    try:
        for kind in layer_kinds:
            kind.add_weight = counted(kind.add_weight)
        for kind in model_kinds:
            kind.compile = lambda *args, **kwargs: None
        context = base_layer_utils.call_context()
        with tf.variable_creator_scope(elsewhere), context.enter(None, None, build_graph=True, training=True):
            # in training, as the runners call the model: a layer whose call's `training` has no default gets it;
            # outside any layer's call still, so that the functional model is made as the program makes it
            context.in_call = False
            yield
    finally:
        AGAIN.clear()
        base_layer_utils._UNSAFE_GRAPH_OP_LAYER_CREATION = False
        del tensor_lib.Tensor.numpy
        tensor_lib.Tensor.__array__ = _symbolic_array
        for kind, add_weight in zip(layer_kinds, saved[0]):
            kind.add_weight = add_weight
        for kind, compile_ in zip(model_kinds, saved[1]):
            kind.compile = compile_
