"""Single-device training: the reference every distributed runner is compared with.

    python run.py --config=small --steps=300
    python run.py --emulate_workers=2      # the bit-for-bit reference of a synchronous 2-worker run

With --emulate_workers=W each step computes the gradients of W shards of the global batch (worker r's rows,
harness.data.shard) and combines them as a synchronous W-worker run does (model.average_worker_gradients).
W = 1 is plain single-device training. `python run.py --help` lists every flag.
"""

import harness.determinism  # first: it fixes TensorFlow's kernels before TensorFlow loads
from harness import data, determinism, flags, runner_flags, training
from harness.checkpoints import Checkpoints
from harness.recorder import Recorder, remove_stale_outputs
from harness.training import StepFeed
import tensorflow as tf

import model


def reference_step(config, seed, feed, num_workers):
    """The graph of one training step, computed as `num_workers` workers' shards of the global batch.

    Returns the model, the global batch's loss, the final LSTM state, the global gradient norm and the
    update op."""
    lm = model.LSTMLanguageModel(config, seed)
    losses, final_states, gradients = [], [], []
    for r in range(num_workers):  # worker r's forward and backward pass, on its rows only
        rows = data.shard(config.batch_size, r, num_workers)
        loss, final_state = feed.loss(lm, seed, rows)
        losses.append(loss)
        final_states.append(final_state)
        gradients.append(lm.worker_gradients(loss))
    train_op, global_norm = model.update(lm, model.average_worker_gradients(gradients), feed.learning_rate)
    return lm, tf.add_n(losses) / num_workers, tf.concat(final_states, axis=1), global_norm, train_op


def main():
    args = runner_flags.parse("run", __doc__)
    remove_stale_outputs(args)
    config = flags.model_config(args)
    batches = data.load(args, config)

    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(config, batches, rows=slice(None))
    lm, loss, final_state, global_norm, train_op = reference_step(config, args.seed, feed, args.emulate_workers)
    saver = lm.saver()
    checkpoints = Checkpoints(args, saver, args.emulate_workers, "--emulate_workers")

    with tf.compat.v1.Session(config=determinism.session_config(args)) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        first_step, state = checkpoints.restore(session) if args.resume else (0, None)
        recorder = Recorder(args, config, "run", args.emulate_workers, first_step if args.resume else None)

        def run_step(step, state):
            step_loss, state, norm, _ = session.run([loss, final_state, global_norm, train_op], feed(step, state))
            return state, step_loss, config.words_per_batch, {"grad_norm": norm}

        def after_step(done, state):
            if checkpoints.due(done, args.steps):
                checkpoints.save(session, done, state)
        training.loop(args.steps, run_step, recorder.step, first_step, state, after_step)
        recorder.finish(session, saver)


if __name__ == "__main__":
    harness.main(main)
