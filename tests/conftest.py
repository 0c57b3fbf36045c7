import glob
import json
import os
import signal
import subprocess
import sys
import time

import harness  # noqa: F401  (before TensorFlow: it fixes the kernels, as in the runners)
import numpy as np
import pytest
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(script, *flags, cwd, timeout=300):
    """Runs one of the repository's scripts in `cwd` (where its outputs go) and returns the CompletedProcess."""
    return subprocess.run([sys.executable, os.path.join(REPO, script), *flags], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def launch(architecture, *flags, cwd, env=None, **popen):
    """The launcher, as `make run-tf` and `make run-horovod` start it: python -m harness.launch ARCH FLAGS."""
    command = [sys.executable, "-m", "harness.launch", architecture, *flags]
    return subprocess.Popen(command, cwd=cwd, env={**os.environ, "PYTHONPATH": REPO, **(env or {})}, text=True,
                            **popen)


def launch_and_wait(architecture, *flags, cwd):
    """Runs the launcher to the end; returns its combined output, asserting success."""
    process = launch(architecture, *flags, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output
    return output


def processes_with(marker):
    """PIDs of processes whose command line contains `marker` (the test's own excepted)."""
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found if int(pid) != os.getpid()]


def kill_a_task_mid_run(architecture, victim, is_victim, cwd, *launcher_flags):
    """Starts a long run through the launcher, SIGKILLs the task for which is_victim(pid, argv) holds once
    training has begun, and checks that the run goes down: launcher exit 1 within 60 s, naming the task, no
    process left, no final checkpoint."""
    marker = f"{architecture}-kill-{victim}-{os.getpid()}"
    process = launch(architecture, "--workers=2", *launcher_flags, "--", "--config=tiny", "--steps=1000000",
                     "--log_every=10", f"--run_name={marker}", cwd=cwd, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)
    try:
        while "[worker0] [run_" not in (line := process.stdout.readline()) or " step 10/" not in line:
            assert process.poll() is None, process.stderr.read()
        argv = {pid: open(f"/proc/{pid}/cmdline").read().split("\0") for pid in processes_with(marker)}
        victims = [pid for pid in argv if is_victim(pid, argv[pid])]
        assert len(victims) == 1, argv
        os.kill(victims[0], signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1
    assert f"task {victim} was killed by signal 9" in process.stderr.read()
    time.sleep(0.5)
    assert processes_with(marker) == []  # no orphans
    assert not glob.glob(os.path.join(str(cwd), "checkpoints", "*", "checkpoint"))
    assert not os.path.exists(os.path.join(str(cwd), "results", marker + ".json"))


def is_task(job, index):
    """is_victim for kill_a_task_mid_run: the parameter-server runners' task `job` `index`."""
    return lambda pid, argv: f"--job_name={job}" in argv and f"--task_index={index}" in argv


def launcher_usage_error(architecture, flags, cwd):
    """The launcher's result for bad input, as a CompletedProcess, after checking that it started no task."""
    process = launch(architecture, *flags, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = process.communicate(timeout=120)
    assert stdout == ""
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def checkpoint_tensors(directory):
    """{name: array} of the latest checkpoint in `directory`."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(directory)))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.fixture
def assert_usage_error():
    """Checks a run that got bad input: exit status 2, one line naming the problem, no traceback."""
    def check(result, *words):
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert "Traceback" not in result.stderr
        for word in words:
            assert word in lines[0], lines[0]
    return check


def bit_identical(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


np.set_printoptions(precision=10)
