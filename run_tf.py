"""Parameter-server training on TensorFlow's distributed runtime: between-graph replication, variables on
parameter-server tasks, every worker its own process and client.

    make run-tf WORKERS=2 PS=1                        # every task on this machine
    python run_tf.py --job_name=ps --task_index=0 --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222
    python run_tf.py --job_name=worker --task_index=0 --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222

It is run.py with the lines marked "PS:" changed. A step is synchronous (exact), asynchronous (--sync=false) or
TensorFlow's SyncReplicasOptimizer (--sync_replicas; not exact): docs/architecture.md explains each.
"""

import harness.determinism  # first: it fixes TensorFlow's kernels before TensorFlow loads
from harness import data, gradient_queues, grpc_cluster, models, placement, ps_steps, runner_flags, training
from harness.checkpoints import Checkpoints
from harness.recorder import Recorder, remove_stale_outputs
from harness.training import StepFeed
from harness.variables import Params
import tensorflow as tf


def main():
    args = runner_flags.parse("run_tf", __doc__)
    if args.job_name == "worker" and args.task_index == 0:  # the chief: this run's outputs are its
        remove_stale_outputs(args)
    model, config = models.from_flags(args)
    cluster = grpc_cluster.Cluster(args)  # PS: every task is a gRPC server
    if args.job_name == "ps":
        return grpc_cluster.serve(cluster, args)
    rank, num_workers = args.task_index, len(args.worker_hosts)
    chief = rank == 0
    rows = data.shard(config.batch_size, rank, num_workers)
    batches = model.data(config, args.data_path, args.seed)

    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(model, config, batches, rows)
    # PS: the sparse variables (found from their gradients) split into --partitions parts.
    kinds = placement.variable_kinds(model, config, args.seed, batches)
    sparse = [name for name, kind in kinds.items() if kind == "sparse"] if args.partitions > 1 else []
    # PS: variables on the parameter servers, spread by size; every other op (a lookup table too) on this worker.
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
            cluster=cluster.spec, worker_device=f"/job:worker/task:{rank}", ps_ops=placement.VARIABLE_OPS,
            ps_strategy=placement.GreedyBySize(len(args.ps_hosts)))):
        # PS: a variable read whole is read once a step, on this worker, however many times the model uses it
        params = Params(model, config, args.seed, sparse, args.partitions, args.partition_strategy,
                        reads_on=f"/job:worker/task:{rank}", whole=[n for n, k in kinds.items() if k == "dense"])
        objective, final_state = feed.loss(params, args.seed)
        step_kind = (ps_steps.SyncReplicasStep if args.sync_replicas else ps_steps.SynchronousStep if args.sync
                     else ps_steps.AsynchronousStep)
        # PS: a (sum, count) loss divided by the workers' mean count (the asynchronous kinds: its own count)
        objective = training.worker_objective(objective, step_kind.mean_count(feed.step, rank, num_workers))
        gradients = params.gradients(objective)
        step_graph = step_kind(params, feed, objective, final_state, gradients, rank, num_workers)
    done = grpc_cluster.run_over(len(args.ps_hosts))
    saver = params.saver()
    checkpoints = Checkpoints(args, saver, num_workers)
    carried = gradient_queues.CarriedState(rank, num_workers, feed.state_shape)  # PS: the states, for checkpoints
    kinds = placement.gradient_kinds(params.variables, gradients)
    if chief:
        placement.print_placement("run_tf", params, kinds)

    with cluster.session(tf.compat.v1.get_default_graph(), ["/job:ps"]) as session:
        session.run(tf.compat.v1.tables_initializer())  # PS: this worker's own lookup tables (a StringLookup's)
        first_step, state = 0, None
        if chief:  # the first run waits for the parameter servers to come up
            cluster.run(session, tf.compat.v1.global_variables_initializer(), starting=True)
            if args.resume:
                first_step, state = checkpoints.restore(session)
            recorder = Recorder(args, model, config, "run_tf", num_workers, first_step if args.resume else None)
        if args.resume:  # PS: every worker continues from the chief's step, with its rows of the state
            first_step, state = carried.share(cluster, session, first_step, state)

        def run_step(step, state):
            step_objective, state, norm, units = step_graph.run(cluster, session, step, feed(step, state))
            return state, step_objective, units, {"grad_norm": norm}

        def after_step(done, state):
            if checkpoints.due(done, args.steps):
                everyone = carried.gather(cluster, session, state)  # PS: every worker's rows, to the chief
                if chief:
                    checkpoints.save(session, done, everyone)
        training.loop(step_graph.steps(args.steps), run_step, recorder.step if chief else None, first_step, state,
                      after_step)
        summary = step_graph.finish(cluster, session)
        if chief:
            recorder.finish(session, saver, placement.describe(params, kinds),
                            parameter_servers=len(args.ps_hosts), partitions=args.partitions,
                            partition_strategy=args.partition_strategy, **summary)
            cluster.run(session, done)  # the parameter servers may exit


if __name__ == "__main__":
    harness.main(main)
