"""make cluster (cluster/): nodes of their own on this machine (a network namespace, a host name, a /tmp, sshd and
slurmd each; slurmctld on a head node), and every multi-node path across them, ending bit for bit as the
reference: runs over ssh (HOSTS=node1:1,node2:1) and the sbatch templates (sbatch -N 2). One cluster for the
module (the tests' only one: the machine has room for one); make cluster-down must leave nothing of it."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import REPO, bit_identical, checkpoint_tensors, no_process_left, processes_with, train_reference
from harness.starters.ssh import Ssh

import cluster

NODES = 2
TINY = "--config=tiny --steps=20 --warmup_steps=5 --log_every=10"
FOREVER = "--config=tiny --steps=1000000 --log_every=10"
SLURM = {**os.environ, "SLURM_CONF": os.path.join(cluster.STATE, "slurm.conf")}


def ssh(node, command):
    return subprocess.run(["ssh", node, command], capture_output=True, text=True, timeout=60)


def cluster_module(what, *flags):
    return subprocess.run([sys.executable, "-m", "cluster", what, *flags], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": REPO}, timeout=120)


@pytest.fixture(scope="module")
def nodes():
    if os.geteuid() != 0:
        pytest.skip("make cluster needs root (network namespaces, sshd, /etc/hosts)")
    started = cluster_module("up", f"--nodes={NODES}")
    assert started.returncode == 0, started.stderr
    try:
        yield started.stdout
    finally:
        assert cluster_module("down").returncode == 0


def shared_directory():
    """A directory every node sees: under the repository (a node's /tmp is its own)."""
    work = os.path.join(REPO, "checkpoints", f"cluster-test-{uuid.uuid4().hex[:8]}")
    os.makedirs(work)
    return work


@pytest.fixture
def shared_work():
    work = shared_directory()
    yield work
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def reference(nodes):
    """A shared directory holding the reference of TINY at W = 2 (in reference/), the templates' submit directory."""
    work = shared_directory()
    train_reference(TINY.split()[:3], 2, "reference", work)  # the flags that set the checkpoint
    yield work
    shutil.rmtree(work, ignore_errors=True)


def matches_reference(work, ckpt_dir):
    expected, trained = checkpoint_tensors(os.path.join(work, "reference")), checkpoint_tensors(os.path.join(work,
                                                                                                      ckpt_dir))
    assert sorted(expected) == sorted(trained)
    return [n for n in expected if not bit_identical(expected[n], trained[n])] == []


def submit(template, cwd, args, *sbatch_flags, **variables):
    """sbatch of slurm/<template> from `cwd` (the submit directory, where outputs go) on two nodes, one slot each,
    with ARGS=`args`; returns the job's id. Its output is in cwd/<job id>.out."""
    result = subprocess.run(["sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", "--output=%j.out",
                             *sbatch_flags, os.path.join(REPO, "slurm", template)],
                            cwd=cwd, env={**SLURM, "REPO": REPO, "ARGS": args, **variables}, capture_output=True,
                            text=True, check=True)
    return result.stdout.strip().split(";")[0]


def job_state(job):
    """(state, exit code) of `job`, from slurmctld (the cluster keeps no accounting for sacct)."""
    fields = dict(item.split("=", 1) for item in subprocess.run(
        ["scontrol", "show", "job", "-o", job], env=SLURM, capture_output=True, text=True, check=True).stdout.split()
        if "=" in item)
    return fields["JobState"], fields["ExitCode"]


def wait_for_end(job, seconds):
    deadline = time.monotonic() + seconds
    while (state := job_state(job))[0] in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING"):
        assert time.monotonic() < deadline, f"job {job} still {state[0]} after {seconds} s"
        time.sleep(0.5)
    return state


def wait_for_step(job, output, step):
    while not (os.path.exists(output) and f" step {step}/" in open(output).read()):
        assert job_state(job)[0] in ("PENDING", "RUNNING"), open(output).read() if os.path.exists(output) else job
        time.sleep(0.5)


def test_each_node_has_its_name_its_address_and_its_own_tmp(nodes, tmp_path):
    assert "HOSTS=node1:1,node2:1" in nodes
    assert ssh("node2", "hostname").stdout.strip() == "node2"
    (tmp_path / "here").write_text("this machine's")
    assert ssh("node1", f"test -e {tmp_path / 'here'} || echo private").stdout.strip() == "private"
    # every node reaches every other by name, as the launcher's tasks must
    found = ssh("node1", f"{sys.executable} -c \"import socket; print(socket.gethostbyname('node2'))\"")
    assert found.stdout.strip() == cluster.addresses(NODES)[1], found.stderr
    assert ssh("node1", "ssh node2 hostname").stdout.strip() == "node2"


def test_ports_handed_out_on_a_node_lie_below_its_ephemeral_range(nodes, shared_work, monkeypatch):
    """Where no task's outgoing connection can take one before the task binds it (the launcher's probe on the
    node; it used to bind port 0, which the kernel draws from that range)."""
    monkeypatch.chdir(shared_work)
    ports = Ssh([("node1", 1)]).free_ports("node1", 8)
    ephemeral_start = int(ssh("node1", "cat /proc/sys/net/ipv4/ip_local_port_range").stdout.split()[0])
    assert len(set(ports)) == 8 and all(10000 <= port < ephemeral_start for port in ports), ports


def test_verify_across_two_nodes_finds_every_architecture_identical(nodes, shared_work):
    """tf's servers, Horovod's ranks and the hybrid's, on two nodes: Horovod's ranks talk over each node's own
    interface (eth0 there; this machine's is lstmcluster0), found by a probe on the node."""
    verify = subprocess.run([sys.executable, os.path.join(REPO, "verify.py"), "--hosts=node1:1,node2:1",
                             "--config=tiny", "--steps=12", "--warmup_steps=2", "--runs=reference,tf,horovod,parallax"],
                            cwd=shared_work, capture_output=True, text=True, timeout=900)
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr
    record = json.loads(open(os.path.join(shared_work, "results", "verify.json")).read())
    assert [p["verdict"] for p in record["pairs"] if p["a"] == "reference"] == ["identical"] * 3


def test_mpirun_across_nodes_keeps_off_an_interface_every_node_has(reference):
    """Each node with a docker0 of the same address, as Docker gives every host: OpenMPI left to choose also
    offers it, and a rank that connects there reaches itself. The launcher names the nodes' network instead,
    and the ranks' tagged lines come out as each rank's own."""
    for node in cluster.names(NODES):
        for command in (["link", "add", "docker0", "type", "bridge"],
                        ["addr", "add", "172.17.0.1/16", "dev", "docker0"], ["link", "set", "docker0", "up"]):
            subprocess.run(["ip", "-n", f"{cluster.PREFIX}-{node}", *command], check=True)
    try:
        run = subprocess.run([sys.executable, "-m", "harness.launch", "horovod", "--mpi", "--hosts=node1:1,node2:1",
                              "--", *TINY.split(), "--ckpt_dir=mpi-hosts", "--run_name=mpi-hosts"], cwd=reference,
                             env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True, timeout=180)
    finally:
        for node in cluster.names(NODES):
            subprocess.run(["ip", "-n", f"{cluster.PREFIX}-{node}", "link", "delete", "docker0"], check=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "[worker0] [run_horovod] step 20/20" in run.stdout and "@event" not in run.stdout
    assert "worker0" in run.stderr.split("peak resident memory:")[1] and "worker1" in run.stderr.split(
        "peak resident memory:")[1]
    assert matches_reference(reference, "mpi-hosts")


def test_srun_puts_one_task_on_each_node(nodes):
    names = subprocess.run(["srun", f"--nodes={NODES}", "hostname"], env=SLURM, capture_output=True, text=True,
                           timeout=60)
    assert sorted(names.stdout.split()) == cluster.names(NODES), names.stderr


@pytest.mark.parametrize("template, variables", [("run_tf.sbatch", {}), ("run_horovod.sbatch", {}),
                                                 ("run_horovod.sbatch", {"MPI": "1"}),
                                                 ("run_parallax.sbatch", {})],
                         ids=["tf", "horovod", "horovod-mpi", "parallax"])
def test_an_sbatch_template_on_two_nodes_matches_the_reference(reference, template, variables):
    name = template.split(".")[0] + "".join(variables)
    job = submit(template, reference, f"{TINY} --ckpt_dir={name} --run_name={name}", **variables)
    state = wait_for_end(job, 300)
    output = open(os.path.join(reference, f"{job}.out")).read()
    assert state == ("COMPLETED", "0:0"), output
    assert "step 20/20" in output
    assert matches_reference(reference, name)


def test_verify_sbatch_on_two_nodes_finds_every_architecture_identical(reference):
    job = submit("verify.sbatch", reference, "--config=tiny --steps=12 --warmup_steps=2 --runs=reference,tf,horovod,"
                 "parallax --results_dir=verified")
    state = wait_for_end(job, 600)
    assert state == ("COMPLETED", "0:0"), open(os.path.join(reference, f"{job}.out")).read()
    record = json.loads(open(os.path.join(reference, "verified", "verify.json")).read())
    assert [p["verdict"] for p in record["pairs"] if p["a"] == "reference"] == ["identical"] * 3


def test_srun_alone_gives_run_tf_its_cluster_from_the_step(reference):
    """No launcher, no cluster flags: `srun --ntasks=3 python run_tf.py --ps_tasks=1` on two nodes, each task's
    cluster from the step's environment (SlurmClusterResolver: task 0 is ps0, tasks 1 and 2 the workers)."""
    script = os.path.join(reference, "step.sbatch")
    with open(script, "w") as f:
        f.write(f"#!/bin/bash\nexec srun --label {sys.executable} {REPO}/run_tf.py --ps_tasks=1 {TINY} "
                f"--ckpt_dir=srun_step --run_name=srun_step\n")
    job = subprocess.run(["sbatch", "--parsable", "--nodes=2", "--ntasks=3", "--output=%j.out", script], cwd=reference,
                         env=SLURM, capture_output=True, text=True, check=True).stdout.strip()
    state = wait_for_end(job, 300)
    output = open(os.path.join(reference, f"{job}.out")).read()
    assert state == ("COMPLETED", "0:0"), output
    assert "1: [run_tf] step 20/20" in output  # task 1 is worker 0, the chief
    assert matches_reference(reference, "srun_step")


def test_scancel_leaves_no_process_on_any_node(nodes, shared_work):
    marker = f"slurm-scancel-{uuid.uuid4().hex[:8]}"
    job = submit("run_parallax.sbatch", shared_work, f"{FOREVER} --run_name={marker}")
    wait_for_step(job, os.path.join(shared_work, f"{job}.out"), 10)
    assert len(processes_with(marker)) >= 3  # ps0, worker0, worker1 and their srun clients
    subprocess.run(["scancel", job], env=SLURM, check=True)
    assert wait_for_end(job, 60)[0] == "CANCELLED"
    assert no_process_left(marker, seconds=30)


def test_a_task_killed_on_the_second_node_fails_the_job_naming_it(nodes, shared_work):
    marker = f"slurm-kill-{uuid.uuid4().hex[:8]}"
    job = submit("run_tf.sbatch", shared_work, f"{FOREVER} --run_name={marker}")
    wait_for_step(job, os.path.join(shared_work, f"{job}.out"), 10)
    argv = {pid: open(f"/proc/{pid}/cmdline").read().split("\0") for pid in processes_with(marker)}
    victims = [pid for pid, a in argv.items() if a[0] != "srun" and "--job_name=worker" in a and "--task_index=1" in a]
    assert len(victims) == 1, argv
    assert open(f"/proc/{victims[0]}/environ").read().count("SLURMD_NODENAME=node2")  # the batch step is node1's
    os.kill(victims[0], signal.SIGKILL)
    assert wait_for_end(job, 60) == ("FAILED", "1:0")
    assert "launch: task worker1 was killed by signal 9" in open(os.path.join(shared_work, f"{job}.out")).read()
    assert no_process_left(marker, seconds=30)
    assert not os.path.exists(os.path.join(shared_work, "results", f"{marker}.json"))


def test_a_job_requeued_onto_other_nodes_resumes_and_ends_as_the_reference(nodes, shared_work):
    """scontrol requeue, as a preemption or a lost node does it, and the job kept off the nodes it ran on: the
    template runs again elsewhere with SLURM_RESTART_COUNT=1, resumes from the latest checkpoint in the shared
    submit directory, and ends bit for bit as the reference."""
    steps = "--config=tiny --steps=40 --warmup_steps=5 --log_every=1"
    train_reference(steps.split(), 2, "reference", shared_work)
    job = submit("run_tf.sbatch", shared_work, f"{steps} --ckpt_dir=requeued --run_name=requeued",
                 "--nodes=1", "--ntasks-per-node=2", "--nodelist=node1", SAVE_EVERY="10")
    output = os.path.join(shared_work, f"{job}.out")
    wait_for_step(job, output, 15)
    subprocess.run(["scontrol", "requeue", job], env=SLURM, check=True)
    subprocess.run(["scontrol", "update", f"jobid={job}", "nodelist=", "excnodelist=node1"], env=SLURM, check=True)
    state = wait_for_end(job, 400)
    log = open(output).read()
    assert state == ("COMPLETED", "0:0"), log
    assert "resume: from requeued/model.ckpt-" in log and "step 40/40" in log
    nodes_it_ran_on = subprocess.run(["scontrol", "show", "job", "-o", job], env=SLURM, capture_output=True,
                                     text=True).stdout
    assert " NodeList=node2 " in nodes_it_ran_on
    assert matches_reference(shared_work, "requeued")


def test_the_cluster_goes_without_a_trace():
    """Run last in the module: a second cluster up and down again leaves no namespace, name, key or daemon."""
    if os.geteuid() != 0:
        pytest.skip("make cluster needs root")
    assert cluster_module("up", "--nodes=1").returncode == 0
    assert cluster_module("down").returncode == 0
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert cluster.PREFIX not in namespaces
    assert cluster.BEGIN not in open(cluster.HOSTS_FILE).read()
    assert not os.path.exists(cluster.SSH_CLIENT_CONFIG) and not os.path.exists(cluster.STATE)
    assert not os.path.realpath(cluster.SLURM_CONF).startswith(cluster.STATE)
    daemons = subprocess.run(["pgrep", "-f", cluster.STATE], capture_output=True, text=True).stdout
    assert daemons == ""
