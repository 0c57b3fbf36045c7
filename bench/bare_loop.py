"""The baseline of `make bench-overhead`: run.py's training step on one device in a loop with nothing around it
(no results, no TensorBoard, no progress lines). Prints the throughput summary as one JSON line."""
import json

import harness.determinism  # (first: it fixes TensorFlow's kernels)
from harness import data, determinism, flags, training
from harness.timer import ThroughputTimer
from harness.training import StepFeed
import tensorflow as tf

import model


def main():
    args = flags.parse(flags.parser("bare_loop", __doc__))
    config = flags.model_config(args)
    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(config, data.load(args, config), rows=slice(None))
    print(json.dumps(timed_steps(args, config, feed, train_step(config, args.seed, feed)[0])))


def train_step(config, seed, feed, prepare=None):
    """run.py's step on one device: the model's loss, gradients and update, nothing more. `prepare(variables,
    gradients)` changes the gradients first (bench.sparse_update's densified rule). Returns the fetches (the
    loss, the final LSTM state and the update op), {variable name: the variable (its parts)} and {variable
    name: its gradient} (bench.step_trace traces when the step reads each and when each gradient is ready)."""
    lm = model.LSTMLanguageModel(config, seed)
    loss, final_state = feed.loss(lm, seed)
    gradients = lm.worker_gradients(loss)
    train_op, _ = model.update(lm, prepare(lm.variable_list, gradients) if prepare else gradients,
                               feed.learning_rate)
    return [loss, final_state, train_op], lm.variables, dict(zip(lm.variables, gradients))


def timed_steps(args, config, feed, fetches):
    """The throughput summary of --steps session.runs of `fetches` (loss, final state, train op), nothing
    else in the loop."""
    timer = ThroughputTimer(args.warmup_steps)
    with tf.compat.v1.Session(config=determinism.session_config(args)) as session:
        session.run(tf.compat.v1.global_variables_initializer())

        def run_step(step, state):
            _, state, _ = session.run(fetches, feed(step, state))
            return state, None, config.words_per_batch, {}
        training.loop(args.steps, run_step, lambda step, objective, seconds, words: timer.record(seconds, words))
    return timer.summary()


if __name__ == "__main__":
    harness.main(main)
