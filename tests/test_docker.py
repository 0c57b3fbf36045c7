"""make docker-verify against a real Docker engine: the image built on a base made here from Debian's packages
(no registry of images is reachable), the verify flow with every task in a container of its own, and a killed
container taking its run down.

The engine: the one that answers, else one started here (docker/engine.sh: root installs docker.io and starts
dockerd) and stopped at the end. Its images live in ~/.cache/lstm-dist/docker, so the base image and the
environment stage (Horovod, this machine's own wheel) stay for the next run on this machine: cold, this module
builds both; warm, it only adds the code. When no engine can be had the tests FAIL, saying
why: they never pass or skip silently.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import (REPO, bit_identical, checkpoint_tensors, launch, launch_and_wait, launcher_usage_error, long_run,
                      train_reference)
from launcher.tasks import TASKS_PEAK_MEMORY

# A fresh machine builds the image's base and Horovod in the first test's setup, beside another group of tests
# (make test runs two at a time): up to the build's own hour, not pytest.ini's 30 minutes.
pytestmark = pytest.mark.timeout(3600)

LABEL = "lstm-dist.run"  # launcher/starters/docker.py labels every container and network of a run with it


def docker(*args, timeout=120):
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def leftovers():
    """Containers and networks of any run still in the engine, after up to 10 s for them to go."""
    deadline = time.monotonic() + 10
    while True:
        found = (docker("ps", "--all", "--quiet", f"--filter=label={LABEL}").stdout.split() +
                 docker("network", "ls", "--quiet", f"--filter=label={LABEL}").stdout.split())
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


@pytest.fixture(scope="module")
def engine():
    started = subprocess.run(["bash", "docker/engine.sh", "start"], cwd=REPO, capture_output=True, text=True)
    if started.returncode:
        pytest.fail(f"no Docker engine could be started: {started.stderr.strip()}")
    pid = started.stdout.split()[1] if started.stdout.startswith("started") else None
    yield
    if pid:
        subprocess.run(["bash", "docker/engine.sh", "stop", pid], cwd=REPO)


@pytest.fixture(scope="module")
def image(engine):
    """The image of docker/Dockerfile on the debootstrap base, removed at the end (the base and the environment
    stage stay: they are the cache)."""
    name = f"lstm-dist-test:{os.getpid()}"
    built = subprocess.run(["bash", "docker/build.sh", name, "debootstrap"], cwd=REPO, capture_output=True,
                           text=True, timeout=3600)
    assert built.returncode == 0, built.stderr
    if "VERSION_CODENAME=bookworm" in open("/etc/os-release").read():  # the debootstrap base's release
        assert "with this machine's Horovod wheel" in built.stderr, built.stderr  # not compiled again
    yield name
    docker("rmi", "--force", name)


def test_verify_in_containers(image, tmp_path):
    """The verify flow with every task in its own container: the same table and verify.json, each
    architecture identical to the reference, run in a container too; nothing left behind. (Its variants,
    dense, local and asynchronous, are runner flags the containers pass on as they are: make verify tests them.)"""
    result = subprocess.run([sys.executable, os.path.join(REPO, "verify.py"), "--config=tiny", "--steps=20",
                             "--warmup_steps=5", "--workers=2", "--runs=reference,tf,horovod,parallax",
                             f"--docker={image}"], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert "verify: PASSED" in result.stdout
    verdict = json.loads((tmp_path / "results" / "verify.json").read_text())
    assert verdict["passed"] and verdict["match"] == "identical"
    synchronous = {run["name"] for run in verdict["runs"] if run["expected"] in ("reference", "identical")}
    assert synchronous == {"reference", "tf", "horovod", "parallax"}
    for pair in verdict["pairs"]:
        if {pair["a"], pair["b"]} <= synchronous:
            assert pair["identical"], pair
    # Each run's chief, and the reference, ran in a container: its hostname is its task's name.
    for name in synchronous:
        summary = json.loads((tmp_path / "results" / f"verify-{name}.json").read_text())
        assert summary["environment"]["hostnames"] == ["reference" if name == "reference" else "worker0"], name
    # Each task had a container of its own, on the run's network: the parameter servers' runs name ps0.
    tasks = " ".join(line for line in result.stderr.splitlines() if TASKS_PEAK_MEMORY in line)
    assert "ps0 " in tasks and "worker1 " in tasks
    assert leftovers() == []


def test_a_killed_container_takes_the_run_down(image, tmp_path):
    """docker kill of one task's container: the launcher names it and exits 1 within 60 s, and removes the
    run's other containers and its network."""
    marker = f"docker-kill-{os.getpid()}"
    with long_run("tf", marker, tmp_path, f"--docker={image}") as process:
        names = docker("ps", f"--filter=label={LABEL}", "--format={{.Names}}").stdout.split()
        assert len(names) == 3, names  # ps0, worker0, worker1
        victim = [name for name in names if name.endswith("-worker1")]
        assert len(victim) == 1, names
        assert docker("kill", victim[0]).returncode == 0
        process.wait(timeout=60)
    assert process.returncode == 1
    assert "task worker1 was killed by signal 9" in process.stderr.read()
    assert leftovers() == []


def test_a_run_in_containers_killed_and_resumed_matches_the_reference(image, tmp_path):
    """The hybrid in containers: the launcher kills the chief's `docker run` client after step 12 (its
    container's lifeline then stops the task); resumed in new containers from the checkpoint after step 10, in
    the working directory they share, the run ends as run.py's two emulated workers."""
    tiny = ["--config=tiny", "--steps=20", "--warmup_steps=5", "--save_every=10", "--ckpt_dir=ckpt"]
    train_reference(tiny[:3], 2, "reference", tmp_path)
    killed = launch("parallax", "--workers=2", f"--docker={image}", "--fault=worker0:12", "--", *tiny,
                    "--log_every=1", cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, errors = killed.communicate(timeout=600)
    assert killed.returncode == 1 and "task worker0 was killed by signal 9" in errors, errors
    assert leftovers() == []
    output = launch_and_wait("parallax", "--workers=2", f"--docker={image}", "--", *tiny, "--resume", cwd=tmp_path)
    assert "resume: from ckpt/model.ckpt-10 (after step 10)" in output
    expected, trained = checkpoint_tensors(tmp_path / "reference"), checkpoint_tensors(tmp_path / "ckpt")
    assert [name for name in expected if not bit_identical(expected[name], trained[name])] == []
    assert leftovers() == []


def test_interrupted_run_leaves_nothing(image, tmp_path):
    """Ctrl-C (SIGINT) and kill (SIGTERM) of the launcher: exit 130, every container and the network removed."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        marker = f"docker-{sig.name}-{os.getpid()}"
        with long_run("horovod", marker, tmp_path, f"--docker={image}") as process:
            assert len(docker("ps", f"--filter=label={LABEL}", "--quiet").stdout.split()) == 2
            process.send_signal(sig)
            process.wait(timeout=60)
        assert process.returncode == 130, (sig, process.stderr.read())
        assert leftovers() == [], sig


def test_bad_input_is_one_line(image, tmp_path):
    """An image the engine lacks, or a path the containers cannot see: one line, exit 2, no container."""
    for flags, why in ((["--docker=lstm-dist-no-such-image", "--"], "no image lstm-dist-no-such-image"),
                       ([f"--docker={image}", "--", "--data_path=/etc/hostname"], "outside the working directory")):
        result = launcher_usage_error("tf", ["--workers=2", *flags], tmp_path)
        assert result.returncode == 2 and why in result.stderr and len(result.stderr.splitlines()) == 1, result
    assert leftovers() == []
