"""Parallax's hybrid architecture (arXiv:1808.02621), rebuilt on TensorFlow and Horovod: a variable whose gradient is
tf.IndexedSlices lives on the parameter servers (in --partitions parts); every other is replicated on the workers
and allreduced. It is run.py with the lines marked "Parallax:" changed (docs/architecture.md).

    make run-parallax WORKERS=2 PS=1
"""

import harness.determinism  # first: it fixes TensorFlow's kernels before TensorFlow loads
from harness import data, gradient_queues, grpc_cluster, models, placement, runner_flags, training
from harness.checkpoints import Checkpoints
from harness.hybrid import HybridStep, hybrid_placement
from harness.recorder import Recorder, remove_stale_outputs
from harness.training import StepFeed
from harness.variables import Params
import tensorflow as tf

try:
    import horovod.tensorflow as hvd
except ImportError as error:  # absent, or built against another TensorFlow
    hvd, HOROVOD_ERROR = None, error


def main():
    args = runner_flags.parse("run_parallax", __doc__)
    if args.job_name == "worker" and args.task_index == 0:  # the chief: this run's outputs are its
        remove_stale_outputs(args)
    if hvd is None:
        raise harness.UsageError(f"Horovod is not usable ({HOROVOD_ERROR}): run make setup")
    model, config = models.from_flags(args)
    cluster = grpc_cluster.Cluster(args)  # Parallax: the parameter servers are gRPC servers
    if args.job_name == "ps":
        return grpc_cluster.serve(cluster, args)
    hvd.init()  # Parallax: every worker is also a Horovod rank, the same as its task index
    rank, num_workers = args.task_index, len(args.worker_hosts)
    if (hvd.rank(), hvd.size()) != (rank, num_workers):
        raise harness.UsageError(f"Horovod rank {hvd.rank()} of {hvd.size()} is not worker {rank} of {num_workers}")
    chief = rank == 0
    rows = data.shard(config.batch_size, rank, num_workers)
    batches = model.data(config, args.data_path, args.seed)

    tf.compat.v1.disable_eager_execution()
    kinds = placement.variable_kinds(model, config, args.seed, batches)  # Parallax: sparse or dense, by gradient
    sparse = [name for name, kind in kinds.items() if kind == "sparse"]
    feed = StepFeed(model, config, batches, rows)
    # Parallax: sparse variables on the parameter servers, dense ones on this worker; the hybrid step.
    with tf.compat.v1.device(hybrid_placement(kinds, len(args.ps_hosts), f"/job:worker/task:{rank}")):
        params = Params(model, config, args.seed, sparse, args.partitions, args.partition_strategy)
        hybrid = HybridStep(args, hvd, params, kinds, feed, rank, num_workers)
    done = grpc_cluster.run_over(len(args.ps_hosts))
    saver = params.saver()
    checkpoints = Checkpoints(args, saver, num_workers)
    carried = gradient_queues.CarriedState(rank, num_workers, feed.state_shape)
    replicated = params.state([name for name in params.variables if kinds[name] == "dense"])  # with their slots
    if chief:
        placement.print_placement("run_parallax", params, kinds)

    with cluster.session(tf.compat.v1.get_default_graph(), hybrid.peers) as session:
        session.run(tf.compat.v1.variables_initializer(replicated))
        session.run(tf.compat.v1.tables_initializer())  # Parallax: this worker's own lookup tables (a StringLookup's)
        first_step, state = 0, None
        if chief:  # the first run waits for the parameter servers to come up
            cluster.run(session, tf.compat.v1.variables_initializer(params.state(sparse)), starting=True)
            if args.resume:
                first_step, state = checkpoints.restore(session)
        session.run(hvd.broadcast_variables(replicated, root_rank=0))  # Parallax: rank 0's dense values
        if args.resume:  # every worker continues from the chief's step, with its rows of the state
            first_step, state = carried.share(cluster, session, first_step, state)
        if chief:
            cluster.run(session, hybrid.start)
            recorder = Recorder(args, model, config, "run_parallax", num_workers, first_step if args.resume else None)
        cluster.run(session, hybrid.wait_for_start, starting=True)

        def run_step(step, state):
            step_objective, state, norm, _, *rows = cluster.run(session, hybrid.fetches, feed(step, state),
                                                                starting=step == first_step)
            # Only the chief fetches the rows the parameter servers received, and only the chief records.
            return state, step_objective, models.units_per_step(model, config), (
                {"grad_norm": norm, "sparse_rows_received": rows[0]} if chief else {})

        def after_step(done, state):
            if checkpoints.due(done, args.steps):
                everyone = carried.gather(cluster, session, state)  # every worker's rows, to the chief
                if chief:
                    checkpoints.save(session, done, everyone)
        training.loop(args.steps, run_step, recorder.step if chief else None, first_step, state, after_step)
        if chief:
            recorder.finish(session, saver, placement.describe(params, kinds), parameter_servers=len(args.ps_hosts),
                            partitions=args.partitions, partition_strategy=args.partition_strategy,
                            average_sparse=args.average_sparse, local_aggregation=args.local_aggregation,
                            sparse_senders=hybrid.num_senders)
            cluster.run(session, done)  # the parameter servers may exit


if __name__ == "__main__":
    harness.main(main)
