"""The emulated cluster (launcher --net, launcher/starters/netns.py): real network namespaces, veth pairs, a
bridge and htb on both ends of every link."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import (missing, is_task, kill_a_task_mid_run, launch, launcher_usage_error, long_run, no_process_left,
                      run_script)
from harness import events
from launcher.starters import netns

TINY = ["--config=tiny", "--steps=20", "--warmup_steps=5", "--log_every=5"]


@pytest.fixture(scope="module")
def namespaces():
    """Skips (saying why) where this process cannot make network namespaces."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces, veth pairs and tc need root")
    probe = f"{netns.PREFIX}-{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        missing(f"no network namespaces here: {made.stderr.strip()}")
    subprocess.run(["ip", "netns", "delete", probe], check=True)


def namespaces_of(pid):
    return [name for name in netns._our_namespaces() if name.startswith(f"{netns.PREFIX}-{pid}-")]


RECEIVE = """import socket, sys, time
server = socket.create_server(("0.0.0.0", 5001))
print("listening", flush=True)
connection, _ = server.accept()
received, first = 0, None
while chunk := connection.recv(1 << 16):
    first = first or time.perf_counter()
    received += len(chunk)
print(received, time.perf_counter() - first, flush=True)
"""
SEND = """import socket, sys
with socket.create_connection((sys.argv[1], 5001)) as connection:
    connection.sendall(bytes(int(sys.argv[2])))
"""


def transfer(cluster, source, destination, size):
    """Bits per second of payload of a `size`-byte TCP transfer from machine `source` to `destination`."""
    receiver = subprocess.Popen(["ip", "netns", "exec", cluster.namespaces[destination], sys.executable, "-c",
                                 RECEIVE], stdout=subprocess.PIPE, text=True)
    assert receiver.stdout.readline().strip() == "listening"
    subprocess.run(["ip", "netns", "exec", cluster.namespaces[source], sys.executable, "-c", SEND,
                    cluster.addresses[destination], str(size)], check=True, timeout=60)
    received, seconds = receiver.communicate(timeout=60)[0].split()
    assert int(received) == size
    return size * 8 / float(seconds)


def test_a_link_is_shaped_to_its_rate_in_each_direction(namespaces):
    """Both ends of a link hold the rate, and a transfer comes near it but never beats it. How close exactly is
    a measurement, made by make bench (bytes and step time against the model), not a test's assertion."""
    with netns.EmulatedCluster(2, netns.Link.parse("100mbit")) as cluster:
        for device, namespace in (("eth0", cluster.namespaces[0]), ("m0", cluster.switch)):  # both ends shaped
            shown = subprocess.run(["ip", "netns", "exec", namespace, "tc", "class", "show", "dev", device],
                                   capture_output=True, text=True, check=True).stdout
            assert "htb 1:1" in shown and "rate 100Mbit" in shown, shown
        rates = [transfer(cluster, 0, 1, 25_000_000), transfer(cluster, 1, 0, 25_000_000)]  # about 2 s each
    print(f"payload rates: {[f'{r / 1e6:.1f} Mbit/s' for r in rates]}")
    # TCP's payload: below the line rate, and not throttled far under it
    assert all(0.5 * 100e6 < rate <= 1.02 * 100e6 for rate in rates), rates
    assert namespaces_of(os.getpid()) == []


def test_the_switch_s_counters_count_a_transfer_as_each_machine_does(namespaces):
    """The counters the chief reads from the switch (its ports' received and sent) around a transfer: each
    machine's bytes with their headers, as the machine's own eth0 counts them."""
    def announce(name, step):  # as the chief does (recorder.py), reading the switch's counters now
        event = {"event": name, "at": time.monotonic(), "after_step": step, "ports": events.read_ports(cluster.devices)}
        counter.watch("worker0", events.MARKER + json.dumps(event), None)
    with netns.EmulatedCluster(2, netns.Link.parse("1gbit")) as cluster:
        counter = netns.ByteCounter(cluster)
        announce("measured_steps_begin", 1)
        transfer(cluster, 0, 1, 1_000_000)
        announce("measured_steps_end", 2)
        own = json.loads(netns.ip("-s", "-j", "link", "show", "eth0", namespace=cluster.namespaces[0]))[0]["stats64"]
        assert cluster.machine_counters(events.read_ports(cluster.devices))[0] == (own["tx"]["bytes"],
                                                                                  own["rx"]["bytes"])
        counted = counter.result([])
    assert counted["steps"] == 1 and counted["seconds"] > 0
    sender, receiver = counted["machines"]
    assert 1_000_000 < sender["sent_bytes_per_step"] < 1_100_000  # TCP/IP headers: a few percent
    assert 1_000_000 < receiver["received_bytes_per_step"] < 1_100_000
    assert 0 < receiver["sent_bytes_per_step"] < 100_000  # acknowledgements


def test_bad_net_flags_are_one_line_and_exit_2(tmp_path, assert_usage_error, namespaces):
    assert_usage_error(launcher_usage_error("tf", ["--net=fast", "--", *TINY], tmp_path), "--net", "100mbit")
    assert_usage_error(launcher_usage_error("tf", ["--delay=5ms", "--", *TINY], tmp_path), "--delay", "--net")
    assert_usage_error(launcher_usage_error("tf", ["--separate_ps", "--", *TINY], tmp_path), "--separate_ps")
    result = launcher_usage_error("tf", ["--net=100mbit", "--delay=-5ms", "--", *TINY], tmp_path)
    assert_usage_error(result, "--delay=-5ms", "5ms")


def test_a_delay_is_refused_where_the_kernel_has_no_netem(tmp_path, assert_usage_error, namespaces):
    with netns.EmulatedCluster(1, netns.Link.parse("100mbit")) as cluster:
        netem = subprocess.run(["ip", "netns", "exec", cluster.namespaces[0], "tc", "qdisc", "add", "dev", "lo",
                                "root", "netem", "delay", "1ms"], capture_output=True)
    if netem.returncode == 0:
        pytest.skip("this kernel has netem: --delay is honoured, not refused")
    result = launcher_usage_error("tf", ["--net=100mbit", "--delay=5ms", "--", *TINY], tmp_path)
    assert_usage_error(result, "--delay=5ms", "netem")
    assert netns.left_behind() == []


@pytest.fixture(scope="module")
def shaped_runs(tmp_path_factory, namespaces):
    """make verify NET=100mbit PS=2: every synchronous run at W = 2 with its tasks on two machines joined by
    100 Mbit/s links (a worker and a parameter server on each), and the reference."""
    work = tmp_path_factory.mktemp("netns")
    result = run_script("verify.py", *TINY, "--ps=2", "--net=100mbit",
                        "--runs=reference,tf,horovod,horovod-dense,parallax,parallax-local", cwd=work, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return work


@pytest.mark.parametrize("name", ["tf", "horovod", "horovod-dense", "parallax", "parallax-local"])
def test_every_runner_on_two_shaped_machines_matches_the_reference_bit_for_bit(shaped_runs, name):
    verdict = json.loads((shaped_runs / "results/verify.json").read_text())
    (pair,) = [p for p in verdict["pairs"] if (p["a"], p["b"]) == ("reference", name)]
    assert pair["identical"] and pair["differing_variables"] == [], pair
    (run,) = [r for r in verdict["runs"] if r["name"] == name]
    assert "--net=100mbit" in run["command"]


@pytest.mark.parametrize("name", ["tf", "horovod", "parallax"])
def test_each_machine_s_bytes_are_counted_over_the_measured_steps(shaped_runs, name):
    counted = json.loads((shaped_runs / f"results/verify-{name}.network.json").read_text())
    assert (counted["from_step"], counted["to_step"], counted["steps"]) == (5, 20, 15)
    assert counted["bits_per_second"] == 100_000_000
    servers = [[], []] if name == "horovod" else [["ps0"], ["ps1"]]  # Horovod has no parameter servers
    assert [m["tasks"] for m in counted["machines"]] == [servers[0] + ["worker0"], servers[1] + ["worker1"]]
    for machine in counted["machines"]:  # the workers exchange gradients every step: bytes both ways
        assert machine["sent_bytes_per_step"] > 1000 and machine["received_bytes_per_step"] > 1000


def test_a_killed_task_leaves_no_namespace_veth_or_process(tmp_path, namespaces):
    kill_a_task_mid_run("tf", "worker1", is_task("worker", 1), tmp_path, "--ps=2", "--net=100mbit")
    assert netns.left_behind() == []  # not "none at all": another group's run may have some
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert "eth0@" not in links and " m0@" not in links  # no end of a link ever appears outside its namespaces


def test_a_launcher_killed_with_9_is_cleaned_up_by_the_next_run(tmp_path, namespaces):
    marker = f"netns-kill9-{os.getpid()}"
    with long_run("tf", marker, tmp_path, "--ps=2", "--net=100mbit") as process:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    assert no_process_left(marker)  # the tasks die with the launcher
    left = namespaces_of(process.pid)
    assert len(left) == 3  # two machines and the switch: only the next run can remove them
    next_run = launch("tf", "--workers=2", "--net=1gbit", "--", "--config=tiny", "--steps=6", "--warmup_steps=2",
                      cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, stderr = next_run.communicate(timeout=300)
    assert next_run.returncode == 0, stderr
    # every run's cluster removes what any dead launcher left, naming it; another group's run, started meanwhile,
    # may be the one that does
    assert namespaces_of(process.pid) == [] and namespaces_of(next_run.pid) == []
    if f"left by launcher {process.pid}" in stderr:
        assert f"removed 3 network namespaces left by launcher {process.pid}, which no longer runs" in stderr
