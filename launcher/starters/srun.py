"""Tasks as Slurm job steps of the launcher's allocation (launch --slurm), one srun per task, not --multi-prog, so
that each has its own exit status and address; docs/cluster.md explains."""
import dataclasses
import os

from harness.slurm import hostnames, tasks_per_node
from launcher.starters.remote import OnHosts


def allocation():
    """The nodes of the allocation this runs in and their task slots, [(node, slots)], in Slurm's order."""
    slots = tasks_per_node(os.environ.get("SLURM_TASKS_PER_NODE", "1"))
    return list(zip(hostnames(os.environ["SLURM_JOB_NODELIST"]), slots))


class Srun(OnHosts):
    """A task as a job step on one node, its local srun client standing for it; --overlap lets the steps share
    CPUs, as tasks outnumber cores (without it a step waits for CPUs another holds)."""

    @classmethod
    def from_flags(cls, args):
        return cls(allocation())

    def command(self, node, argv):
        # --ntasks-per-node=1 overrides what sbatch --ntasks-per-node left in the environment for the batch step.
        return ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1", f"--nodelist={node}",
                "--kill-on-bad-exit=1", "--quiet", f"--chdir={os.getcwd()}", *argv]

    def start(self, task):
        return super().start(dataclasses.replace(task, argv=self.command(task.host, task.argv)))
