"""One training step of run_tf.py on a worker, of three kinds: synchronous (exactly one gradient of each worker
per update), asynchronous, and TensorFlow's SyncReplicasOptimizer; docs/architecture.md describes each."""
import sys

from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from harness import gradient_queues, models, reduction, training, update  # noqa: E402
from harness.variables import deduplicate  # noqa: E402


class Step:
    """What every kind of step shares; run(cluster, session, t, feed) returns (objective, state, norm, units)."""

    def steps(self, steps):
        """The steps this worker's loop may run (the run's --steps)."""
        return steps

    @staticmethod
    def mean_count(step, rank, num_workers):
        """What a (sum, count) loss is divided by: a worker's own count where workers do not step together."""
        return lambda count: count


class SynchronousStep(Step):
    """In step t every worker enqueues its gradient, tagged t, on each variable's parameter server; the chief
    takes exactly one per worker, in worker order, averages them there, applies the update and then hands
    every worker a token for step t + 1."""

    def __init__(self, params, feed, objective, final_state, gradients, rank, num_workers):
        self.units = models.units_per_step(feed.model, feed.config)
        self.chief, self.final_state = rank == 0, final_state
        send, received = gradient_queues.collect_gradients(
            tf.nest.flatten(params.variable_list), tf.nest.flatten(gradients), feed.step, rank, num_workers,
            self.chief)
        loss_queues = [gradient_queues.queue(f"loss/worker{r}", [tf.int64, tf.float32], "/job:ps/task:0")
                       for r in range(num_workers)]
        token_queues = [gradient_queues.queue(f"token/worker{r}", [tf.int64], "/job:ps/task:0")
                        for r in range(num_workers)]
        self.send = send + [loss_queues[rank].enqueue([feed.step, objective])]
        self.wait_for_update, self.started = token_queues[rank].dequeue(), False
        if self.chief:
            # Each part's average is computed on its parameter server, so gradients do not travel to the chief.
            averaged = []
            for index, part in enumerate(tf.nest.flatten(params.variable_list)):
                with tf.device(part.device):
                    averaged += reduction.workers_mean([[worker[index]] for worker in received])
            train_op, self.global_norm = update.update(
                params, tf.nest.pack_sequence_as(params.variable_list, averaged), feed.learning_rate, feed.step)
            self.global_objective = tf.add_n([q.dequeue()[1] for q in loss_queues]) / num_workers
            with tf.control_dependencies([train_op]):
                self.release = tf.group([q.enqueue([feed.step + 1]) for q in token_queues])
            self.start = [q.enqueue([0]) for q in token_queues]

    @staticmethod
    def mean_count(step, rank, num_workers):
        """The mean of the workers' counts of this step: each sends its own to every worker."""
        return lambda count: gradient_queues.all_sum(count, step, rank, num_workers) / num_workers

    def run(self, cluster, session, step, step_feed):
        first, self.started = not self.started, True  # (a resumed run's first step is not step 0)
        if self.chief and first:
            cluster.run(session, self.start)
        cluster.run(session, self.wait_for_update, starting=first)
        _, state = cluster.run(session, [self.send, self.final_state], step_feed)
        if not self.chief:
            return None, state, None, None
        objective, norm, _ = cluster.run(session, [self.global_objective, self.global_norm, self.release],
                                         step_feed)
        return objective, state, norm, self.units

    def finish(self, cluster, session):
        return {"mode": "sync"}


class AsynchronousStep(Step):
    """Every worker applies the update rule to its own gradient as soon as it has it; an update's staleness is
    the updates others applied between its read of global_step and its own. The chief trains --steps steps,
    the others until it is done, so that every worker trains throughout the chief's measured steps."""

    def __init__(self, params, feed, objective, final_state, gradients, rank, num_workers):
        self.units = models.units_per_step(feed.model, feed.config)
        self.chief, self.num_workers = rank == 0, num_workers
        # Counts applied updates; on a parameter server (created in the caller's replica_device_setter scope).
        global_step = tf.compat.v1.get_variable("global_step", [], tf.int64, tf.zeros_initializer(),
                                                trainable=False)
        # Each worker's updates: how many steps of each the chief's measured steps saw (make bench's bytes).
        by_worker = tf.compat.v1.get_variable("updates_by_worker", [num_workers], tf.int64, tf.zeros_initializer(),
                                              trainable=False)
        read_step = global_step.read_value()
        train_op, global_norm = update.update(params, gradients, feed.learning_rate, feed.step)
        with tf.control_dependencies([train_op]):
            applied_step = global_step.assign_add(1)
            counted = by_worker.scatter_add(tf.IndexedSlices(tf.constant([1], tf.int64), tf.constant([rank])))
        self.fetches = [objective, final_state, global_norm, read_step, applied_step, counted]
        self.start, self.wait_for_start = gradient_queues.start_gate(rank, num_workers)
        finished = gradient_queues.queue("finished", [tf.int32], "/job:ps/task:0", capacity=num_workers)
        self.finish_own = finished.enqueue([rank])
        self.wait_for_all = [finished.dequeue() for _ in range(num_workers)]
        chief_done = gradient_queues.queue("chief_done", [tf.int32], "/job:ps/task:0", capacity=num_workers)
        self.stop_others = [chief_done.enqueue([0]) for _ in range(num_workers - 1)]
        if not self.chief:
            self.fetches.append(chief_done.size())
        self.staleness, self.last_applied, self.started, self.updates_by_worker = [], 0, False, []

    def run(self, cluster, session, step, step_feed):
        if not self.started:  # (a resumed run's first step is not step 0)
            self.started = True
            if self.chief:
                cluster.run(session, self.start, starting=True)
            cluster.run(session, self.wait_for_start, starting=True)
        objective, state, norm, read, applied, by_worker, *chief_done = cluster.run(session, self.fetches, step_feed)
        if chief_done and chief_done[0]:
            raise training.Stop()
        self.staleness.append(int(applied - 1 - read))
        if self.chief:
            self.updates_by_worker.append({"after_step": step + 1, "counts": by_worker.tolist()})
        # The units of every update applied since this worker's previous one, its own included.
        units = int(applied - self.last_applied) * self.units // self.num_workers
        self.last_applied = applied
        return objective, state, norm, units

    def steps(self, steps):
        """The steps this worker's loop may run: the chief's --steps; the others', until the chief is done."""
        return steps if self.chief else sys.maxsize

    def finish(self, cluster, session):
        if self.chief and self.stop_others:
            cluster.run(session, self.stop_others)
        cluster.run(session, self.finish_own)
        if not self.chief:
            return {}
        cluster.run(session, self.wait_for_all, timeout=600)  # the checkpoint holds every worker's updates
        return {"mode": "async", "staleness": {"chief_mean": float(np.mean(self.staleness)),
                                               "chief_max": max(self.staleness),
                                               "chief_histogram": np.bincount(self.staleness).tolist()},
                "updates_by_worker": self.updates_by_worker}


class ModelRule(tf.compat.v1.train.Optimizer):
    """The model's update rule as the optimizer SyncReplicasOptimizer wraps: it applies the aggregated gradient
    (each worker clipped its own), scaled as the rule scales it, and counts the step."""

    def __init__(self, params, learning_rate):
        super().__init__(use_locking=False, name="ModelRule")
        self.params, self.learning_rate = params, learning_rate

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        flat = [deduplicate(g) if isinstance(g, tf.IndexedSlices) else g for g, _ in grads_and_vars]
        gradients = tf.nest.pack_sequence_as(self.params.variable_list, flat)
        updates = [update.apply_gradient(self.params, variable, tf.nest.flatten(g), None, self.learning_rate,
                                         global_step) for variable, g in zip(self.params.variables, gradients)]
        with tf.control_dependencies(updates), tf.compat.v1.colocate_with(global_step):
            return global_step.assign_add(1)


class SyncReplicasStep(Step):
    """TensorFlow's SyncReplicasOptimizer: workers add clipped gradients to accumulators on the parameter
    servers; the chief's queue runner applies the average of W and hands out W tokens. Not exact: a fast
    worker may take a slow one's token and give one update two of its gradients."""

    def __init__(self, params, feed, objective, final_state, gradients, rank, num_workers):
        self.units = models.units_per_step(feed.model, feed.config)
        self.chief, self.num_workers = rank == 0, num_workers
        global_step = tf.compat.v1.train.get_or_create_global_step()  # on a parameter server
        # The chief's queue runner applies the update without a feed: the rate comes from the global step.
        rate = params.rule.learning_rate(global_step, global_step // feed.batches.epoch_size)
        self.optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
            ModelRule(params, rate), replicas_to_aggregate=num_workers, total_num_replicas=num_workers)
        # Each worker clips its own gradient (ptb_word_lm's, Parallax's) before the aggregation.
        names = [name for name, variable in params.variables.items() for _ in tf.nest.flatten(variable)]
        flat = tf.nest.flatten(gradients)
        clip = [i for i, name in enumerate(names) if params.rule.clipped(name)]
        global_norm = tf.linalg.global_norm([flat[i] for i in clip])
        if params.rule.clip_norm:
            clipped, _ = tf.clip_by_global_norm([flat[i] for i in clip], params.rule.clip_norm, global_norm)
            for i, g in zip(clip, clipped):
                flat[i] = g
        train_op = self.optimizer.apply_gradients(zip(flat, tf.nest.flatten(params.variable_list)), global_step)
        with tf.control_dependencies([train_op]):
            applied_step = global_step.read_value()
        self.fetches = [objective, final_state, global_norm, applied_step]
        self.start, self.wait_for_start = gradient_queues.start_gate(rank, num_workers)
        if self.chief:
            # No initial tokens: every worker waits for the first update (W tokens, TF's default, would let each
            # worker run a step ahead on stale variables).
            self.init_tokens = self.optimizer.get_init_tokens_op(num_tokens=0)
            self.queue_runner = self.optimizer.get_chief_queue_runner()
        self.last_applied = 0

    def run(self, cluster, session, step, step_feed):
        if step == 0:
            if self.chief:  # after the chief's initialisation: the tokens, the queue runner, then the workers
                cluster.run(session, self.init_tokens)
                self.coordinator = tf.train.Coordinator()
                self.queue_runner.create_threads(session, self.coordinator, daemon=True, start=True)
                cluster.run(session, self.start, starting=True)
            cluster.run(session, self.wait_for_start, starting=True)
            session.run(tf.compat.v1.local_variables_initializer())
            session.run(self.optimizer.local_step_init_op)
        objective, state, norm, applied = cluster.run(session, self.fetches, step_feed)
        units = int(applied - self.last_applied) * self.units  # updates since the last step
        self.last_applied = applied
        return objective, state, norm, units

    def finish(self, cluster, session):
        if self.chief:
            self.coordinator.request_stop()
        return {"mode": "sync_replicas"} if self.chief else {}
