"""The launcher's ssh starter (make run-tf HOSTS=...), against a real OpenSSH server of the tests' own that
answers on 127.0.0.1 and 127.0.0.2: two hosts, as far as ssh, the launcher and the runners can tell."""
import os
import signal
import subprocess
import sys

import pytest

from conftest import (REPO, bit_identical, checkpoint_tensors, is_task, kill_a_task_mid_run, launch,
                      launch_and_wait, launcher_usage_error, long_run, no_process_left, processes_with, train_reference)

TINY = ["--config=tiny", "--steps=20", "--warmup_steps=5", "--log_every=10"]
TWO_HOSTS = "--hosts=127.0.0.1:1,127.0.0.2:1"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    work = tmp_path_factory.mktemp("ssh")
    train_reference(TINY[:3], 2, "reference", work)  # the flags that set the checkpoint
    return work


def test_a_run_over_ssh_on_two_hosts_matches_the_reference(reference, ssh_config):
    """The hybrid with local aggregation: parameter servers, Horovod's ranks and the hosts as machines, over ssh.
    Every runner across two real nodes: test_cluster.py (as root)."""
    output = launch_and_wait("parallax", "--workers=2", TWO_HOSTS, f"--ssh_config={ssh_config}", "--", *TINY,
                             "--local_aggregation=true", "--ckpt_dir=parallax", cwd=reference)
    assert "[worker0] [run_" in output and "step 20/20" in output
    expected, trained = checkpoint_tensors(reference / "reference"), checkpoint_tensors(reference / "parallax")
    assert [n for n in expected if not bit_identical(expected[n], trained[n])] == []


def test_a_run_over_ssh_killed_and_resumed_matches_the_reference(reference, ssh_config):
    """Horovod over ssh: the launcher kills worker1 (its ssh connection; lifeline.py stops the task on its host)
    after step 13; resumed on the same hosts from the checkpoint after step 10, the run ends as the reference."""
    hosts = ["--workers=2", TWO_HOSTS, f"--ssh_config={ssh_config}"]
    checkpoints = ["--ckpt_dir=horovod-resumed", "--save_every=10", "--run_name=resumed"]
    killed = launch("horovod", *hosts, "--fault=worker1:13", "--", *TINY, *checkpoints, "--log_every=1",
                    cwd=reference, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, errors = killed.communicate(timeout=600)
    assert killed.returncode == 1 and "task worker1 on 127.0.0.2 was killed by signal 9" in errors, errors
    output = launch_and_wait("horovod", *hosts, "--", *TINY, *checkpoints, "--resume", cwd=reference)
    assert "resume: from horovod-resumed/model.ckpt-10 (after step 10)" in output
    expected, trained = checkpoint_tensors(reference / "reference"), checkpoint_tensors(reference / "horovod-resumed")
    assert [n for n in expected if not bit_identical(expected[n], trained[n])] == []


def test_a_task_killed_on_its_host_takes_the_run_down(tmp_path, ssh_config):
    """The victim runs under sshd, through launcher/lifeline.py; when it dies the launcher stops the other
    tasks by closing their connections, and their hosts stop them."""
    def is_remote_worker1(pid, argv):
        parent = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
        return is_task("worker", 1)(pid, argv) and "lifeline.py" in open(f"/proc/{parent}/cmdline").read()
    kill_a_task_mid_run("tf", "worker1", is_remote_worker1, tmp_path, TWO_HOSTS, f"--ssh_config={ssh_config}")


def test_interrupting_the_launcher_stops_the_tasks_on_their_hosts(tmp_path, ssh_config):
    marker = f"ssh-interrupt-{os.getpid()}"
    with long_run("tf", marker, tmp_path, TWO_HOSTS, f"--ssh_config={ssh_config}") as process:
        argv = [open(f"/proc/{pid}/cmdline").read().split("\0") for pid in processes_with(marker)]
        assert len([a for a in argv if a[0] == "ssh"]) == len([a for a in argv if a[1].endswith("lifeline.py")]) == 3
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130
    assert no_process_left(marker)


def test_lifeline_stops_its_task_when_the_heartbeats_stop(tmp_path):
    """The host side of a cut-off network: the connection stays open but silent, and lifeline.py stops the
    task after LIFELINE_SILENCE_SECONDS."""
    lifeline = subprocess.Popen([sys.executable, os.path.join(REPO, "launcher", "lifeline.py"), "sleep", "120"],
                                stdin=subprocess.PIPE, env={**os.environ, "LIFELINE_SILENCE_SECONDS": "2"})
    try:
        assert lifeline.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        lifeline.kill()


def test_a_host_without_the_working_directory_is_refused_where_results_are_read_back(
        tmp_path, ssh_config, host_without_this_workdir, assert_usage_error):
    """The partition search reads the chief's results from the working directory while it runs (as make bench
    HOSTS= does): a chief's host that does not share it is one line and exit 2 before anything starts."""
    hosts = f"--hosts={host_without_this_workdir}:2"
    for architecture, flags in (("tf", ["--require_shared_workdir", "--", "--config=tiny"]),
                                ("parallax", ["--", "--config=tiny", "--search_partitions"])):
        result = launcher_usage_error(architecture, [hosts, f"--ssh_config={ssh_config}", *flags], tmp_path)
        assert_usage_error(result, f"{host_without_this_workdir}: does not see this working directory")


@pytest.mark.parametrize("hosts, named", [("127.0.0.3:2", "127.0.0.3: unreachable over ssh"),
                                          ("no-such-host.invalid:2", "--hosts: unknown host no-such-host.invalid")])
def test_an_unreachable_host_is_one_line_and_exit_2(tmp_path, ssh_config, assert_usage_error, hosts, named):
    result = launcher_usage_error("tf", [f"--hosts={hosts}", f"--ssh_config={ssh_config}", "--", "--config=tiny"],
                                  tmp_path)
    assert_usage_error(result, named)


@pytest.mark.parametrize("flags, named", [
    (["--hosts=127.0.0.1:1", "--", "--config=tiny"], "--hosts: 1 slots for 2 workers"),
    (["--hosts=localhost:1,198.18.0.2:1", "--", "--config=tiny"], "--hosts: localhost means each host itself"),
    (["--hosts=127.0.0.1:x", "--", "--config=tiny"], "--hosts"),
    (["--hosts=127.0.0.1:2", "--machines=2", "--", "--config=tiny"], "--machines"),
    (["--hosts=127.0.0.1:2", "--ssh_config=/no/such/file", "--", "--config=tiny"], "--ssh_config"),
])
def test_bad_host_flags_are_one_line_and_exit_2(tmp_path, assert_usage_error, flags, named):
    assert_usage_error(launcher_usage_error("tf", flags, tmp_path), named)
