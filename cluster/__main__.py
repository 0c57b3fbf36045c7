"""make cluster NODES=3 [NET=1gbit] / make cluster-down: an emulated cluster of nodes on this machine.

    python -m cluster up --nodes=3 --net=1gbit     # prints the HOSTS= value (HOSTS=node1:1,node2:1,node3:1)
    python -m cluster up --noshared                # each node a private copy of the repository
                                                   # and the Slurm partition
    python -m cluster down                         # nothing of it left
"""
import os

import harness
from harness import flags
from launcher.starters import netns

import cluster


def main():
    parser = flags.FlagSet("python -m cluster up|down", __doc__)
    flags.DEFINE_integer("nodes", 3, "nodes (node1, node2, ...)", lower_bound=1, upper_bound=200,
                         flag_values=parser)
    flags.DEFINE_parsed("net", None, netns.Link.parse, "every node's link rate, shaped as the bench's machines' "
                        "(default: unshaped)", parser)
    flags.DEFINE_boolean("shared", True, "the repository (the working directory of make's targets) shared by every "
                         "node, as on a shared file system; --noshared: a private copy on each", flag_values=parser)
    args = flags.parse(parser, positional=1)
    what = args.positional[0]
    if what == "down":
        cluster.down()
        print("cluster: down; nothing of it left")
        return 0
    if what != "up":
        raise harness.UsageError(f"expected up or down, not {what!r}")
    hosts = cluster.up(args.nodes, args.net, args.shared)
    nodes = ", ".join(f"{name} {address}" for name, address in zip(cluster.names(args.nodes),
                                                                  cluster.addresses(args.nodes)))
    slurm = ("" if os.path.realpath(cluster.SLURM_CONF).startswith(cluster.STATE) else
             f"export SLURM_CONF={cluster.STATE}/slurm.conf (yours is in {cluster.SLURM_CONF}); ")
    print(f"cluster: {args.nodes} nodes up ({nodes}), links {args.net or 'unshaped'}, repository "
          f"{'shared' if args.shared else 'a private copy on each'}; ssh node1 hostname; "
          f"{slurm}sbatch -N {args.nodes} (partition {cluster.PARTITION}); HOSTS={hosts}")
    return 0


if __name__ == "__main__":
    harness.main(main)
