"""verify.py (make verify) end to end on the tiny config, with negative controls."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

TINY = ["--config=tiny", "--steps=30", "--warmup_steps=5", "--log_every=30"]


def verify(*flags, cwd):
    return subprocess.run([sys.executable, os.path.join(REPO, "verify.py"), *TINY, *flags], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


def test_every_synchronous_architecture_trains_the_reference_model(tmp_path):
    result = verify(cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "results/verify.json").read_text())
    assert report["passed"] is True
    assert [run["name"] for run in report["runs"]] == ["reference", "tf", "horovod", "horovod-dense", "parallax",
                                                       "parallax-local", "tf-async"]
    pairs = {(p["a"], p["b"]): p for p in report["pairs"]}
    for name in ["tf", "horovod", "horovod-dense", "parallax", "parallax-local"]:
        assert pairs["reference", name]["identical"] and pairs["reference", name]["max_abs_diff"] == 0
    assert ("tf", "parallax") in pairs and pairs["tf", "parallax"]["max_ulp"] == 0
    async_pair = pairs["reference", "tf-async"]  # reported, never hidden, and not part of the verdict
    assert not async_pair["within_tolerance"] and async_pair["differing_variables"]
    assert "differs, as expected (asynchronous)" in result.stdout
    assert all(run["throughput"]["median"] > 0 for run in report["runs"])


@pytest.mark.parametrize("control, run", [("--average_sparse=false", "parallax"), ("--seed=2", "horovod")])
def test_negative_controls_are_caught_and_reported_by_variable(tmp_path, control, run):
    """Summing instead of averaging, or another seed, must fail verify and name the variables."""
    result = verify(f"--runs=reference,{run}", f"--runner_args={run}={control}", cwd=tmp_path)
    assert result.returncode == 1, result.stdout[-3000:]
    report = json.loads((tmp_path / "results/verify.json").read_text())
    assert report["passed"] is False
    (pair,) = report["pairs"]
    assert "embedding" in pair["differing_variables"]
    line = [line for line in result.stdout.splitlines() if line.startswith(f"reference      {run}")][0]
    assert "DIFFERS: " in line and "embedding" in line
    assert "verify: FAILED" in result.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path, assert_usage_error):
    assert_usage_error(verify("--runs=reference,gossip", cwd=tmp_path), "--runs")
    assert_usage_error(verify("--runner_args=mpi=--x", cwd=tmp_path), "--runner_args")
