"""Allreduce training with Horovod: every worker holds every variable; gradients are averaged by collectives.

    make run-horovod WORKERS=2
    horovodrun --gloo -np 2 -H localhost:2 --network-interface lo python run_horovod.py --config=small

It is run.py with the lines marked "Horovod:" changed; only rank 0 records results and writes the checkpoint. A
sparse gradient is allgathered unless --sparse_as_dense densifies it for an allreduce (docs/architecture.md).
"""

import harness.determinism  # first: it fixes TensorFlow's kernels before TensorFlow loads
from harness import data, determinism, models, placement, reduction, runner_flags, training, update
from harness.checkpoints import Checkpoints
from harness.recorder import Recorder, remove_stale_outputs
from harness.training import StepFeed
from harness.variables import Params
import numpy as np
import tensorflow as tf

try:
    import horovod.tensorflow as hvd
except ImportError as error:  # absent, or built against another TensorFlow
    hvd, HOROVOD_ERROR = None, error


def main():
    args = runner_flags.parse("run_horovod", __doc__)
    if hvd is None:
        raise harness.UsageError(f"Horovod is not usable ({HOROVOD_ERROR}): run make setup")
    model, config = models.from_flags(args)
    hvd.init()  # Horovod: join the other workers
    chief = hvd.rank() == 0
    if chief:  # the chief: this run's outputs are its
        remove_stale_outputs(args)
    rows = data.shard(config.batch_size, hvd.rank(), hvd.size())  # Horovod: this worker's rows
    batches = model.data(config, args.data_path, args.seed)

    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(model, config, batches, rows)
    params = Params(model, config, args.seed)
    objective, final_state = feed.loss(params, args.seed)
    # Horovod: a (sum, count) loss divided by the workers' mean count
    objective = training.worker_objective(objective, lambda count: hvd.allreduce(count, op=hvd.Sum) / hvd.size())
    gradients = params.gradients(objective)
    kinds = placement.gradient_kinds(params.variables, gradients)
    if args.sparse_as_dense:
        gradients = [tf.convert_to_tensor(g) for g in gradients]
    # Horovod: average over workers: Horovod's allreduce, or --reduction=exact: in rank order (harness/reduction.py)
    gradients = reduction.horovod_mean(gradients, hvd, args)
    global_objective = hvd.allreduce(objective, op=hvd.Average)
    train_op, global_norm = update.update(params, gradients, feed.learning_rate, feed.step)
    saver = params.saver()
    checkpoints = Checkpoints(args, saver, hvd.size())
    carried = HorovodState(feed.state_shape, config.batch_size)

    with tf.compat.v1.Session(config=determinism.session_config(args)) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(tf.compat.v1.tables_initializer())  # the model's lookup tables (a Keras StringLookup's)
        first_step, state = checkpoints.restore(session) if args.resume and chief else (0, None)
        session.run(hvd.broadcast_global_variables(0))  # Horovod: start from rank 0's values
        if args.resume:  # Horovod: rank 0's step and its rows of the state
            first_step, state = carried.share(session, first_step, state, rows)
        recorder = Recorder(args, model, config, "run_horovod", hvd.size(), first_step if args.resume else None) \
            if chief else None

        def run_step(step, state):
            step_objective, state, norm, _ = session.run([global_objective, final_state, global_norm, train_op],
                                                         feed(step, state))
            return state, step_objective, models.units_per_step(model, config), {"grad_norm": norm}

        def after_step(done, state):
            if checkpoints.due(done, args.steps):
                everyone = carried.gather(session, state)  # Horovod: every worker's rows
                if chief:
                    checkpoints.save(session, done, everyone)
        # Horovod: rank 0 records for all
        training.loop(args.steps, run_step, recorder.step if chief else None, first_step, state, after_step)
        if chief:
            recorder.finish(session, saver, placement.describe(params, kinds))


class HorovodState:
    """Horovod: the workers' carried state, gathered in rank (row) order for rank 0's checkpoints, and on resume
    rank 0's step and rows of it handed to every worker."""

    def __init__(self, state_shape, batch_size):
        self.stateful = state_shape is not None
        self.step = tf.compat.v1.placeholder(tf.int64, [])
        self.shared_step = hvd.broadcast(self.step, 0)
        if self.stateful:
            self.own = tf.compat.v1.placeholder(tf.float32, state_shape)
            self.gathered = hvd.allgather(self.own)
            self.whole = tf.compat.v1.placeholder(tf.float32, [batch_size, *state_shape[1:]])
            self.shared_whole = hvd.broadcast(self.whole, 0)

    def gather(self, session, state):
        return session.run(self.gathered, {self.own: state}) if self.stateful else None

    def share(self, session, step, state, rows):
        step = int(session.run(self.shared_step, {self.step: step}))
        if not self.stateful:
            return step, None
        whole = state if state is not None else np.zeros(self.whole.shape, np.float32)
        return step, session.run(self.shared_whole, {self.whole: whole})[rows]


if __name__ == "__main__":
    harness.main(main)
