"""Allreduce training with Horovod: every worker holds every variable; gradients are averaged by collectives.

    make run-horovod WORKERS=2
    horovodrun --gloo -np 2 -H localhost:2 --network-interface lo python run_horovod.py --config=small

It is run.py with the lines marked "Horovod:" changed: each worker trains its own rows of the global batch,
starts from rank 0's variables, averages its gradients with the others' before the shared update rule, and
only rank 0 records results and writes the checkpoint. The embedding's sparse gradient goes through
Horovod's sparse path (an allgather of its rows) unless --sparse_as_dense densifies it for an allreduce.
"""

import harness.determinism  # first: it fixes TensorFlow's kernels before TensorFlow loads
from harness import data, determinism, flags, runner_flags, training
from harness.checkpoints import Checkpoints
from harness.recorder import Recorder, remove_stale_outputs
from harness.training import StepFeed
import numpy as np
import tensorflow as tf

import configs
import model

try:
    import horovod.tensorflow as hvd
except ImportError as error:  # absent, or built against another TensorFlow
    hvd, HOROVOD_ERROR = None, error


def main():
    args = runner_flags.parse("run_horovod", __doc__)
    if hvd is None:
        raise harness.UsageError(f"Horovod is not usable ({HOROVOD_ERROR}): run make setup")
    config = flags.model_config(args)
    hvd.init()  # Horovod: join the other workers
    if hvd.rank() == 0:  # the chief: this run's outputs are its
        remove_stale_outputs(args)
    rows = data.shard(config.batch_size, hvd.rank(), hvd.size())  # Horovod: this worker's rows
    batches = data.load(args, config)

    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(config, batches, rows)
    lm = model.LSTMLanguageModel(config, args.seed)
    loss, final_state = feed.loss(lm, args.seed)
    gradients = lm.worker_gradients(loss)
    if args.sparse_as_dense:
        gradients = [tf.convert_to_tensor(g) for g in gradients]
    # Horovod: average over workers; IndexedSlices are allgathered, dense tensors allreduced.
    gradients = [hvd.allreduce(g, op=hvd.Average) for g in gradients]
    global_loss = hvd.allreduce(loss, op=hvd.Average)
    train_op, global_norm = model.update(lm, gradients, feed.learning_rate)
    saver = lm.saver()
    checkpoints = Checkpoints(args, saver, hvd.size())
    # Horovod: rank 0's checkpoints hold every worker's rows of the LSTM state (gathered in rank order, which
    # is row order), and on resume every worker gets rank 0's step and state, and takes its rows.
    own_state = tf.compat.v1.placeholder(tf.float32, feed.state_shape)
    gathered_state = tf.transpose(hvd.allgather(tf.transpose(own_state, [1, 0, 2])), [1, 0, 2])
    resumed = [tf.compat.v1.placeholder(tf.int64, []),
               tf.compat.v1.placeholder(tf.float32, configs.state_shape(config, config.batch_size))]
    from_rank_0 = [hvd.broadcast(value, 0) for value in resumed]

    with tf.compat.v1.Session(config=determinism.session_config(args)) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        chief = hvd.rank() == 0
        first_step, state = checkpoints.restore(session) if args.resume and chief else (0, None)
        session.run(hvd.broadcast_global_variables(0))  # Horovod: start from rank 0's values
        if args.resume:  # Horovod: rank 0's step and state
            first_step, state = session.run(from_rank_0, dict(zip(resumed, (first_step, state) if chief else (
                0, np.zeros(configs.state_shape(config, config.batch_size), np.float32)))))
            first_step, state = int(first_step), state[:, rows]
        recorder = Recorder(args, config, "run_horovod", hvd.size(), first_step if args.resume else None) \
            if chief else None

        def run_step(step, state):
            step_loss, state, norm, _ = session.run([global_loss, final_state, global_norm, train_op],
                                                    feed(step, state))
            return state, step_loss, config.words_per_batch, {"grad_norm": norm}

        def after_step(done, state):
            if checkpoints.due(done, args.steps):
                everyone = session.run(gathered_state, {own_state: state})  # Horovod: every worker's rows
                if chief:
                    checkpoints.save(session, done, everyone)
        # Horovod: rank 0 records for all
        training.loop(args.steps, run_step, recorder.step if chief else None, first_step, state, after_step)
        if chief:
            recorder.finish(session, saver)


if __name__ == "__main__":
    harness.main(main)
