"""Horovod's ranks started by OpenMPI's mpirun (launch --mpi, make run-horovod MPI=1; docs/cluster.md): one local
task that starts every rank itself, tags each line with its rank and stops all when one dies."""
import os
import re
import shutil

import harness
from launcher.starters.remote import forwarded_environment


def check():
    """Raise UsageError unless mpirun is installed and Horovod was built with MPI."""
    import horovod.tensorflow as hvd
    if not shutil.which("mpirun"):
        raise harness.UsageError("--mpi: no mpirun: apt-get install openmpi-bin libopenmpi-dev, then make setup")
    if not hvd.mpi_built():
        raise harness.UsageError("--mpi: this Horovod was built without MPI: install OpenMPI (apt-get install "
                                 "openmpi-bin libopenmpi-dev), then bash scripts/setup.sh")


TAG = re.compile(r"^\[\d+,(\d+)\]<std(?:out|err)>:")  # --tag-output's: [job,rank]<stdout>:


def command(worker_hosts, argv, interfaces=()):
    """Return mpirun's command line for the ranks of `argv`, rank r on worker_hosts[r], talking over `interfaces`
    (names; empty: OpenMPI's choice, which may be an interface another host has too, such as docker0)."""
    hosts = ",".join(f"{host}:{worker_hosts.count(host)}" for host in dict.fromkeys(worker_hosts))
    over = [arg for name in ("btl_tcp_if_include", "oob_tcp_if_include")
            for arg in ("--mca", name, ",".join(interfaces))] if interfaces else []
    # --bind-to none: mpirun would pin each rank to a core, and the tasks of a run share this machine's cores.
    return ["mpirun", *(["--allow-run-as-root"] if os.geteuid() == 0 else []), "-np", str(len(worker_hosts)),
            "-H", hosts, "--bind-to", "none", "--map-by", "slot", *over, "--tag-output", "-x", "PYTHONUNBUFFERED=1",
            *[arg for name in forwarded_environment() for arg in ("-x", name)], *argv]


def untag(name, line):
    """(the task that wrote `line`, the line without mpirun's tag): rank r's is worker r."""
    tag = TAG.match(line)
    return (f"worker{tag[1]}", line[tag.end():]) if tag else (name, line)
