"""The launcher's and verify's --slurm outside an allocation: one line, exit 2. The sbatch templates and the srun
starter run on the emulated cluster's Slurm (tests/test_cluster.py: sbatch -N 2)."""
import os
import subprocess
import sys

import pytest

from conftest import REPO, launcher_usage_error


@pytest.mark.parametrize("flags, named", [
    (["--slurm", "--", "--config=tiny"], "--slurm: not inside a Slurm allocation"),
    (["--slurm", "--hosts=127.0.0.1:2", "--", "--config=tiny"], "--hosts: not with --slurm"),
    (["--slurm", "--machines=2", "--", "--config=tiny"], "--machines"),
])
def test_bad_slurm_flags_are_one_line_and_exit_2(tmp_path, assert_usage_error, monkeypatch, flags, named):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert_usage_error(launcher_usage_error("tf", flags, tmp_path), named)


def test_verify_slurm_outside_an_allocation_is_one_line_and_exit_2(tmp_path, assert_usage_error, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    result = subprocess.run([sys.executable, os.path.join(REPO, "verify.py"), "--config=tiny", "--slurm"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert_usage_error(result, "--slurm: not inside a Slurm allocation")
