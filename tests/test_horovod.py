"""run_horovod.py through the launcher (python -m harness.launch horovod), on the tiny config."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, bit_identical, checkpoint_tensors, launch, launch_and_wait, processes_with, run_script

TINY = ["--config=tiny", "--steps=40", "--warmup_steps=5", "--log_every=10"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("horovod")
    reference = run_script("run.py", *TINY, "--emulate_workers=2", "--ckpt_dir=ckpt/reference", cwd=work)
    assert reference.returncode == 0, reference.stderr
    for name, extra in {"sparse": [], "dense": ["--sparse_as_dense"]}.items():
        output = launch_and_wait("horovod", "--workers=2", "--", *TINY, *extra, f"--run_name={name}",
                                 f"--ckpt_dir=ckpt/{name}", cwd=work)
        assert "[worker0] [run_horovod] step 40/40" in output
    return work


@pytest.mark.parametrize("path", ["sparse", "dense"])
def test_two_workers_match_the_reference_bit_for_bit(runs, path):
    reference, horovod = checkpoint_tensors(runs / "ckpt/reference"), checkpoint_tensors(runs / f"ckpt/{path}")
    assert sorted(horovod) == sorted(reference)
    assert [name for name in reference if not bit_identical(reference[name], horovod[name])] == []


@pytest.mark.parametrize("victim", ["worker1", "worker0"])
def test_a_killed_worker_takes_the_run_down(tmp_path, victim):
    marker = f"killtest-{victim}-{os.getpid()}"
    process = launch("horovod", "--workers=2", "--", "--config=tiny", "--steps=1000000", "--log_every=10",
                     f"--run_name={marker}", cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while f"[worker0] [run_horovod] step 10/" not in process.stdout.readline():
            assert process.poll() is None, process.stderr.read()
        pids = processes_with(marker)
        victim_pid = [p for p in pids if f"HOROVOD_RANK={victim[-1]}\0".encode() in
                      open(f"/proc/{p}/environ", "rb").read()]
        assert len(victim_pid) == 1, pids
        os.kill(victim_pid[0], signal.SIGKILL)
        started = time.monotonic()
        process.wait(timeout=60)
        assert time.monotonic() - started < 60
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1
    assert f"task {victim} was killed by signal 9" in process.stderr.read()
    time.sleep(0.5)
    assert processes_with(marker) == []  # no orphans
    assert not (tmp_path / "checkpoints/run_horovod/checkpoint").exists()
    assert not (tmp_path / f"results/{marker}.json").exists()


@pytest.mark.parametrize("flags, named", [
    (["--workers=3", "--", "--config=tiny"], "3 workers do not divide the global batch of 4 rows"),
    (["--workers=0", "--", "--config=tiny"], "--workers"),
    (["--", "--config=tiny", "--steps=0"], "--steps"),
    (["--", "--config=tiny", "--no_such_flag"], "--no_such_flag"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, assert_usage_error, flags, named):
    process = launch("horovod", *flags, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = process.communicate(timeout=120)
    assert_usage_error(subprocess.CompletedProcess([], process.returncode, stdout, stderr), named)
    assert stdout == ""  # no task was started


def test_without_a_usable_horovod_the_runner_says_run_make_setup(tmp_path, assert_usage_error):
    broken = tmp_path / "broken" / "horovod"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('built against another TensorFlow')\n")
    result = subprocess.run([sys.executable, os.path.join(REPO, "run_horovod.py"), "--config=tiny"], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(broken.parent)}, capture_output=True, text=True)
    assert_usage_error(result, "Horovod is not usable", "make setup")
