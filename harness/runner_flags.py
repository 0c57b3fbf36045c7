"""Each runner's own flags beside the shared ones, and their checks: here, without TensorFlow, so that the launcher
checks a job's flags once, before any task starts, as the runners parse them (`parse("run_tf", __doc__)`)."""
import socket

from harness import UsageError, cluster_spec, data, flags, models


def reference(parser):
    flags.DEFINE_integer("emulate_workers", 1, "compute each step as this many workers' shards, combined as they "
                         "combine them", lower_bound=1, flag_values=parser)


def resumable(parser):
    """The flags of periodic checkpoints and resuming (harness/checkpoints.py), which every runner has."""
    flags.DEFINE_integer("save_every", 0, "steps between periodic checkpoints (0: only the final one)", lower_bound=0,
                         flag_values=parser)
    flags.DEFINE_integer("save_step", 0, "also a checkpoint after this step, kept (0: none): verify compares the "
                         "first step's where training has not yet grown rounding", lower_bound=0, flag_values=parser)
    flags.DEFINE_boolean("resume", False, "continue from the latest complete checkpoint in --ckpt_dir",
                         flag_values=parser)


def check_model(args, workers):
    """The model loads, and its batch divides among `workers`: the one check that runs the model's code."""
    data.shard(models.from_flags(args)[1].batch_size, 0, workers)


def cluster(parser):
    """The flags of a parameter-server cluster; without the first four, TF_CONFIG or the Slurm step gives it."""
    flags.DEFINE_enum("job_name", None, ["ps", "worker"], "this task's job", flag_values=parser)
    flags.DEFINE_integer("task_index", None, "this task's index in its job", lower_bound=0, flag_values=parser)
    flags.DEFINE_parsed("ps_hosts", None, flags.host_list, "host:port,... of the PS tasks", parser)
    flags.DEFINE_parsed("worker_hosts", None, flags.host_list, "host:port,... of the workers", parser)
    flags.DEFINE_integer("ps_tasks", 1, "with the cluster from a Slurm step (srun, no cluster flags, no TF_CONFIG): "
                         "how many of the step's tasks, the first ones, are parameter servers", lower_bound=1,
                         flag_values=parser)
    flags.DEFINE_integer("partitions", 1, "parts each sparse variable is split into, by rows", lower_bound=1,
                         flag_values=parser)
    flags.DEFINE_enum("partition_strategy", "mod", ["mod", "div"], "which rows each part "
                      "holds: mod, round robin (word i in part i % P, TensorFlow 1's default, which Parallax ran), "
                      "or div, contiguous ranges (TensorFlow 2's tf.nn.embedding_lookup)", flag_values=parser)
    flags.DEFINE_integer("timeout", 20, "seconds without progress after which a task looks for a dead task and exits",
                         lower_bound=1, flag_values=parser)
    flags.DEFINE_integer("startup_timeout", 120, "seconds a task waits for the others to start before it calls "
                         "them missing", lower_bound=1, flag_values=parser)


def check_cluster(args):
    cluster_spec.resolve(args)
    tasks = args.ps_hosts if args.job_name == "ps" else args.worker_hosts
    if args.task_index >= len(tasks):
        raise UsageError(f"--task_index={args.task_index}: there are only {len(tasks)} {args.job_name} tasks")
    for flag, addresses in (("--ps_hosts", args.ps_hosts), ("--worker_hosts", args.worker_hosts)):
        for host in {address.rsplit(":", 1)[0] for address in addresses}:
            try:
                socket.getaddrinfo(host, None)
            except OSError:
                raise UsageError(f"{flag}: unknown host {host}")


def parameter_servers(parser):
    cluster(parser)
    flags.DEFINE_boolean("sync", True, "synchronous (default) or asynchronous", flag_values=parser)
    flags.DEFINE_boolean("sync_replicas", False, "synchronous with TensorFlow's own SyncReplicasOptimizer "
                         "(not exact: for make bench, not verify)", flag_values=parser)


def check_parameter_servers(args):
    if args.sync_replicas and not args.sync:
        raise UsageError("--sync_replicas: it is synchronous, not with --sync=false")
    if args.resume and args.sync_replicas:
        raise UsageError("--resume: not with --sync_replicas (its accumulators and tokens are not checkpointed)")
    check_cluster(args)


EXACT_GROUP_BYTES = 4 << 20  # the exact reduction's buffers: large enough that a group's fixed costs are small


def reduction(parser):
    flags.DEFINE_enum("reduction", "horovod", ["horovod", "exact"], "how the workers' gradients are averaged: "
                      "Horovod's allreduce (its ring's order of addition), or exact: added in rank order in "
                      "TensorFlow, Horovod only moving bytes, identical to the reference at any W", flag_values=parser)
    flags.DEFINE_integer("exact_group_bytes", EXACT_GROUP_BYTES, "--reduction=exact: the dense gradients reduced "
                         "in groups of about this many bytes, each once it is computed (the bits do not depend on it)",
                         lower_bound=1, flag_values=parser)


def horovod(parser):
    reduction(parser)
    flags.DEFINE_boolean("sparse_as_dense", False, "densify every sparse gradient (the embedding's, and the "
                         "sampled softmax's) and allreduce it instead of allgathering its rows", flag_values=parser)


def hybrid(parser):
    cluster(parser)
    reduction(parser)
    flags.DEFINE_boolean("average_sparse", True, "average the sparse gradients over workers (default) or sum "
                         "them, as Parallax does by default", flag_values=parser)
    flags.DEFINE_boolean("local_aggregation", False, "the workers of one machine (one host of --worker_hosts) sum "
                         "their sparse gradients on the machine's first worker, which sends one gradient per "
                         "machine to the parameter servers", flag_values=parser)


# script: (its own flags, their checks, the workers its model's batch is divided among; None: known only later)
RUNNERS = {
    "run": (reference, lambda args: None, lambda args: args.emulate_workers),
    "run_tf": (parameter_servers, check_parameter_servers, lambda args: len(args.worker_hosts)),
    "run_horovod": (horovod, lambda args: None, lambda args: None),
    "run_parallax": (hybrid, check_cluster, lambda args: len(args.worker_hosts)),
}


def parse(script, description, argv=None, model=True):
    """The flags of runner `script` ("run_tf"), parsed from `argv` (default: the command line) and checked; with
    `model`, the model too: it loads, has the config named, and its batch divides among the workers."""
    define, check, workers = RUNNERS[script]
    parser = flags.parser(script, description)
    define(parser)
    resumable(parser)
    args = flags.parse(parser, argv, load_model=model)
    check(args)
    if model and workers(args):
        check_model(args, workers(args))
    return args
