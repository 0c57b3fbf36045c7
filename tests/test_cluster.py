"""make cluster (cluster/): nodes of their own on this machine (a network namespace, a host name, a /tmp, sshd and
slurmd each; slurmctld on a head node), and every multi-node path across them, ending bit for bit as the
reference: runs over ssh (HOSTS=node1:1,node2:1) and the sbatch templates (sbatch -N 2). One cluster for the
module (the tests' only one: the machine has room for one); make cluster-down must leave nothing of it."""
import csv
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

from pathlib import Path

import pytest

from conftest import (REPO, bit_identical, checkpoint_tensors, clone, long_run, no_process_left, processes_with,
                      train_reference)
import harness
from assignment import manifest
from launcher.starters import netns
from launcher.starters.remote import GLOO_HOSTNAME_SHIM
from launcher.starters.ssh import Ssh

import cluster

NODES = 2
NET = "100mbit"  # every node's link: what make bench HOSTS= measures as a real network's
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
    started = cluster_module("up", f"--nodes={NODES}", f"--net={NET}")
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


def test_make_verify_with_four_workers_on_two_nodes_passes_as_verify_judges_w_4(nodes, shared_work):
    """Two slots a node, two parameter servers (one each): make verify's own target, across the nodes."""
    verify = subprocess.run(["make", "-s", "-C", REPO, "-o", ".venv/.setup-done", "verify", "HOSTS=node1:2,node2:2",
                             "WORKERS=4", "PS=2", "CONFIG=tiny", "STEPS=12", "WARMUP=2",
                             f"RESULTS={shared_work}/results", f"CKPT_DIR={shared_work}/checkpoints",
                             "ARGS=--runs=reference,tf"], capture_output=True, text=True, timeout=900)
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr
    record = json.loads(open(os.path.join(shared_work, "results", "lstm", "verify.json")).read())
    assert record["config"]["workers"] == 4 and record["config"]["ps"] == 2 and record["match"] == "tolerance"
    assert record["passed"] and [p["passed"] for p in record["pairs"] if p["a"] == "reference"] == [True]


def assert_bench_on_nodes_as_the_model_predicts(work, measured_costs):
    """make bench HOSTS=node1:1,node2:1 (the small config: tiny's steps are too short for the model), its results
    and checkpoints in `work`, given the session's measured costs. It treats the nodes as real machines: it shapes
    nothing, measures the links the cluster shaped (within 10% of NET), counts each node's bytes on its interface
    (within 5% of the traffic model) and sets each step against the model's interval, priced at the measured rate;
    its runs of one device and the probe beside them run on the nodes."""
    results_dir = os.path.join(work, "results")
    os.makedirs(os.path.join(results_dir, "lstm"))
    shutil.copy(measured_costs / "bench-costs.json", os.path.join(results_dir, "lstm"))
    bench = subprocess.run(["make", "-s", "-C", REPO, "-o", ".venv/.setup-done", "bench", "HOSTS=node1:1,node2:1",
                            f"RESULTS={results_dir}", f"CKPT_DIR={work}/checkpoints", "CONFIG=small", "STEPS=12",
                            "WARMUP=4", "ARGS=--runners=tf,horovod,parallax,tf-async"],
                           capture_output=True, text=True, timeout=900)
    assert bench.returncode == 0, bench.stdout[-3000:] + bench.stderr
    records = [json.loads(line) for line in open(os.path.join(results_dir, "lstm", "bench.jsonl"))]
    assert "bench: measuring the links between node1, node2" in bench.stdout
    assert "bench: measuring the protocols' costs" not in bench.stdout  # the session's, given
    assert sorted(r["runner"] for r in records) == ["horovod", "parallax", "tf", "tf-async"]
    rate = netns.Link.parse(NET).bits_per_second
    # asynchronous: each host's bytes counted over the chief's measured steps, against the workers' paces; no
    # step to price
    (unpriced,) = [r for r in records if r["runner"] == "tf-async"]
    assert unpriced["outside_the_model"].startswith("asynchronous") and unpriced["point_seconds"] is None
    assert all(m["sent"] > 0 and m["received"] > 0 for m in unpriced["measured_bytes_per_step"])
    assert 0.5 < unpriced["bytes_measured_over_predicted"] < 2, unpriced
    for record in (r for r in records if r is not unpriced):
        assert not record["emulated"] and record["workers"] == 2 and record["machines"] == 2
        pairs = {(p["source"], p["destination"]): p for p in record["link_probe"]}
        assert set(pairs) == {("node1", "node2"), ("node2", "node1")}
        for pair in pairs.values():
            assert 0.9 * rate < pair["frame_bits_per_second"] < 1.1 * rate, pair
            assert 0.9 * rate < pair["payload_bits_per_second"] < pair["frame_bits_per_second"], pair
        assert record["bits_per_second"] == min(p["frame_bits_per_second"] for p in pairs.values())
        assert 0.95 < record["bytes_measured_over_predicted"] < 1.05, record
        assert [h["host"] for h in record["hosts"]] == ["node1", "node2"]
        assert record["compute_beside_seconds"] > 0  # the probe beside the run of one device, copied back
        # the step set against the interval; whether it falls inside is the bench's measurement (the cores are
        # shared with another test meanwhile), not this test's
        step = record["throughput"]["median_step_seconds"]
        assert 0 < record["lower_seconds"] <= record["point_seconds"] <= record["upper_seconds"] * (1 + 1e-9)
        assert record["inside_interval"] == (record["lower_seconds"] <= step <= record["upper_seconds"]), record
    assert "small, links of node1, node2: measured" in bench.stdout


def test_ports_handed_out_on_a_node_lie_below_its_ephemeral_range(nodes, shared_work, monkeypatch):
    """Where no task's outgoing connection can take one before the task binds it (the launcher's probe on the
    node; it used to bind port 0, which the kernel draws from that range)."""
    monkeypatch.chdir(shared_work)
    ports = Ssh([("node1", 1)]).free_ports("node1", 8)
    ephemeral_start = int(ssh("node1", "cat /proc/sys/net/ipv4/ip_local_port_range").stdout.split()[0])
    assert len(set(ports)) == 8 and all(10000 <= port < ephemeral_start for port in ports), ports


def test_mpirun_across_nodes_keeps_off_an_interface_every_node_has(reference):
    """Each node with a docker0 of the same address, as Docker gives every host: OpenMPI left to choose also
    offers it, and a rank that connects there reaches itself. The launcher names the nodes' network instead,
    and the ranks' tagged lines come out as each rank's own."""
    for node in cluster.names(NODES):
        for command in (["link", "add", "docker0", "type", "bridge"],
                        ["addr", "add", "172.17.0.1/16", "dev", "docker0"], ["link", "set", "docker0", "up"]):
            subprocess.run(["ip", "-n", f"{cluster.PREFIX}-{node}", *command], check=True)
    try:
        run = subprocess.run([sys.executable, "-m", "launcher", "horovod", "--mpi", "--hosts=node1:1,node2:1",
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


def make_check(*variables, cwd):
    return subprocess.run(["make", "-s", "-C", REPO, "-o", ".venv/.setup-done", "check", *variables], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def in_node(node, *command):
    """Run `command` in `node`'s mount namespace (its sshd's): what the node's logins and tasks see, only there."""
    pid = open(os.path.join(cluster.STATE, f"sshd_{node}.pid")).read().strip()
    subprocess.run(["nsenter", "-t", pid, "-m", *command], check=True)


def test_make_check_finds_every_node_ready(nodes, shared_work):
    check = make_check("HOSTS=node1:1,node2:1", cwd=shared_work)
    assert check.returncode == 0, check.stderr
    for node in cluster.names(NODES):
        line = next(line for line in check.stdout.splitlines() if line.startswith(f"check: {node}:"))
        assert "Horovod built, workdir shared, interface eth0 (198.18.0.0/15)" in line, line
    assert "check: 2 hosts ready" in check.stdout


@pytest.fixture
def other_commit_on_node1_no_venv_on_node2(nodes, shared_work):
    """node1 sees a repository at another commit, node2 no .venv: each only in that node's mount namespace."""
    other = os.path.join(shared_work, "other")
    subprocess.run(["git", "init", "-q", other], check=True)
    subprocess.run(["git", "-C", other, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
                    "-m", "another commit"], check=True)
    venv_bin = os.path.dirname(sys.executable)
    in_node("node1", "mount", "--bind", os.path.join(other, ".git"), os.path.join(REPO, ".git"))
    in_node("node2", "mount", "-t", "tmpfs", "tmpfs", venv_bin)
    yield
    in_node("node1", "umount", os.path.join(REPO, ".git"))
    in_node("node2", "umount", venv_bin)


def test_a_launch_names_each_node_s_problem_before_any_task_starts(other_commit_on_node1_no_venv_on_node2,
                                                                   shared_work):
    check = make_check("HOSTS=node1:1,node2:1", cwd=shared_work)
    run = subprocess.run([sys.executable, "-m", "launcher", "tf", "--hosts=node1:1,node2:1", "--",
                          *TINY.split()], cwd=shared_work, env={**os.environ, "PYTHONPATH": REPO},
                         capture_output=True, text=True, timeout=120)
    for result in (check, run):
        assert result.returncode == 2, result.stdout + result.stderr
        errors = [line for line in result.stderr.splitlines() if ": error: " in line]
        assert len(errors) == 2 and "Traceback" not in result.stderr, result.stderr
        assert "node1: the repository is at commit" in errors[0], errors
        assert "node2: no " in errors[1] and ".venv/bin/python: make setup there" in errors[1], errors
    assert "[worker" not in run.stdout + run.stderr  # no task started


def test_what_breaks_between_real_hosts_is_named_with_both_ends_before_any_task_starts(nodes, shared_work):
    """Planted each in a node's own mount or network namespace: node1's /etc/hosts lacks node2; node2 sends no TCP
    but ssh's (a firewall: neither its listener's answers nor its own connections get out); node2's Horovod says it
    is another version and its model file differs. make check and a launch name each, one line, both ends where it
    lies between two."""
    hosts = os.path.join(shared_work, "hosts-node1")
    with open(hosts, "w") as f:
        f.write("".join(line for line in open(cluster.HOSTS_FILE) if "node2" not in line))
    (metadata,) = glob.glob(os.path.join(REPO, ".venv/lib/python3*/site-packages/horovod-*.dist-info/METADATA"))
    older = os.path.join(shared_work, "METADATA")
    with open(older, "w") as f:
        f.write(re.sub(r"(?m)^Version: .*$", "Version: 0.27.0", open(metadata).read()))
    model = os.path.join(REPO, "models", "lstm.py")
    edited = os.path.join(shared_work, "lstm.py")
    with open(edited, "w") as f:
        f.write(open(model).read() + "\n# edited on node2\n")
    node2 = f"{cluster.PREFIX}-node2"
    in_node("node1", "mount", "--bind", hosts, cluster.HOSTS_FILE)
    in_node("node2", "mount", "--bind", older, metadata)
    in_node("node2", "mount", "--bind", edited, model)
    # ssh's answers to the link's class; any other TCP into a class under the link's htb whose queue holds nothing
    def tc(kind, verb, *args):
        subprocess.run(["ip", "netns", "exec", node2, "tc", kind, verb, "dev", "eth0", *args], check=True,
                       capture_output=True)
    tc("class", "add", "parent", "1:", "classid", "1:2", "htb", "rate", "8bit", "ceil", "8bit")
    tc("qdisc", "add", "parent", "1:2", "handle", "20:", "pfifo", "limit", "0")
    tc("filter", "add", "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "protocol", "6", "0xff",
       "match", "ip", "sport", "22", "0xffff", "flowid", "1:1")
    tc("filter", "add", "parent", "1:", "protocol", "ip", "prio", "2", "u32", "match", "ip", "protocol", "6", "0xff",
       "flowid", "1:2")
    try:
        check = make_check("HOSTS=node1:1,node2:1", cwd=shared_work)
        run = subprocess.run([sys.executable, "-m", "launcher", "horovod", "--hosts=node1:1,node2:1", "--",
                              *TINY.split()], cwd=shared_work, env={**os.environ, "PYTHONPATH": REPO},
                             capture_output=True, text=True, timeout=180)
    finally:
        for priority in ("1", "2"):
            tc("filter", "del", "parent", "1:", "prio", priority)
        tc("class", "del", "classid", "1:2")
        in_node("node1", "umount", cluster.HOSTS_FILE)
        in_node("node2", "umount", metadata)
        in_node("node2", "umount", model)
    here = socket.gethostname()
    for result in (check, run):
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr
        errors = [line.split(": error: ", 1)[1] for line in result.stderr.splitlines() if ": error: " in line]
        for expected in (f"node2: Horovod 0.27.0 there, 0.28.1 on this machine ({here})",
                         f"node2: the model file models/lstm.py differs there from this machine's ({here})",
                         "node1 cannot resolve node2's name",
                         "node1 cannot connect to a port on node2",
                         "node2 cannot connect to a port on node1",
                         "node2 cannot connect to a port on this machine's rendezvous"):
            assert any(error.startswith(expected) for error in errors), "\n".join([expected, *errors])
        assert not any(error.startswith("node1 cannot connect to a port on this machine") for error in errors), errors
    assert "[worker" not in run.stdout + run.stderr  # no task started


def test_horovod_and_the_hybrid_run_across_nodes_whose_names_are_on_loopback(reference):
    """Each node's /etc/hosts names it 127.0.1.1, as Debian's and Ubuntu's installers write it, where Horovod's Gloo
    would bind its process sets (its ranks aborted: connect [127.0.1.1]); the launcher preloads
    launcher/gloo_hostname.c into those ranks, so make run-horovod and make run-parallax end as the reference, and
    make check says what the shim's absence would cost."""
    for node in cluster.names(NODES):
        hosts = os.path.join(reference, f"hosts-{node}")
        with open(hosts, "w") as f:
            f.write(f"127.0.1.1 {node}\n{open(cluster.HOSTS_FILE).read()}")
        in_node(node, "mount", "--bind", hosts, cluster.HOSTS_FILE)
    try:
        for architecture in ("horovod", "parallax"):
            run = subprocess.run(["make", "-s", "-C", REPO, "-o", ".venv/.setup-done", f"run-{architecture}",
                                  "HOSTS=node1:1,node2:1", "CONFIG=tiny", "STEPS=20", "WARMUP=5",
                                  f"RESULTS={reference}/results", f"CKPT_DIR={reference}/{architecture}-loopback",
                                  "ARGS=--log_every=10"], capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            assert matches_reference(reference, f"{architecture}-loopback")
        shim = GLOO_HOSTNAME_SHIM
        in_node("node2", "mount", "--bind", "/dev/null", shim)  # as if node2's .venv predated it: not a library
        try:
            check = make_check("HOSTS=node1:1,node2:1", cwd=reference)
        finally:
            in_node("node2", "umount", shim)
        assert check.returncode == 2 and "node2: its host name node2 resolves there to 127.0.1.1" in check.stderr, \
            check.stderr
        assert "node1:" not in check.stderr
    finally:
        for node in cluster.names(NODES):
            in_node(node, "umount", cluster.HOSTS_FILE)


def test_an_unknown_host_key_is_named(nodes):
    """node2's key unknown to the ssh configuration given: named before any run, exit 2. (A working directory each
    node has a copy of is no problem: the runs' outputs come back, test_without_a_shared_file_system...)"""
    work = os.path.join("/tmp", f"cluster-private-{uuid.uuid4().hex[:8]}")
    os.makedirs(work)
    try:
        empty = os.path.join(work, "empty_known_hosts")
        open(empty, "w").close()
        config = os.path.join(work, "ssh_config")
        with open(config, "w") as f:
            f.write(f"Host node2\n  UserKnownHostsFile {empty}\nHost node1 node2\n  IdentityFile "
                    f"{cluster.STATE}/client_key\n  UserKnownHostsFile {cluster.STATE}/known_hosts\n")
        check = make_check("HOSTS=node1:1,node2:1", f"ARGS=--ssh_config={config}", cwd=work)
        assert check.returncode == 2 and "node2: ssh: its host key is not in known_hosts" in check.stderr, \
            check.stderr
    finally:
        shutil.rmtree(work)


def task_pid(marker, job, index):
    """The pid of the task (not its ssh client or lifeline) `job` `index` of the run named `marker`."""
    argv = {pid: open(f"/proc/{pid}/cmdline").read().split("\0") for pid in processes_with(marker)}
    found = [pid for pid, a in argv.items() if a[1].endswith("run_tf.py") and f"--job_name={job}" in a
             and f"--task_index={index}" in a]
    assert len(found) == 1, argv
    return found[0]


def test_a_task_killed_on_node2_ends_the_job_naming_both_and_the_launcher_s_variables_reach_it(
        nodes, shared_work, monkeypatch):
    """kill -9 of worker1, on node2: the job ends within 60 s naming the task and its node, nothing left on any
    node. The task ran with the launcher's OMP_/LIFELINE_ variables, which ssh does not pass by itself."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("LIFELINE_SILENCE_SECONDS", "9")
    marker = f"cluster-kill-{uuid.uuid4().hex[:8]}"
    with long_run("tf", marker, shared_work, "--hosts=node1:1,node2:1") as process:
        victim = task_pid(marker, "worker", 1)
        environment = open(f"/proc/{victim}/environ").read().split("\0")
        assert "OMP_NUM_THREADS=1" in environment and "LIFELINE_SILENCE_SECONDS=9" in environment
        os.kill(victim, signal.SIGKILL)
        assert process.wait(timeout=60) == 1
    assert "launch: task worker1 on node2 was killed by signal 9" in process.stderr.read()
    assert no_process_left(marker, seconds=30)


def test_the_launcher_killed_leaves_nothing_on_any_node(nodes, shared_work):
    marker = f"cluster-launcher-{uuid.uuid4().hex[:8]}"
    with long_run("parallax", marker, shared_work, "--hosts=node1:1,node2:1") as process:
        process.kill()
        process.wait()
        assert no_process_left(marker, seconds=60)


def test_a_node_cut_off_ends_the_job_naming_it_and_its_tasks_stop_there(nodes, shared_work, monkeypatch):
    """node2's link down: ssh's keep-alives (3 x 5 s) end its client, the job stops naming node2, and on node2
    lifeline.py stops the tasks after LIFELINE_SILENCE_SECONDS without the launcher's heartbeat."""
    monkeypatch.setenv("LIFELINE_SILENCE_SECONDS", "10")
    marker = f"cluster-cut-{uuid.uuid4().hex[:8]}"
    namespace = f"{cluster.PREFIX}-node2"
    # the tasks' own watch (--timeout) longer than ssh's keep-alives: ssh is the one that notices first
    with long_run("tf", marker, shared_work, "--hosts=node1:1,node2:1", runner_flags=["--timeout=60"]) as process:
        on_node2 = task_pid(marker, "worker", 1)
        subprocess.run(["ip", "-n", namespace, "link", "set", "eth0", "down"], check=True)
        try:
            cut = time.monotonic()
            assert process.wait(timeout=60) == 1
            ended = time.monotonic() - cut
            deadline = time.monotonic() + 30
            while os.path.exists(f"/proc/{on_node2}") and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not os.path.exists(f"/proc/{on_node2}"), "the task on node2 outlived its lifeline"
        finally:
            subprocess.run(["ip", "-n", namespace, "link", "set", "eth0", "up"], check=True)
    errors = process.stderr.read()
    assert ended < 30 and "launch: task worker1 on node2 exited with status 255" in errors, errors  # ssh's 255
    assert no_process_left(marker, seconds=30)


def test_horovodrun_from_a_node_matches_the_reference(reference):
    """horovodrun by hand, from node1: its ranks are told the rendezvous at its own address on the interface
    the hosts share by name (eth0), so it runs from one of them (from this machine, eth0 is another network)."""
    run = ssh("node1", f"cd {reference} && {os.path.dirname(sys.executable)}/horovodrun --gloo -np 2 -H "
                       f"node1:1,node2:1 {sys.executable} {REPO}/run_horovod.py {TINY} --ckpt_dir=horovodrun "
                       f"--run_name=horovodrun")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert matches_reference(reference, "horovodrun")


def test_the_launching_node_starts_its_own_tasks_without_its_sshd(reference):
    """Launched on node1 itself, whose sshd no ssh client reaches here (the ssh_config sends node1 to a port where
    nothing listens): node1's tasks start as processes of its own, node2's over ssh, and they match the reference."""
    with open(cluster.SSH_CLIENT_CONFIG) as f:
        reaching_node2_only = f"Host node1\n  Port 1\n{f.read()}"  # (ssh takes an option's first value)
    config = os.path.join(reference, "ssh_config.node1-without-sshd")
    with open(config, "w") as f:
        f.write(reaching_node2_only)
    node1 = open(os.path.join(cluster.STATE, "sshd_node1.pid")).read().strip()
    launch = (f"cd {reference} && exec {sys.executable} -m launcher tf --hosts=node1:1,node2:1 --ssh_config={config} "
              f"-- {TINY} --ckpt_dir=from-node1 --run_name=from-node1")
    run = subprocess.run(["nsenter", "-t", node1, "--net", "--uts", "--mount", "sh", "-c", launch], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": REPO})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "[worker0] [run_tf] step 20/20" in run.stdout
    assert matches_reference(reference, "from-node1")


def test_tasks_given_tf_config_over_ssh_on_two_nodes_match_the_reference(reference):
    """TFJob's layout, each task started by ssh on its node with its own TF_CONFIG: ps and chief on node1, the
    worker on node2; the run is the reference's."""
    cluster_spec = {"ps": ["node1:12001"], "chief": ["node1:12002"], "worker": ["node2:12003"]}
    tasks = {}
    try:
        for job, node in (("ps", "node1"), ("chief", "node1"), ("worker", "node2")):
            tf_config = json.dumps({"cluster": cluster_spec, "task": {"type": job, "index": 0}})
            tasks[job] = subprocess.Popen(
                ["ssh", node, f"cd {reference} && TF_CONFIG='{tf_config}' exec {sys.executable} {REPO}/run_tf.py "
                              f"{TINY} --ckpt_dir=tf_config --run_name=tf_config"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        outputs = {job: task.communicate(timeout=300)[0] for job, task in tasks.items()}
    finally:
        for task in tasks.values():
            task.kill()
    assert all(task.returncode == 0 for task in tasks.values()), outputs
    assert "step 20/20" in outputs["chief"]
    assert matches_reference(reference, "tf_config")


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
    hosts = json.loads(open(os.path.join(reference, "results", f"{name}.hosts.json")).read())["hosts"]
    assert [h["environment"]["hostname"] for h in hosts] == ["node1", "node2"]


def test_verify_sbatch_on_two_nodes_finds_the_hybrid_identical(reference):
    # parallax alone: a parameter server and Horovod's ranks (each template is the test above)
    job = submit("verify.sbatch", reference, "--config=tiny --steps=12 --warmup_steps=2 --runs=reference,parallax "
                 "--results_dir=verified")
    state = wait_for_end(job, 600)
    assert state == ("COMPLETED", "0:0"), open(os.path.join(reference, f"{job}.out")).read()
    record = json.loads(open(os.path.join(reference, "verified", "verify.json")).read())
    assert [p["verdict"] for p in record["pairs"] if p["a"] == "reference"] == ["identical"]


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


def test_a_slurm_step_s_tasks_are_numbered_in_slurm_s_order_of_nodes(nodes, monkeypatch):
    """node9 before node10, as Slurm numbers their tasks (SlurmClusterResolver sorted the names: its task 2, on
    node10, was told node9's address)."""
    from harness.cluster_spec import from_slurm_step
    for name, value in {**SLURM, "SLURM_STEP_NODELIST": "node[9-10]", "SLURM_STEP_TASKS_PER_NODE": "2,1",
                        "SLURM_STEP_NUM_TASKS": "3", "SLURM_PROCID": "2", "SLURMD_NODENAME": "node10"}.items():
        monkeypatch.setenv(name, value)
    assert from_slurm_step(1) == ("worker", 1, ["node9:8888"], ["node9:8889", "node10:8888"])
    monkeypatch.setenv("SLURMD_NODENAME", "node9")  # --distribution=cyclic would put it there
    with pytest.raises(harness.UsageError, match="task 2 runs on node9, not where block distribution puts it"):
        from_slurm_step(1)


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
    output = open(os.path.join(shared_work, f"{job}.out")).read()
    assert "launch: task worker1 on node2 was killed by signal 9" in output
    assert no_process_left(marker, seconds=30)
    assert not os.path.exists(os.path.join(shared_work, "results", f"{marker}.json"))


def test_an_srun_client_killed_under_salloc_leaves_no_step_behind(nodes, shared_work):
    """An allocation that outlives the run (salloc, a shell in it): worker1's srun client, for node2, killed with
    -9; the launcher names the task, stops the others, and no step or process is left in the allocation."""
    marker = f"salloc-srun-{uuid.uuid4().hex[:8]}"
    launcher = (f"{sys.executable} -m launcher tf --slurm --workers=2 -- {FOREVER} --run_name={marker} "
                f"> {marker}.out 2>&1; until [ -e {marker}.done ]; do sleep 0.2; done")
    allocation = subprocess.Popen(["salloc", "--nodes=2", "--ntasks-per-node=1", "bash", "-c", launcher],
                                  cwd=shared_work, env={**SLURM, "PYTHONPATH": REPO}, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    output = os.path.join(shared_work, f"{marker}.out")
    try:
        deadline = time.monotonic() + 120
        while not (os.path.exists(output) and " step 10/" in open(output).read()):
            assert time.monotonic() < deadline and allocation.poll() is None, open(output).read()
            time.sleep(0.5)
        srun = [pid for pid in processes_with(marker) if open(f"/proc/{pid}/cmdline").read().startswith(
            "srun\0") and "--nodelist=node2" in open(f"/proc/{pid}/cmdline").read()]
        os.kill(min(srun), signal.SIGKILL)  # the client, not its helper
        deadline = time.monotonic() + 60
        while "launch: task worker1 on node2 was killed by signal 9" not in open(output).read():
            assert time.monotonic() < deadline, open(output).read()
            time.sleep(0.5)
        assert no_process_left(f"--run_name={marker}", seconds=30)
        deadline = time.monotonic() + 30  # a step whose processes are gone is Slurm's a moment longer
        while steps := subprocess.run(["squeue", "-h", "-s"], env=SLURM, capture_output=True, text=True).stdout:
            assert time.monotonic() < deadline, f"steps left in the allocation:\n{steps}"
            time.sleep(0.5)
    finally:
        open(os.path.join(shared_work, f"{marker}.done"), "w").close()  # the shell in the allocation ends
        allocation.wait(timeout=60)


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


def test_a_class_is_graded_as_one_array_job_across_the_nodes(nodes, shared_work, submitted):
    """make grade-all SLURM=1: each submission graded by a task of one array job, on a node of its own, every
    run of the student's code sandboxed there; the rerun their settings share made once (the other task waits
    for it and reads it); the gradebook gathered when both end."""
    work = Path(shared_work)
    ta = clone(REPO, work / "ta", "TA")
    for name in ("ann", "bob"):
        clone(submitted[0], work / "class" / name, name.title())
    result = subprocess.run(["make", "-s", "-o", ".venv/.setup-done", "grade-all", f"SUBMISSIONS={work / 'class'}",
                             "SLURM=1"], cwd=ta, env=SLURM, capture_output=True, text=True, timeout=1200)
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert "gradebook: 2 grades as one array job: sbatch --wait --array=0-1" in result.stdout, output
    with open(ta / "grade/gradebook.csv") as f:
        rows = {row["submission"]: row for row in csv.DictReader(f)}
    assert {name: row["verdict"] for name, row in rows.items()} == {"ann": "REPRODUCED", "bob": "REPRODUCED"}, output
    assert "shares " in rows["ann"]["copies"]  # one submission under two names
    logs = [(ta / f"grade/slurm/{task}.out").read_text() for task in (0, 1)]
    assert sorted(re.search(r"on (node\d)", log)[1] for log in logs) == ["node1", "node2"], logs
    assert sum("grade: verify: the rerun of these settings and model" in log for log in logs) == 1, logs
    assert sum(" --sandbox --sandbox_readable=" in log for log in logs) == 1, logs


def test_without_a_shared_file_system_verify_and_the_bench_take_what_the_nodes_wrote(nodes, measured_costs):
    """make cluster SHARED=0 (run after the tests on the shared cluster): each node a private copy of the
    repository, where the runs' outputs are copied back from. verify finds every run identical (the chief's
    checkpoints and results copied back from node1), each task on the node it was placed on (a probe there names
    it), Horovod's ranks over each node's own interface (eth0 there; this machine's is lstmcluster0). The bench
    runs here alone: over private copies it takes every path a shared directory's does, and the copies back. A
    Slurm job requeued onto the other node finds no checkpoint there and says so."""
    assert cluster_module("up", f"--nodes={NODES}", f"--net={NET}", "--noshared").returncode == 0
    work = shared_directory()
    try:
        for node in cluster.names(NODES):
            assert ssh(node, f"mkdir -p {work}").returncode == 0  # in its own copy
        check = make_check("HOSTS=node1:1,node2:1", cwd=work)
        assert check.returncode == 0 and check.stdout.count("workdir private") == 2, check.stdout + check.stderr
        verify = subprocess.run([sys.executable, os.path.join(REPO, "verify.py"), "--hosts=node1:1,node2:1",
                                 *TINY.split(), "--runs=reference,tf,horovod,parallax"], cwd=work,
                                capture_output=True, text=True, timeout=600)
        assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
        assert "launch: the chief's checkpoints and results copied back from node1" in verify.stderr
        record = json.loads(open(os.path.join(work, "results", "verify.json")).read())
        assert [p["verdict"] for p in record["pairs"] if p["a"] == "reference"] == ["identical"] * 3
        for run, tasks in [("tf", [["worker0", "ps0"], ["worker1"]]), ("horovod", [["worker0"], ["worker1"]])]:
            hosts = json.loads(open(os.path.join(work, "results", f"verify-{run}.hosts.json")).read())["hosts"]
            assert [(h["host"], h["tasks"], h["environment"]["hostname"]) for h in hosts] == [
                ("node1", tasks[0], "node1"), ("node2", tasks[1], "node2")]  # each node's own, by a probe there
        recorded = {h["host"]: h for h in manifest.hosts(os.path.join(work, "results"))}  # make submission's
        assert {"node1", "node2", socket.gethostname()} <= set(recorded)
        assert "verify-parallax" in recorded["node2"]["runs"]
        assert_bench_on_nodes_as_the_model_predicts(work, measured_costs)
        # A job requeued off node1 finds no checkpoint on node2 (its own copy): refused in one line, exit 2.
        job = submit("run_tf.sbatch", work, "--config=tiny --steps=40 --warmup_steps=5 --log_every=1 "
                     "--ckpt_dir=requeued --run_name=requeued", "--nodes=1", "--ntasks-per-node=2",
                     "--nodelist=node1", SAVE_EVERY="10")
        while job_state(job)[0] == "PENDING":  # once it runs on node1, whatever it wrote there stays there
            time.sleep(0.2)
        subprocess.run(["scontrol", "requeue", job], env=SLURM, check=True)
        subprocess.run(["scontrol", "update", f"jobid={job}", "nodelist=", "excnodelist=node1"], env=SLURM, check=True)
        assert wait_for_end(job, 300) == ("FAILED", "2:0")
        log = ssh("node2", f"cat {work}/{job}.out").stdout
        assert "run_tf.py: error: --resume: no complete checkpoint in requeued" in log and "Traceback" not in log
    finally:
        shutil.rmtree(work, ignore_errors=True)


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

