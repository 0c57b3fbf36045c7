"""Single-device training: the reference every distributed runner is compared with.

    python run.py --model=lstm --config=small --steps=300
    python run.py --emulate_workers=2      # the bit-for-bit reference of a synchronous 2-worker run

--emulate_workers=W computes each step as W workers' shards of the batch, combined as a synchronous run does.
"""

import harness.determinism  # first: it fixes TensorFlow's kernels before TensorFlow loads
from harness import data, determinism, models, placement, reduction, runner_flags, training, update
from harness.checkpoints import Checkpoints
from harness.recorder import Recorder, remove_stale_outputs
from harness.training import StepFeed
from harness.variables import Params
import tensorflow as tf


def worker_gradients(params, feed, seed, num_workers):
    """(objectives, final states, gradients) of `num_workers` workers, each on its shard of the fed rows."""
    # worker r's forward pass, on its rows only
    losses, final_states = zip(*[feed.loss(params, seed, data.shard(feed.config.batch_size, r, num_workers))
                                 for r in range(num_workers)])
    counts = [tf.cast(loss.count, tf.float32) for loss in losses if isinstance(loss, training.TokenLoss)]
    mean_count = tf.add_n(counts) / num_workers if counts else None  # (sum, count) losses: the workers' mean
    objectives = [training.worker_objective(loss, lambda _: mean_count) for loss in losses]
    return objectives, final_states, [params.gradients(objective) for objective in objectives]  # backward passes


def reference_step(model, config, seed, feed, num_workers):
    """One step as `num_workers` shards: (params, gradient kinds, objective, final state, global norm, train op)."""
    params = Params(model, config, seed)
    objectives, final_states, gradients = worker_gradients(params, feed, seed, num_workers)
    train_op, global_norm = update.update(params, reduction.workers_mean(gradients), feed.learning_rate,
                                          feed.step)
    final_state = final_states[0] if feed.initial_state is None else tf.concat(final_states, axis=0)
    kinds = placement.gradient_kinds(params.variables, gradients[0])
    return params, kinds, tf.add_n(objectives) / num_workers, final_state, global_norm, train_op


def main():
    args = runner_flags.parse("run", __doc__)
    remove_stale_outputs(args)
    model, config = models.from_flags(args)
    batches = model.data(config, args.data_path, args.seed)

    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(model, config, batches, rows=slice(None))
    params, kinds, objective, final_state, global_norm, train_op = reference_step(model, config, args.seed, feed,
                                                                                  args.emulate_workers)
    saver = params.saver()
    checkpoints = Checkpoints(args, saver, args.emulate_workers, "--emulate_workers")

    with tf.compat.v1.Session(config=determinism.session_config(args)) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(tf.compat.v1.tables_initializer())  # the model's lookup tables (a Keras StringLookup's)
        first_step, state = checkpoints.restore(session) if args.resume else (0, None)
        recorder = Recorder(args, model, config, "run", args.emulate_workers, first_step if args.resume else None)

        def run_step(step, state):
            step_objective, state, norm, _ = session.run([objective, final_state, global_norm, train_op],
                                                         feed(step, state))
            return state, step_objective, models.units_per_step(model, config), {"grad_norm": norm}

        def after_step(done, state):
            if checkpoints.due(done, args.steps):
                checkpoints.save(session, done, state)
        training.loop(args.steps, run_step, recorder.step, first_step, state, after_step)
        recorder.finish(session, saver, placement.describe(params, kinds))


if __name__ == "__main__":
    harness.main(main)
