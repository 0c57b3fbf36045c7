"""How a parameter-server task (run_tf.py, run_parallax.py) learns the cluster and its place in it: from the four
cluster flags, else TF_CONFIG (Kubeflow's TFJob), else the Slurm job step it runs in. docs/cluster.md explains."""
import json
import os

import harness
from harness import flags
from harness.slurm import hostnames, tasks_per_node

CLUSTER_FLAGS = ("job_name", "task_index", "ps_hosts", "worker_hosts")
SLURM_PORT_BASE = 8888  # as SlurmClusterResolver's


def resolve(args):
    """Set args.job_name, task_index, ps_hosts and worker_hosts from the first source that has a cluster."""
    given = [name for name in CLUSTER_FLAGS if getattr(args, name) is not None]
    if given:
        for name in CLUSTER_FLAGS:
            if getattr(args, name) is None:
                raise harness.UsageError(f"--{name}: required with --{given[0]} (give all four cluster flags, or "
                                         f"none and TF_CONFIG)")
    elif "TF_CONFIG" in os.environ:
        args.job_name, args.task_index, args.ps_hosts, args.worker_hosts = from_tf_config(os.environ["TF_CONFIG"])
    elif "SLURM_STEP_NUM_TASKS" in os.environ:
        args.job_name, args.task_index, args.ps_hosts, args.worker_hosts = from_slurm_step(args.ps_tasks)
    else:
        raise harness.UsageError("no cluster: give --job_name, --task_index, --ps_hosts and --worker_hosts, or "
                                 "TF_CONFIG, or start the tasks with srun")


def from_tf_config(text):
    """(job, index, ps addresses, worker addresses) of TF_CONFIG's text."""
    import tensorflow as tf  # here, not above: the launcher checks cluster flags without loading TensorFlow

    def bad(why):
        return harness.UsageError(f"TF_CONFIG: {why}")
    try:
        config = json.loads(text)
    except ValueError as error:
        raise bad(f"not JSON ({error})")
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict) \
            or not isinstance(config.get("task"), dict):
        raise bad('expected {"cluster": {"ps": [...], "worker": [...]}, "task": {"type": ..., "index": ...}}')
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    try:
        job, index = resolver.task_type, resolver.task_id
        cluster = resolver.cluster_spec().as_dict()
    except (KeyError, TypeError, ValueError) as error:
        raise bad(f"{type(error).__name__}: {error}")
    if job == "evaluator":
        raise bad('task type "evaluator" is refused: this runner trains only and has no evaluator job; give the '
                  'job no evaluator replicas')
    cluster.pop("evaluator", None)  # evaluators are not part of the training cluster
    unknown = sorted(set(cluster) - {"ps", "worker", "chief"})
    if unknown:
        raise bad(f'job "{unknown[0]}" in "cluster": expected ps, worker, chief or evaluator')
    if job not in cluster:
        raise bad(f'task type "{job}" is not a job of "cluster" ({", ".join(sorted(cluster))})')
    for name, addresses in cluster.items():
        if not isinstance(addresses, list):  # ClusterSpec's {index: address} form: tasks may be missing
            raise bad(f'job "{name}": expected a list of host:port')
        try:
            flags.host_list(",".join(addresses))
        except ValueError as error:
            raise bad(f'job "{name}": {error}')
    if len(cluster.get("chief", [])) > 1:
        raise bad(f'{len(cluster["chief"])} chief tasks: expected one')
    if index is None or not 0 <= index < len(cluster[job]):
        raise bad(f'task index {index}: job "{job}" has {len(cluster[job])} tasks')
    workers = cluster.get("chief", []) + cluster.get("worker", [])
    if "ps" not in cluster or not workers:
        raise bad("a parameter-server cluster needs a ps job and a worker (or chief) job")
    if job == "chief":
        job, index = "worker", 0
    elif job == "worker" and "chief" in cluster:
        index += 1
    return job, index, cluster["ps"], workers


def from_slurm_step(num_ps):
    """(job, index, ps addresses, worker addresses) of this task of the Slurm job step: as SlurmClusterResolver
    lays it out (the first `num_ps` tasks are parameter servers, the rest workers; a task's port is SLURM_PORT_BASE
    plus its place on its node), but with the nodes in Slurm's order, which numbers the tasks, where the resolver
    sorts their names (node10 before node9: task and address disagree)."""

    try:
        num_tasks, rank, node = (int(os.environ["SLURM_STEP_NUM_TASKS"]), int(os.environ["SLURM_PROCID"]),
                                 os.environ["SLURMD_NODENAME"])
        nodes = hostnames(os.environ["SLURM_STEP_NODELIST"])
        counts = tasks_per_node(os.environ["SLURM_STEP_TASKS_PER_NODE"])
    except (KeyError, ValueError, AttributeError) as error:
        raise harness.UsageError(f"the Slurm step's environment: {error!r}")
    if num_ps >= num_tasks:
        raise harness.UsageError(f"--ps_tasks={num_ps}: the Slurm step has only {num_tasks} tasks, none left for "
                                 f"workers")
    addresses = [f"{host}:{SLURM_PORT_BASE + i}" for host, count in zip(nodes, counts) for i in range(count)]
    if len(addresses) != num_tasks or not addresses[rank].startswith(f"{node}:"):
        raise harness.UsageError(f"the Slurm step's task {rank} runs on {node}, not where block distribution puts "
                                 f"it ({addresses[rank] if rank < len(addresses) else 'nowhere'}): srun "
                                 f"--distribution=block")
    job, index = ("ps", rank) if rank < num_ps else ("worker", rank - num_ps)
    return job, index, addresses[:num_ps], addresses[num_ps:]
