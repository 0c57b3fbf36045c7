"""A real one-node Slurm cluster of the tests' own: munged, slurmctld and slurmd started as root from a
generated slurm.conf in a temporary directory, on free ports and a munge socket of their own, so that nothing
of the machine's (/etc/slurm, /etc/munge, the default ports) is used or changed. Clients reach it through
$SLURM_CONF. Everything it starts is stopped when the block ends, also when the block fails.

    with one_node_cluster(directory) as environment:   # environment: os.environ plus SLURM_CONF
        subprocess.run(["sbatch", ...], env=environment)
"""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time

# More CPUs than this machine has (config_overrides: slurmd believes slurm.conf, not the hardware), so that a
# job of a PS task and two workers, plus its batch step, fits on a 2-core machine.
CPUS = 8


def missing():
    """Why this machine cannot run the cluster, or None."""
    if os.geteuid() != 0:
        return "slurmd and munged run as root here: root only (make setup installs slurm-wlm and munge as root)"
    absent = [tool for tool in ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "scancel")
              if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}")]
    return f"{', '.join(absent)} not installed (make setup installs slurm-wlm and munge as root)" if absent else None


def free_port():
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def slurm_conf(directory, node):
    return f"""ClusterName=lstmtest
SlurmctldHost={node}
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={directory}/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation={directory}/state
SlurmdSpoolDir={directory}/spool
SlurmctldPidFile={directory}/slurmctld.pid
SlurmdPidFile={directory}/slurmd.pid
SlurmctldLogFile={directory}/slurmctld.log
SlurmdLogFile={directory}/slurmd.log
# No cgroups here: processes are tracked by their parentage, and tasks are not bound to cores.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
# scancel and a job's end: SIGTERM, then SIGKILL 5 s later (default 30 s)
KillWait=5
NodeName={node} CPUs={CPUS} RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _wait_for(condition, seconds, what, logs):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {seconds} s; logs:\n" + "\n".join(
                f"--- {log}\n{open(log).read()[-2000:]}" for log in logs if os.path.exists(log)))
        time.sleep(0.2)


@contextlib.contextmanager
def one_node_cluster(directory):
    directory = str(directory)
    node = socket.gethostname()
    for sub in ("state", "spool"):
        os.makedirs(os.path.join(directory, sub), exist_ok=True)
    conf = os.path.join(directory, "slurm.conf")
    with open(conf, "w") as f:
        f.write(slurm_conf(directory, node))
    environment = {**os.environ, "SLURM_CONF": conf}
    for name in [n for n in environment if n.startswith("SLURM_") and n != "SLURM_CONF"]:
        del environment[name]  # the tests may themselves run inside some allocation
    logs = [os.path.join(directory, log) for log in ("munged.log", "slurmctld.log", "slurmd.log")]
    daemons = []
    try:
        key = os.path.join(directory, "munge.key")
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True)
        # --force: munged refuses directories that others can write (a temporary directory's parents).
        daemons.append(subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={directory}/munge.socket", f"--key-file={key}",
             f"--pid-file={directory}/munged.pid", f"--log-file={directory}/munged.log",
             f"--seed-file={directory}/munged.seed"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_for(lambda: os.path.exists(f"{directory}/munge.socket"), 10, "munged did not start", logs)
        # -i: ignore any saved state (there is none); -D: in the foreground, a child of this process.
        daemons.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", conf], env=environment,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        daemons.append(subprocess.Popen(["slurmd", "-D", "-f", conf, "-N", node], env=environment,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        def node_idle():
            state = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=environment, capture_output=True, text=True)
            return state.stdout.strip() == "idle"
        _wait_for(node_idle, 30, "the node did not become idle", logs)
        yield environment
    finally:
        # Jobs first, while slurmd can still stop their processes; then the daemons, newest first.
        subprocess.run(["scancel", "--full", "--user=root"], env=environment, capture_output=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            jobs = subprocess.run(["squeue", "-h"], env=environment, capture_output=True, text=True)
            if jobs.returncode or not jobs.stdout.strip():
                break
            time.sleep(0.2)
        for daemon in reversed(daemons):
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
