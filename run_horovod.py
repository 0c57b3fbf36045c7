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
from harness.recorder import Recorder, remove_stale_outputs
from harness.training import StepFeed
import tensorflow as tf

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

    with tf.compat.v1.Session(config=determinism.session_config(args)) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(hvd.broadcast_global_variables(0))  # Horovod: start from rank 0's values
        chief = hvd.rank() == 0
        recorder = Recorder(args, config, "run_horovod", hvd.size()) if chief else None

        def run_step(step, state):
            step_loss, state, norm, _ = session.run([global_loss, final_state, global_norm, train_op],
                                                    feed(step, state))
            return state, step_loss, config.words_per_batch, {"grad_norm": norm}
        training.loop(args.steps, run_step, recorder.step if chief else None)  # Horovod: rank 0 records for all
        if chief:
            recorder.finish(session, saver)


if __name__ == "__main__":
    harness.main(main)
