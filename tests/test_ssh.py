"""The launcher's ssh starter (make run-tf HOSTS=...), against a real OpenSSH server of the tests' own that
answers on 127.0.0.1 and 127.0.0.2: two hosts, as far as ssh, the launcher and the runners can tell."""
import os
import signal

import pytest

from conftest import (bit_identical, checkpoint_tensors, is_task, kill_a_task_mid_run, launch_and_wait,
                      launcher_usage_error, long_run, no_process_left, processes_with, train_reference)

TINY = ["--config=tiny", "--steps=20", "--warmup_steps=5", "--log_every=10"]
TWO_HOSTS = "--hosts=127.0.0.1:1,127.0.0.2:1"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    work = tmp_path_factory.mktemp("ssh")
    train_reference(TINY, 2, "reference", work)
    return work


@pytest.mark.parametrize("architecture, extra", [("tf", []), ("horovod", []),
                                                 ("parallax", ["--local_aggregation=true"])])
def test_a_run_over_ssh_on_two_hosts_matches_the_reference(reference, ssh_config, architecture, extra):
    output = launch_and_wait(architecture, "--workers=2", TWO_HOSTS, f"--ssh_config={ssh_config}", "--", *TINY,
                             *extra, f"--ckpt_dir={architecture}", cwd=reference)
    assert "[worker0] [run_" in output and "step 20/20" in output
    expected, trained = checkpoint_tensors(reference / "reference"), checkpoint_tensors(reference / architecture)
    assert [n for n in expected if not bit_identical(expected[n], trained[n])] == []


def test_a_task_killed_on_its_host_takes_the_run_down(tmp_path, ssh_config):
    """The victim runs under sshd, through harness/lifeline.py; when it dies the launcher stops the other
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


@pytest.mark.parametrize("hosts, named", [("127.0.0.3:2", "host 127.0.0.3: unreachable over ssh"),
                                          ("no-such-host.invalid:2", "--hosts: unknown host no-such-host.invalid")])
def test_an_unreachable_host_is_one_line_and_exit_2(tmp_path, ssh_config, assert_usage_error, hosts, named):
    result = launcher_usage_error("tf", [f"--hosts={hosts}", f"--ssh_config={ssh_config}", "--", "--config=tiny"],
                                  tmp_path)
    assert_usage_error(result, named)


@pytest.mark.parametrize("flags, named", [
    (["--hosts=127.0.0.1:1", "--", "--config=tiny"], "--hosts: 1 slots for 2 workers"),
    (["--hosts=127.0.0.1:x", "--", "--config=tiny"], "--hosts"),
    (["--hosts=127.0.0.1:2", "--machines=2", "--", "--config=tiny"], "--machines"),
    (["--hosts=127.0.0.1:2", "--ssh_config=/no/such/file", "--", "--config=tiny"], "--ssh_config"),
])
def test_bad_host_flags_are_one_line_and_exit_2(tmp_path, assert_usage_error, flags, named):
    assert_usage_error(launcher_usage_error("tf", flags, tmp_path), named)
