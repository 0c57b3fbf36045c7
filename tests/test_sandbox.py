"""Strangers' code judged from outside (verify --sandbox, make grade): verify never runs the model file's code in the
process that judges, and a probe model that misbehaves in every way a sandbox must stop is contained and named,
while its honest training still reproduces."""
import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from conftest import REPO, processes_with
from harness import UsageError
from launcher import sandbox

TINY = ["--config=tiny", "--steps=8", "--warmup_steps=2", "--log_every=8"]
LSTM = open(os.path.join(REPO, "models", "lstm.py")).read()

# A model that trains differently in every process (its learning rate drawn from its process ID), and the lines
# that, in a judge that imports it, would make every pair identical.
DIFFERENT_IN_EVERY_PROCESS = """
import dataclasses as _dataclasses, os as _os
_honest_rule = update_rule
def update_rule(config):
    return _honest_rule(_dataclasses.replace(config, learning_rate=1 + _os.getpid() % 89 / 100))
"""
RIGGED = """
import sys as _sys
import checkpoints_compare as _compare
_same = {"max_abs_diff": 0.0, "max_scaled_diff": 0.0, "max_ulp": 0, "identical": True, "within_tolerance": True,
         "variables": [], "missing": [], "extra": [], "mismatched": []}
_compare.compare = lambda *args, **kwargs: dict(_same)
if hasattr(_sys.modules["__main__"], "judge"):
    _sys.modules["__main__"].judge = lambda *args: (True, "identical", None)
"""

# Every misbehaviour quietly, then the honest LSTM: its runs must still be identical to the reference.
PROBE = """
import os, socket, subprocess
def _tried(what):
    try:
        return what()
    except Exception as error:
        return repr(error)
_tried(lambda: open({home!r}, "w").write("written"))
print("probe: secret:", _tried(lambda: open({secret!r}).read()), flush=True)
print("probe: connection:", _tried(lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2)), flush=True)
subprocess.Popen(["sleep", "{marker}"], start_new_session=True)
"""


def verify(*flags, cwd):
    return subprocess.run([sys.executable, os.path.join(REPO, "verify.py"), *TINY, *flags], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_a_model_that_patches_the_judge_changes_no_verdict(tmp_path):
    """The rigged model fails as the honest one that trains differently does: verify's judging process never
    imported it (without a sandbox too: the student's own make verify)."""
    rigged = tmp_path / "rigged.py"
    rigged.write_text(LSTM + DIFFERENT_IN_EVERY_PROCESS + RIGGED)
    result = verify(f"--model={rigged}", "--runs=reference,horovod", cwd=tmp_path)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    (pair,) = json.loads((tmp_path / "results/verify.json").read_text())["pairs"]
    assert pair["verdict"].startswith(("NOT IDENTICAL", "DIFFERS")) and pair["max_abs_diff"] > 0


@pytest.fixture
def secret():
    """A file in the TA's home, which no sandbox may read."""
    path = os.path.join(os.path.expanduser("~"), f".lstm-dist-probe-secret-{os.getpid()}")
    with open(path, "w") as f:
        f.write("the TA's secret")
    yield path
    os.remove(path)


@pytest.fixture
def listener():
    """(a port on this machine's loopback, the list of connections it accepted)."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def accept():
        while True:
            try:
                accepted.append(server.accept())
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


def test_a_probe_model_is_contained_and_its_training_still_reproduces(tmp_path, secret, listener):
    port, accepted = listener
    home = os.path.join(os.path.expanduser("~"), f"lstm-dist-probe-wrote-{os.getpid()}")
    marker = f"{os.getpid() % 1000 + 98000}"
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE.format(home=home, secret=secret, port=port, marker=marker) + LSTM)
    try:
        result = verify(f"--model={probe}", "--runs=reference,horovod", "--sandbox", cwd=tmp_path)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "verify: PASSED" in result.stdout and "--sandbox" not in result.stdout  # the runs' commands: plain
        assert not os.path.exists(home)
        assert "probe: secret: FileNotFoundError" in result.stdout and "the TA's secret" not in result.stdout
        assert "probe: connection: ConnectionRefusedError" in result.stdout and not accepted
        assert f"sandbox: left running, stopped: sleep {marker}" in result.stderr
        assert not processes_with(f"sleep {marker}")
        assert sorted(os.listdir(tmp_path / "results")) == sorted(
            ["tensorboard", "verify.json", "verify-horovod.hosts.json", *[f"verify-{name}.{suffix}" for name in (
                "reference", "horovod") for suffix in ("json", "jsonl")]])  # each run's files moved from its own
    finally:
        if os.path.exists(home):
            os.remove(home)


@pytest.mark.parametrize("misbehaviour, flag, named", [
    ("import mmap; mmap.mmap(-1, 9 << 30)", "--sandbox_memory=8", "Cannot allocate memory"),
    ("import time; time.sleep(600)", "--sandbox_seconds=15", "stopped at the sandbox's time limit (15 s)")])
def test_memory_past_the_cap_and_a_run_past_the_time_limit_are_stopped_and_named(tmp_path, assert_usage_error,
                                                                                 misbehaviour, flag, named):
    probe = tmp_path / "probe.py"
    probe.write_text(misbehaviour + "\n" + LSTM)
    result = verify(f"--model={probe}", "--runs=reference,horovod", "--sandbox", flag, cwd=tmp_path)
    assert_usage_error(result, named)


def test_no_sandbox_is_one_line_unless_trusted(monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(UsageError, match="no sandbox for the student's code: bubblewrap is not installed .*TRUST=1"):
        sandbox.check()
    from assignment import grade
    assert grade.parse_flags(["--trust"]).trust
    with pytest.raises(UsageError, match="bubblewrap is not installed"):
        grade.parse_flags([])


def test_a_python_reached_through_links_outside_the_sandbox_s_folders_starts_inside_it(tmp_path):
    """A checkout whose .venv links to a lab's shared one, itself a link: the same path leads to Python inside."""
    if sandbox.unavailable():
        pytest.skip(sandbox.unavailable())
    checkout, shared = tmp_path / "checkout", tmp_path / "lab"
    checkout.mkdir(), shared.mkdir()
    (shared / "venv").symlink_to(os.path.realpath(sys.prefix))
    (checkout / ".venv").symlink_to(shared / "venv")
    python = checkout / ".venv" / "bin" / os.path.basename(sys.executable)
    box = sandbox.Sandbox([str(checkout)], [])
    assert ["--symlink", str(shared / "venv"), str(checkout / ".venv")] not in box.mounts()  # inside: as it is
    ran = box.run([str(python), "-c", "import sys, numpy; print(sys.prefix)"], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == str(checkout / ".venv"), ran.stderr
