"""Parameter-server training on TensorFlow's distributed runtime: between-graph replication, variables on
parameter-server tasks, every worker its own process and client, real gRPC servers.

    make run-tf WORKERS=2 PS=1                        # every task on this machine
    python run_tf.py --job_name=ps --task_index=0 --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222
    python run_tf.py --job_name=worker --task_index=0 --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222

It is run.py with the lines marked "PS:" changed. Variables live on the parameter servers, spread by size
(greedy); the sparse variables may be split into --partitions parts (--partition_strategy). Each worker
trains its rows of the global batch, reading the variables from the parameter servers.

Synchronous (default): in step t every worker puts its gradient, tagged with t, into a queue of its own
on the parameter server of each variable (capacity 1); the chief worker takes exactly one gradient from
each worker's queue, in worker order, averages them there (model.average_worker_gradients), applies the
update (model.update), and then hands every worker a token for step t + 1. So each update has exactly
one gradient of each worker for that step, none stale, and no worker reads variables before the update.

Asynchronous (--sync=false): every worker applies its own gradient as soon as it has it, and the results
report the staleness of each update: how many updates other workers applied between its read and its own.

TensorFlow's own synchronous optimizer (--sync_replicas): what "vanilla TensorFlow" code writes,
tf.compat.v1.train.SyncReplicasOptimizer, for make bench to measure the cost of our exactness beside it. It
is not exact, and verify does not run it: each worker clips its own gradient (ptb_word_lm's) and the
accumulators average the first W fresh gradients in whatever order they arrive. It starts with no tokens (as
SynchronousStep does), but a fast worker may still take a slow one's token and give one update two gradients.
"""

import harness.determinism  # first: it fixes TensorFlow's kernels before TensorFlow loads
from harness import data, flags, gradient_queues, grpc_cluster, placement, runner_flags, training
from harness.checkpoints import Checkpoints
from harness.recorder import Recorder, remove_stale_outputs
from harness.training import StepFeed
import numpy as np
import tensorflow as tf

import configs
import model


def main():
    args = runner_flags.parse("run_tf", __doc__)
    if args.job_name == "worker" and args.task_index == 0:  # the chief: this run's outputs are its
        remove_stale_outputs(args)
    config = flags.model_config(args)
    cluster = grpc_cluster.Cluster(args)  # PS: every task is a gRPC server
    if args.job_name == "ps":
        return grpc_cluster.serve(cluster, args)
    rank, num_workers = args.task_index, len(args.worker_hosts)
    chief = rank == 0
    rows = data.shard(config.batch_size, rank, num_workers)
    batches = data.load(args, config)

    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(config, batches, rows)
    # PS: variables on the parameter servers, spread by size; every other op on this worker.
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
            cluster=cluster.spec, worker_device=f"/job:worker/task:{rank}",
            ps_strategy=placement.GreedyBySize(len(args.ps_hosts)))):
        lm = model.LSTMLanguageModel(config, args.seed, args.partitions, args.partition_strategy)
        loss, final_state = feed.loss(lm, args.seed)
        gradients = lm.worker_gradients(loss)
        step_kind = SyncReplicasStep if args.sync_replicas else SynchronousStep if args.sync else AsynchronousStep
        step_graph = step_kind(config, lm, feed, loss, final_state, gradients, rank, num_workers,
                               batches.epoch_size)
    done = grpc_cluster.run_over(len(args.ps_hosts))
    saver = lm.saver()
    checkpoints = Checkpoints(args, saver, num_workers)
    carried = gradient_queues.CarriedState(rank, num_workers, feed.state_shape)  # PS: the states, for checkpoints
    if chief:
        placement.print_placement("run_tf", lm, placement.gradient_kinds(lm.variables, gradients))

    with cluster.session(tf.compat.v1.get_default_graph(), ["/job:ps"]) as session:
        first_step, state = 0, None
        if chief:  # the first run waits for the parameter servers to come up
            cluster.run(session, tf.compat.v1.global_variables_initializer(), starting=True)
            if args.resume:
                first_step, state = checkpoints.restore(session)
            recorder = Recorder(args, config, "run_tf", num_workers, first_step if args.resume else None)
        if args.resume:  # PS: every worker continues from the chief's step, with its rows of the state
            first_step, state = carried.share(cluster, session, first_step, state)

        def run_step(step, state):
            step_loss, state, norm, words = step_graph.run(cluster, session, step, feed(step, state))
            return state, step_loss, words, {"grad_norm": norm}

        def after_step(done, state):
            if checkpoints.due(done, args.steps):
                everyone = carried.gather(cluster, session, state)  # PS: every worker's rows, to the chief
                if chief:
                    checkpoints.save(session, done, everyone)
        training.loop(args.steps, run_step, recorder.step if chief else None, first_step, state, after_step)
        summary = step_graph.finish(cluster, session)
        if chief:
            recorder.finish(session, saver, parameter_servers=len(args.ps_hosts), partitions=args.partitions,
                            partition_strategy=args.partition_strategy, **summary)
            cluster.run(session, done)  # the parameter servers may exit


class SynchronousStep:
    """PS: in step t every worker puts its gradient, tagged t, into a queue of its own (capacity 1) on the
    parameter server of each variable; the chief takes exactly one from each worker's queue, in worker order,
    averages them on that server, applies the update, and then hands every worker a token for step t + 1."""

    def __init__(self, config, lm, feed, loss, final_state, gradients, rank, num_workers, epoch_size):
        self.config, self.chief, self.final_state = config, rank == 0, final_state
        send, received = gradient_queues.collect_gradients(
            tf.nest.flatten(lm.variable_list), tf.nest.flatten(gradients), feed.step, rank, num_workers, self.chief)
        loss_queues = [gradient_queues.queue(f"loss/worker{r}", [tf.int64, tf.float32], "/job:ps/task:0")
                       for r in range(num_workers)]
        token_queues = [gradient_queues.queue(f"token/worker{r}", [tf.int64], "/job:ps/task:0")
                        for r in range(num_workers)]
        self.send = send + [loss_queues[rank].enqueue([feed.step, loss])]
        self.wait_for_update, self.started = token_queues[rank].dequeue(), False
        if self.chief:
            # PS: each part's average is computed on its parameter server, next to its queues and its variable,
            # so gradients do not travel to the chief and back.
            averaged = []
            for index, part in enumerate(tf.nest.flatten(lm.variable_list)):
                with tf.device(part.device):
                    averaged += model.average_worker_gradients([[worker[index]] for worker in received])
            train_op, self.global_norm = model.update(
                lm, tf.nest.pack_sequence_as(lm.variable_list, averaged), feed.learning_rate)
            self.global_loss = tf.add_n([q.dequeue()[1] for q in loss_queues]) / num_workers
            with tf.control_dependencies([train_op]):
                self.release = tf.group([q.enqueue([feed.step + 1]) for q in token_queues])
            self.start = [q.enqueue([0]) for q in token_queues]

    def run(self, cluster, session, step, step_feed):
        first, self.started = not self.started, True  # (a resumed run's first step is not step 0)
        if self.chief and first:
            cluster.run(session, self.start)
        cluster.run(session, self.wait_for_update, starting=first)
        _, state = cluster.run(session, [self.send, self.final_state], step_feed)
        if not self.chief:
            return None, state, None, None
        loss, norm, _ = cluster.run(session, [self.global_loss, self.global_norm, self.release], step_feed)
        return loss, state, norm, self.config.words_per_batch

    def finish(self, cluster, session):
        return {"mode": "sync"}


class AsynchronousStep:
    """PS: every worker applies the update rule to its own gradient as soon as it has it. The staleness of
    an update is the number of updates other workers applied between its read of global_step and its own."""

    def __init__(self, config, lm, feed, loss, final_state, gradients, rank, num_workers, epoch_size):
        self.config, self.chief, self.num_workers = config, rank == 0, num_workers
        # Counts applied updates; on a parameter server (created in the caller's replica_device_setter scope).
        global_step = tf.compat.v1.get_variable("global_step", [], tf.int64, tf.zeros_initializer(),
                                                trainable=False)
        read_step = global_step.read_value()
        train_op, global_norm = model.update(lm, gradients, feed.learning_rate)
        with tf.control_dependencies([train_op]):
            applied_step = global_step.assign_add(1)
        self.fetches = [loss, final_state, global_norm, read_step, applied_step]
        self.start, self.wait_for_start = gradient_queues.start_gate(rank, num_workers)
        finished = gradient_queues.queue("finished", [tf.int32], "/job:ps/task:0", capacity=num_workers)
        self.finish_own = finished.enqueue([rank])
        self.wait_for_all = [finished.dequeue() for _ in range(num_workers)]
        self.staleness, self.last_applied, self.started = [], 0, False

    def run(self, cluster, session, step, step_feed):
        if not self.started:  # (a resumed run's first step is not step 0)
            self.started = True
            if self.chief:
                cluster.run(session, self.start)
            cluster.run(session, self.wait_for_start, starting=True)
        loss, state, norm, read, applied = cluster.run(session, self.fetches, step_feed)
        self.staleness.append(int(applied - 1 - read))
        # The words of every update applied since this worker's previous one, its own included.
        words = int(applied - self.last_applied) * self.config.words_per_batch // self.num_workers
        self.last_applied = applied
        return loss, state, norm, words

    def finish(self, cluster, session):
        cluster.run(session, self.finish_own)
        if not self.chief:
            return {}
        cluster.run(session, self.wait_for_all, timeout=600)  # the checkpoint holds every worker's updates
        return {"mode": "async", "staleness": {"chief_mean": float(np.mean(self.staleness)),
                                               "chief_max": max(self.staleness),
                                               "chief_histogram": np.bincount(self.staleness).tolist()}}


class ModelRule(tf.compat.v1.train.Optimizer):
    """The model's update rule, with the model's own accumulators (Adagrad's for lm1b), as the optimizer that
    SyncReplicasOptimizer wraps: it applies the aggregated gradient (clipped by each worker before), scaled
    as the rule scales it, and counts the step."""

    def __init__(self, lm, learning_rate):
        super().__init__(use_locking=False, name="ModelRule")
        self.lm, self.learning_rate = lm, learning_rate

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        flat = [model.deduplicate(g) if isinstance(g, tf.IndexedSlices) else g for g, _ in grads_and_vars]
        gradients = tf.nest.pack_sequence_as(self.lm.variable_list, flat)
        updates = [model.apply_gradient(self.lm, variable, tf.nest.flatten(g), None, self.learning_rate)
                   for variable, g in zip(self.lm.variables, gradients)]
        with tf.control_dependencies(updates), tf.compat.v1.colocate_with(global_step):
            return global_step.assign_add(1)


class SyncReplicasStep:
    """TensorFlow's SyncReplicasOptimizer: every worker adds its clipped gradient to a conditional accumulator
    per variable on the variable's parameter server and waits for a token; the chief's queue runner takes the
    average of W gradients from each accumulator, applies it, and hands out W tokens."""

    def __init__(self, config, lm, feed, loss, final_state, gradients, rank, num_workers, epoch_size):
        self.config, self.chief, self.num_workers = config, rank == 0, num_workers
        global_step = tf.compat.v1.train.get_or_create_global_step()  # on a parameter server
        # The chief's queue runner applies the update without a feed, so the rate is computed from the step.
        epoch = tf.cast(global_step // epoch_size, tf.float32)
        rate = config.learning_rate * config.lr_decay ** tf.maximum(epoch + 1 - config.max_epoch, 0.0)
        self.optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
            ModelRule(lm, rate), replicas_to_aggregate=num_workers, total_num_replicas=num_workers)
        # Each worker clips its own gradient (ptb_word_lm's, Parallax's) before the aggregation.
        names = [name for name, variable in lm.variables.items() for _ in tf.nest.flatten(variable)]
        flat = tf.nest.flatten(gradients)
        clip = [i for i, name in enumerate(names) if configs.clipped(config, name)]
        clipped, global_norm = tf.clip_by_global_norm([flat[i] for i in clip], config.max_grad_norm)
        for i, g in zip(clip, clipped):
            flat[i] = g
        train_op = self.optimizer.apply_gradients(zip(flat, tf.nest.flatten(lm.variable_list)), global_step)
        with tf.control_dependencies([train_op]):
            applied_step = global_step.read_value()
        self.fetches = [loss, final_state, global_norm, applied_step]
        self.start, self.wait_for_start = gradient_queues.start_gate(rank, num_workers)
        if self.chief:
            # No initial tokens: every worker waits for the first update, as in SynchronousStep (TF's default,
            # W tokens, lets each worker run a step ahead on stale variables).
            self.init_tokens = self.optimizer.get_init_tokens_op(num_tokens=0)
            self.queue_runner = self.optimizer.get_chief_queue_runner()
        self.last_applied = 0

    def run(self, cluster, session, step, step_feed):
        if step == 0:
            if self.chief:  # after the chief's initialisation: the tokens, the queue runner, then the workers
                cluster.run(session, self.init_tokens)
                self.coordinator = tf.train.Coordinator()
                self.queue_runner.create_threads(session, self.coordinator, daemon=True, start=True)
                cluster.run(session, self.start)
            cluster.run(session, self.wait_for_start, starting=True)
            session.run(tf.compat.v1.local_variables_initializer())
            session.run(self.optimizer.local_step_init_op)
        loss, state, norm, applied = cluster.run(session, self.fetches, step_feed)
        words = int(applied - self.last_applied) * self.config.words_per_batch  # updates since the last step
        self.last_applied = applied
        return loss, state, norm, words

    def finish(self, cluster, session):
        if self.chief:
            self.coordinator.request_stop()
        return {"mode": "sync_replicas"} if self.chief else {}


if __name__ == "__main__":
    harness.main(main)
