"""A parameter-server job's tasks: each one's gRPC server and failure policy, and the parameter server's loop.
docs/cluster.md explains the timeouts."""
import socket
import sys
import time

from harness import determinism
import tensorflow as tf  # noqa: E402  (after determinism: it fixes TensorFlow's kernels)

import harness
from harness import gradient_queues


POLL_SECONDS = 0.5  # how often a parameter server looks for the chief's word that the run is over


class Cluster:
    """This task's gRPC server and session.run's failure policy: a peer silent from the start is bad input (exit 2),
    one that falls silent later has died (exit 1)."""

    def __init__(self, args):
        self.args = args
        self.spec = tf.train.ClusterSpec({"ps": args.ps_hosts, "worker": args.worker_hosts})
        self.addresses = {f"{job}{i}": address for job in ("ps", "worker")
                          for i, address in enumerate(self.spec.job_tasks(job))}
        self.devices = {f"{job}{i}": f"/job:{job}/task:{i}" for job in ("ps", "worker")
                        for i in range(self.spec.num_tasks(job))}
        self.name = f"{args.job_name}{args.task_index}"
        self.config = determinism.session_config(args)
        # gRPC would report a taken port in many lines of its own; TensorFlow binds every interface.
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("", int(self.addresses[self.name].rsplit(":", 1)[1])))
            except OSError as error:
                raise harness.UsageError(f"cannot start the {self.name} server on {self.addresses[self.name]}: "
                                         f"{error.strerror}")
        self.server = tf.distribute.Server(self.spec, args.job_name, args.task_index, config=self.config)

    def session(self, graph, peers):
        """A session needing only this task and `peers`, probed over TCP first: TensorFlow would wait for ever for
        one that never starts."""
        waiting = {task for task, device in self.devices.items()
                   if any(device == peer or device.startswith(peer + "/") for peer in peers)}
        deadline = time.monotonic() + self.args.startup_timeout
        while waiting := {task for task in waiting if not self.reachable(task)}:
            if time.monotonic() > deadline:
                self.exit_if_unreachable(sorted(waiting), starting=True)
            time.sleep(0.5)
        config = tf.compat.v1.ConfigProto()
        config.CopyFrom(self.config)
        config.device_filters[:] = [f"/job:{self.args.job_name}/task:{self.args.task_index}", *peers]
        return tf.compat.v1.Session(self.server.target, graph=graph, config=config)

    def run(self, session, fetches, feed=None, starting=False, timeout=None):
        """session.run, giving up after `timeout` (default --timeout, or --startup_timeout) and naming the dead."""
        seconds = timeout or (self.args.startup_timeout if starting else self.args.timeout)
        try:
            return session.run(fetches, feed, options=tf.compat.v1.RunOptions(timeout_in_ms=1000 * seconds))
        except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError, tf.errors.AbortedError) as error:
            self.exit_if_unreachable(self.addresses, starting)
            self.stop(f"no progress ({' '.join(error.message.split())})")

    def exit_if_unreachable(self, tasks, starting=False):
        dead = [task for task in tasks if task != self.name and not self.reachable(task)]
        if dead and starting:
            raise harness.UsageError(f"[{self.name}] {', '.join(f'{t} ({self.addresses[t]})' for t in dead)} never "
                                     f"answered: a wrong address, or a task that was not started")
        if dead:
            self.stop(f"{', '.join(dead)} is unreachable")

    def reachable(self, task):
        host, port = self.addresses[task].rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return True
        except OSError:
            return False

    def stop(self, why):
        print(f"[{self.name}] stopping: {why}", file=sys.stderr, flush=True)
        sys.exit(1)


def serve(cluster, args):
    """Serve as a parameter server until the chief says the run is over, or is gone."""
    graph = tf.Graph()
    with graph.as_default():
        said = _done_queue(args.task_index).size()
    with cluster.session(graph, []) as session:  # the chief is watched by TCP probes, not by this session
        started, chief_seen = time.monotonic(), False

        def over():
            # Read, never taken: a dequeue whose session.run timed out may still take the chief's word and drop it.
            return session.run(said) > 0
        while not over():
            chief_seen = chief_seen or cluster.reachable("worker0")
            if (chief_seen or time.monotonic() - started > args.startup_timeout) and not cluster.reachable("worker0"):
                # The chief's last act is to say the run is over: look once more before calling it gone.
                if over():
                    return
                cluster.exit_if_unreachable(["worker0"], starting=not chief_seen)
            time.sleep(POLL_SECONDS)
    # Leave after the chief: the rest of its last step, and its cleanup, still call this server.
    deadline = time.monotonic() + args.timeout
    while cluster.reachable("worker0") and time.monotonic() < deadline:
        time.sleep(0.1)


def run_over(num_ps):
    """The chief's ops that tell every parameter server the run is over."""
    return [_done_queue(p).enqueue([0]) for p in range(num_ps)]


def _done_queue(ps_index):
    return gradient_queues.queue(f"done/ps{ps_index}", [tf.int32], f"/job:ps/task:{ps_index}")
