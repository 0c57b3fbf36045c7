"""make soak's short version (bench/soak.py): one round of every kind of crash for tf, horovod and parallax, each
resumed run ending bit for bit as an uninterrupted one, with nothing left behind."""
import json

import pytest

from conftest import run_module
from bench.soak import KINDS, RUNNERS, processes_of
from harness.checkpoints import KEEP


def test_one_round_of_every_crash_ends_as_the_uninterrupted_run(tmp_path):
    soak = run_module("bench.soak", "--rounds=1", "--config=tiny", cwd=tmp_path, timeout=1200)
    assert soak.returncode == 0, soak.stdout[-3000:] + soak.stderr
    record = json.loads((tmp_path / "results/soak.json").read_text())
    assert record["passed"] and [r["runner"] for r in record["runners"]] == list(RUNNERS)
    for runner in record["runners"]:
        assert runner["identical"] and runner["problems"] == [], runner
        assert {crash["kind"] for crash in runner["crashes"]} == set(KINDS)
        assert all(crash["killed"] for crash in runner["crashes"]), runner["crashes"]  # each fault fired
        assert 0 < runner["steps_lost"] and runner["most_checkpoints_on_disk"] <= KEEP + 1
    assert processes_of(str(tmp_path)) == []


@pytest.mark.parametrize("flags, named", [(["--runners="], "--runners="), (["--runners=tf,tf"], "--runners=tf,tf"),
                                          (["--runners=mpi"], "--runners=mpi"), (["--steps=30"], "--steps"),
                                          (["--rounds=0"], "--rounds"), (["--config=huge"], "--config")])
def test_soak_bad_input_is_one_line_and_exit_2(tmp_path, assert_usage_error, flags, named):
    assert_usage_error(run_module("bench.soak", *flags, cwd=tmp_path), named)
    assert not (tmp_path / "results").exists()
