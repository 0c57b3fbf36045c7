"""The baseline of `make bench-overhead`: run.py's training step on one device in a loop with nothing around it
(no results, no TensorBoard, no progress lines). Prints the throughput summary as one JSON line."""
import json

import harness.determinism  # (first: it fixes TensorFlow's kernels)
from harness import determinism, flags, models, training, update
from harness.timer import ThroughputTimer
from harness.training import StepFeed, worker_objective
from harness.variables import Params
import tensorflow as tf


def main():
    args = flags.parse(flags.parser("bare_loop", __doc__))
    model, config = models.from_flags(args)
    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(model, config, model.data(config, args.data_path, args.seed), rows=slice(None))
    print(json.dumps(timed_steps(args, models.units_per_step(model, config), feed,
                                 train_step(model, config, args.seed, feed)[0])))


def train_step(model, config, seed, feed):
    """run.py's step on one device, nothing more: ([objective, final state, update op], {name: variable},
    {name: gradient}); bench.step_trace traces the last two."""
    params = Params(model, config, seed)
    objective, final_state = feed.loss(params, seed)
    objective = worker_objective(objective)
    gradients = params.gradients(objective)
    train_op, _ = update.update(params, gradients, feed.learning_rate, feed.step)
    return [objective, final_state, train_op], params.variables, dict(zip(params.variables, gradients))


def timed_steps(args, units_per_step, feed, fetches):
    """The throughput summary of --steps session.runs of `fetches`, with nothing else in the loop."""
    timer = ThroughputTimer(args.warmup_steps)
    with tf.compat.v1.Session(config=determinism.session_config(args)) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(tf.compat.v1.tables_initializer())  # the model's lookup tables (a Keras StringLookup's)

        def run_step(step, state):
            _, state, _ = session.run(fetches, feed(step, state))
            return state, None, units_per_step, {}
        training.loop(args.steps, run_step, lambda step, objective, seconds, units: timer.record(seconds, units))
    return timer.summary()


if __name__ == "__main__":
    harness.main(main)
