"""make cluster (cluster/): nodes of their own on this machine (a network namespace, a host name, a /tmp, sshd each),
and runs over ssh across them (HOSTS=node1:1,node2:1) ending bit for bit as the reference. One cluster for the
module; make cluster-down must leave nothing of it."""
import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from conftest import REPO
from harness.starters.ssh import Ssh

import cluster

NODES = 2


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


@pytest.fixture
def shared_work():
    """A working directory every node sees: under the repository (a node's /tmp is its own)."""
    work = os.path.join(REPO, "checkpoints", f"cluster-test-{uuid.uuid4().hex[:8]}")
    os.makedirs(work)
    yield work
    shutil.rmtree(work, ignore_errors=True)


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
    daemons = subprocess.run(["pgrep", "-f", cluster.STATE], capture_output=True, text=True).stdout
    assert daemons == ""
