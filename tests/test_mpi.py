"""Horovod over MPI: make run-horovod MPI=1 (python -m launcher horovod --mpi), with Debian's OpenMPI's
real mpirun and Horovod's MPI controller, on the tiny config."""
import os
import shutil
import signal
import subprocess

import pytest

from conftest import (REPO, bit_identical, missing, checkpoint_tensors, launch, launcher_usage_error, no_process_left,
                      processes_with, train_reference)

try:
    import horovod.tensorflow as hvd
    MPI_BUILT = hvd.mpi_built()
except ImportError:
    MPI_BUILT = False

@pytest.fixture(autouse=True)
def mpi():
    if not (shutil.which("mpirun") and MPI_BUILT):
        missing("needs mpirun and Horovod built with MPI (make setup, as root, installs OpenMPI and builds it)")


def test_make_run_horovod_mpi_matches_the_reference(tmp_path):
    """The make target itself (its setup prerequisite taken as done: -o), into this test's directories."""
    train_reference(["--config=tiny", "--steps=20", "--warmup_steps=5"], 2, str(tmp_path / "reference"), tmp_path)
    result = subprocess.run(["make", "-s", "-C", REPO, "-o", ".venv/.setup-done", "run-horovod", "MPI=1",
                             "WORKERS=2", "CONFIG=tiny", "STEPS=20", "WARMUP=5", f"CKPT_DIR={tmp_path / 'mpi'}",
                             f"ARGS=--results_dir={tmp_path / 'results'} --log_every=10"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[worker0] [run_horovod] step 20/20" in result.stdout  # rank 0 records, its lines untagged
    assert "@event" not in result.stdout
    expected, trained = checkpoint_tensors(tmp_path / "reference"), checkpoint_tensors(tmp_path / "mpi")
    assert sorted(expected) == sorted(trained)
    assert [name for name in expected if not bit_identical(expected[name], trained[name])] == []


def test_a_killed_rank_takes_the_run_down(tmp_path):
    marker = f"mpi-kill-{os.getpid()}"
    process = launch("horovod", "--workers=2", "--mpi", "--", "--config=tiny", "--steps=1000000", "--log_every=10",
                     f"--run_name={marker}", cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        while " step 10/" not in (line := process.stdout.readline()):
            assert line or process.poll() is None, "the run ended before step 10"
        ranks = [pid for pid in processes_with(marker)
                 if b"OMPI_COMM_WORLD_RANK=1\0" in open(f"/proc/{pid}/environ", "rb").read()]
        assert len(ranks) == 1
        os.kill(ranks[0], signal.SIGKILL)
        output = process.communicate(timeout=60)[0]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 1
    assert "process rank 1" in output and "exited on signal 9" in output  # mpirun names the rank
    assert "launch: task mpirun" in output
    assert no_process_left(marker)
    assert not os.path.exists(tmp_path / "results" / f"{marker}.json")


@pytest.mark.parametrize("flags, named", [
    (["--mpi", "--ssh_config=/dev/null", "--", "--config=tiny"], "--ssh_config: not with --mpi"),
])
def test_bad_mpi_flags_are_one_line_and_exit_2(tmp_path, assert_usage_error, flags, named):
    assert_usage_error(launcher_usage_error("horovod", flags, tmp_path), named)


def test_mpi_is_for_horovod_only(tmp_path, assert_usage_error):
    assert_usage_error(launcher_usage_error("tf", ["--mpi", "--", "--config=tiny"], tmp_path), "--mpi: only where every task is a Horovod rank (horovod)")
