"""Tasks as Slurm job steps inside the allocation the launcher runs in (launch --slurm; slurm/*.sbatch).

One `srun` per task, not one `srun --multi-prog` for all: the launcher then sees every task as a process of
its own, as with the other starters, so it prefixes each task's output with its name, reads each task's exit
status and names the one that failed; the tasks' addresses are decided before they start (ports probed on
each node), which a PS cluster needs; and Horovod's ranks get their rendezvous from the launcher. With
--multi-prog, Slurm would start them all as one step whose only status is the step's.
"""
import dataclasses
import os
import re
import subprocess

import harness
from harness.starters.local import LocalProcess
from harness.starters.ssh import probe


def tasks_per_node(text):
    """SLURM_TASKS_PER_NODE ("2(x3),1") as one count per node ([2, 2, 2, 1])."""
    counts = []
    for item in text.split(","):
        count, _, repeat = re.fullmatch(r"(\d+)(\(x(\d+)\))?", item).groups()
        counts += [int(count)] * int(repeat or 1)
    return counts


class Srun:
    """A task as a job step of its own, on one node of the allocation:

        srun --overlap --nodes=1 --ntasks=1 --nodelist=NODE --kill-on-bad-exit=1 COMMAND

    --overlap lets the steps share the allocation's CPUs (a PS task and a worker on one CPU slot, as on any
    machine where tasks outnumber cores); without it a step waits for CPUs that another step holds. The local
    srun client stands for the task: its exit status is the task's (128 + N when killed by signal N), and
    SIGTERM to it is forwarded to the task. Slurm itself stops every step when the job ends (the batch script
    returns, scancel, the time limit), so a task cannot outlive the job."""

    def __init__(self):
        self.local = LocalProcess()
        self.shared = {}  # node: whether it sees this machine's working directory (found by the probe)

    def allocation(self):
        """The allocation's nodes and their task slots, [(node, slots)], in Slurm's order."""
        nodes = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                               capture_output=True, text=True)
        if nodes.returncode:
            raise harness.UsageError(f"--slurm: scontrol show hostnames: {nodes.stderr.strip()}")
        slots = tasks_per_node(os.environ.get("SLURM_TASKS_PER_NODE", "1"))
        return list(zip(nodes.stdout.split(), slots))

    def command(self, node, argv):
        # --ntasks-per-node=1 overrides what sbatch --ntasks-per-node left in the environment for the batch step.
        return ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1", f"--nodelist={node}",
                "--kill-on-bad-exit=1", "--quiet", f"--chdir={os.getcwd()}", *argv]

    def start(self, task):
        return self.local.start(dataclasses.replace(task, argv=self.command(task.host, task.argv)))

    def stop_all(self, processes, grace_seconds):
        self.local.stop_all(processes, grace_seconds)  # srun forwards SIGTERM to its step's task

    def free_ports(self, node, count):
        """Ports free on `node` now, found by a step of its own; also whether it shares this working directory."""
        ports, self.shared[node] = probe(lambda argv: self.command(node, argv), node, count)
        return ports

    def shares_workdir(self, node):
        if node not in self.shared:
            self.free_ports(node, 0)
        return self.shared[node]
