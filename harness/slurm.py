"""What Slurm's environment says of a job's nodes, for the launcher's srun starter and for a runner's cluster from
its Slurm step (cluster_spec.py)."""
import re
import subprocess

import harness


def tasks_per_node(text):
    """SLURM_TASKS_PER_NODE ("2(x3),1") as one count per node ([2, 2, 2, 1])."""
    counts = []
    for item in text.split(","):
        count, _, repeat = re.fullmatch(r"(\d+)(\(x(\d+)\))?", item).groups()
        counts += [int(count)] * int(repeat or 1)
    return counts


def hostnames(nodelist):
    """A Slurm node list ("node[9-10]") as names, in Slurm's order (["node9", "node10"])."""
    nodes = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True)
    if nodes.returncode:
        raise harness.UsageError(f"scontrol show hostnames {nodelist}: {nodes.stderr.strip()}")
    return nodes.stdout.split()
