"""The training loop every runner shares, the placeholders of one worker's share of a training step, and what
to feed them at step t."""
import time
import typing

import numpy as np
from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import tensorflow as tf  # noqa: E402

from harness import UsageError, events, layers, models
from harness.variables import StepRandom


class Stop(Exception):
    """Raised by a run_step to end its worker's loop early: an asynchronous worker once the chief is done."""


def loop(steps, run_step, record=None, first_step=0, state=None, after_step=None):
    """Runs steps `first_step` to `steps` - 1: `run_step(step, state)` returns (next state, objective, words,
    {more}); `record` (the chief's Recorder.step) gets each with the wall time of the whole iteration, then
    `after_step(steps done, state)` runs (periodic checkpoints). A run_step that raises Stop ends the loop."""
    events.host_bytes(first_step)  # before any step: an asynchronous worker's host is seen before the chief measures
    clock = time.perf_counter()
    for step in range(first_step, steps):
        try:
            state, objective, words, more = run_step(step, state)
        except Stop:
            return
        now = time.perf_counter()
        if record:
            record(step, objective, now - clock, words, **more)
        if after_step:
            after_step(step + 1, state)  # a save's time falls in the next step's: throughput shows its cost
        events.host_bytes(step + 1)  # make bench HOSTS=: this host's bytes so far, where the launcher counts them
        clock = now


class TokenLoss(typing.NamedTuple):
    """A loss returned as (sum, count): a sum over this worker's rows and what it is divided by, counted over the
    same rows (NMT's and BERT's real tokens), so that the global batch's objective is the global sum over the
    global count."""
    sum: object
    count: object


def worker_objective(objective, mean_count=lambda count: count):
    """The objective whose gradient a worker sends: a mean over rows as it is; a TokenLoss's sum over the mean of
    the workers' counts (`mean_count(own count)`; default the worker's own), so that the workers' averaged
    gradients are the gradient of the global sum over the global count. Counts are whole numbers: any order of
    adding them gives the same bits."""
    if not isinstance(objective, TokenLoss):
        return objective
    mean = mean_count(tf.stop_gradient(tf.cast(objective.count, tf.float32)))
    return tf.cast(objective.sum, tf.float32) / tf.where(mean > 0, mean, 1.0)  # nothing counted: the sum, 0


def _checked(model, objective):
    """The loss's objective: a scalar, or (sum, count) of scalars (or keras_program.ratio's) as a TokenLoss;
    anything else is refused."""
    objective = getattr(objective, "toolkit_sum_count", objective)
    parts = objective if isinstance(objective, tuple) else (objective,)
    if len(parts) not in (1, 2) or not all(isinstance(p, tf.Tensor) and p.shape.rank == 0 for p in parts):
        with_state = " (with state_shape: (objective, new state))" if hasattr(model, "state_shape") else ""
        raise UsageError(f"--model={models.name_of(model)}: loss must return a scalar tensor (the mean over rows) "
                         f"or (sum, count){with_state}, not {_describe(objective)}")
    return TokenLoss(*parts) if len(parts) == 2 else objective


def _with_state(model, returned, shape):
    """A stateful loss's (objective, new state), the new state checked to be a tensor of the state's `shape`."""
    new_state = returned[1] if isinstance(returned, tuple) and len(returned) == 2 else None
    if not isinstance(new_state, tf.Tensor) or not new_state.shape.is_compatible_with(shape):
        raise UsageError(f"--model={models.name_of(model)}: loss must return (objective, new state) with "
                         f"state_shape, the new state a tensor of shape {shape} (these rows'), not "
                         f"{_describe(returned)}")
    return returned


def _describe(value):
    """What a loss returned, as a mistake message shows it."""
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}: " + ", ".join(_describe(v) for v in value)
    if isinstance(value, tf.Tensor):
        return f"a tensor of shape {value.shape}"
    return type(value).__name__


class StepFeed:
    """Placeholders for rows `rows` (a slice of the global batch) of a step: the inputs, the state carried in
    (zeros at the start of every epoch; None without state) and the step; and the step's learning rate."""

    def __init__(self, model, config, batches, rows):
        batches = models.check_batches(model, config, batches)
        self.model, self.config, self.batches, self.rows = model, config, batches, rows
        self.fed = range(config.batch_size)[rows]
        self.inputs = tuple(tf.compat.v1.placeholder(tf.as_dtype(a.dtype), [len(self.fed), *a.shape[1:]],
                                                     f"input_{i}") for i, a in enumerate(batches(0)))
        shape = models.state_shape(model, config)
        self.state_shape = None if shape is None else [len(self.fed), *shape]
        self.initial_state = None if shape is None else tf.compat.v1.placeholder(tf.float32, self.state_shape,
                                                                                  "initial_state")
        self.step = tf.compat.v1.placeholder(tf.int64, [], "step")
        self.learning_rate = models.update_rule(model, config).learning_rate(self.step,
                                                                             self.step // batches.epoch_size)

    def loss(self, params, seed, shard=None):
        """(the model's objective of rows `shard` (default: every fed row), the rows' new state, or for a model
        without state an op whose fetched value is None), its randomness keyed by (seed, step). A loss that
        returns (sum, count) gives a TokenLoss: worker_objective makes it the objective."""
        rows = self.fed if shard is None else range(self.config.batch_size)[shard]
        local = slice(rows.start - self.fed.start, rows.stop - self.fed.start)
        inputs, state = self.inputs, self.initial_state
        if rows != self.fed:  # run.py's emulated workers: a shard of the fed rows
            inputs, state = tuple(x[local] for x in inputs), None if state is None else state[local]
        random = StepRandom(seed, self.step, slice(rows.start, rows.stop), self.config.batch_size)
        # copied code's layers and dropout, made the toolkit's
        with layers.captured(params, random, models.name_of(self.model)):
            if state is None:
                objective, final_state = self.model.loss(self.config, params, inputs, random), tf.no_op()
            else:
                objective, final_state = _with_state(self.model, self.model.loss(self.config, params, inputs,
                                                                                random, state), state.shape)
        return _checked(self.model, objective), final_state

    def __call__(self, step, state):
        """The feed dict of `step`; `state` is the state fetched at step - 1 (None at the first step)."""
        feed = dict(zip(self.inputs, [a[self.rows] for a in self.batches(step)]))
        feed[self.step] = step
        if self.initial_state is not None:
            if state is None or step % self.batches.epoch_size == 0:
                state = np.zeros(self.state_shape, np.float32)
            feed[self.initial_state] = state
        return feed
