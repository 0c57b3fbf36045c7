"""The training loop every runner shares, the placeholders of one worker's share of a training step, and what
to feed them at step t."""
import time

import numpy as np
from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import tensorflow as tf  # noqa: E402

import configs


def loop(steps, run_step, record=None, first_step=0, state=None, after_step=None):
    """Runs steps `first_step` (a resumed run's) to `steps` - 1: `run_step(step, state)` runs one and returns
    (the LSTM state to carry into the next, the objective, the words trained, {more to record}); the first
    step gets `state` (None: zeros). `record(step, objective, seconds, words, **more)` (the chief's
    Recorder.step; None on other tasks) gets each step with the wall time of the whole iteration, the step's
    session.run and the loop's own work together; then `after_step(steps done, state)` (periodic checkpoints)."""
    clock = time.perf_counter()
    for step in range(first_step, steps):
        state, objective, words, more = run_step(step, state)
        now = time.perf_counter()
        if record:
            record(step, objective, now - clock, words, **more)
        if after_step:
            after_step(step + 1, state)  # a save's time falls in the next step's: throughput shows its cost
        clock = now


class StepFeed:
    """Rows `rows` (a slice of the global batch) of step t: the inputs, the targets, the LSTM state carried
    from step t-1 (zero at the start of every epoch), the step (it seeds dropout) and the learning rate."""

    def __init__(self, config, batches, rows):
        self.config, self.batches, self.rows = config, batches, rows
        num_rows = len(range(config.batch_size)[rows])
        self.inputs = tf.compat.v1.placeholder(tf.int32, [num_rows, config.num_steps], "inputs")
        self.targets = tf.compat.v1.placeholder(tf.int32, [num_rows, config.num_steps], "targets")
        self.state_shape = configs.state_shape(config, num_rows)
        self.initial_state = tf.compat.v1.placeholder(tf.float32, self.state_shape, "initial_state")
        self.step = tf.compat.v1.placeholder(tf.int64, [], "step")
        self.learning_rate = tf.compat.v1.placeholder(tf.float32, [], "learning_rate")

    def loss(self, lm, seed, shard=None):
        """lm.loss of the global batch's rows `shard` (default: every fed row) at this step, with the step's
        dropout masks and sampled candidates, both drawn from (seed, step) alone: a row gets the same masks
        whichever worker computes it. Returns (loss, final_state)."""
        fed = range(self.config.batch_size)[self.rows]
        rows = fed if shard is None else range(self.config.batch_size)[shard]
        inputs, targets, state = self.inputs, self.targets, self.initial_state
        if rows != fed:  # run.py's emulated workers: a shard of the fed rows
            local = slice(rows.start - fed.start, rows.stop - fed.start)
            inputs, targets, state = inputs[local], targets[local], state[:, local]
        return lm.loss(inputs, targets, state, lm.dropout_masks(seed, self.step, slice(rows.start, rows.stop)),
                       lm.sampled_candidates(seed, self.step))

    def __call__(self, step, state):
        """The feed dict of `step`; `state` is the final state fetched at step - 1 (None at the first step)."""
        inputs, targets = self.batches(step)
        if state is None or self.batches.starts_epoch(step):
            state = np.zeros(self.state_shape, np.float32)
        return {
            self.inputs: inputs[self.rows],
            self.targets: targets[self.rows],
            self.initial_state: state,
            self.step: step,
            self.learning_rate: configs.learning_rate(self.config, self.batches.epoch(step)),
        }
