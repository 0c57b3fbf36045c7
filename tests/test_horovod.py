"""run_horovod.py through the launcher (python -m launcher horovod), on the tiny config."""
import os
import subprocess
import sys

import pytest

from conftest import REPO, bit_identical, checkpoint_tensors, kill_a_task_mid_run, launcher_usage_error


@pytest.mark.parametrize("run", ["horovod", "horovod-dense"])
def test_two_workers_match_the_reference_bit_for_bit(verify_run, run):
    """The session's verify run's Horovod runs (conftest.verify_run), compared here tensor by tensor."""
    verified, _ = verify_run
    reference, horovod = (checkpoint_tensors(verified / f"checkpoints/verify/{name}") for name in ("reference", run))
    assert sorted(horovod) == sorted(reference)
    assert [name for name in reference if not bit_identical(reference[name], horovod[name])] == []


@pytest.mark.parametrize("victim", ["worker1", "worker0"])
def test_a_killed_worker_takes_the_run_down(tmp_path, victim):
    def is_rank(pid, argv):
        return f"HOROVOD_RANK={victim[-1]}\0".encode() in open(f"/proc/{pid}/environ", "rb").read()
    kill_a_task_mid_run("horovod", victim, is_rank, tmp_path)


@pytest.mark.parametrize("flags, named", [
    (["--workers=3", "--", "--config=tiny"], "3 workers do not divide the global batch of 4 rows"),
    (["--workers=0", "--", "--config=tiny"], "--workers"),
    (["--", "--config=tiny", "--steps=0"], "--steps"),
    (["--", "--config=tiny", "--no_such_flag"], "--no_such_flag"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, assert_usage_error, flags, named):
    assert_usage_error(launcher_usage_error("horovod", flags, tmp_path), named)


def test_without_a_usable_horovod_the_runner_says_run_make_setup(tmp_path, assert_usage_error):
    broken = tmp_path / "broken" / "horovod"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('built against another TensorFlow')\n")
    result = subprocess.run([sys.executable, os.path.join(REPO, "run_horovod.py"), "--config=tiny"], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(broken.parent)}, capture_output=True, text=True)
    assert_usage_error(result, "Horovod is not usable", "make setup")
