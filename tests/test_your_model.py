"""A model of the tests' own (tests/models/bag_of_words.py: no state, its own data, examples as its unit) in
every runner through the model contract alone, and the contract's bad input."""
import json
import os

import pytest

from conftest import REPO, launcher_usage_error, run_script
from harness import UsageError, runner_flags

BAG_OF_WORDS = os.path.join(REPO, "tests", "models", "bag_of_words.py")


def test_verify_finds_every_synchronous_run_identical_and_a_resumed_one_too(tmp_path):
    """make verify MODEL=tests/models/bag_of_words.py FAULTS=1 at W = 2: every synchronous pair identical, bit
    for bit, a task of each architecture killed and resumed included (a checkpoint with no state)."""
    result = run_script("verify.py", f"--model={BAG_OF_WORDS}", "--steps=8", "--warmup_steps=1", "--faults",
                        cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    verdict = json.loads((tmp_path / "results/verify.json").read_text())
    assert verdict["passed"] and verdict["match"] == "identical"
    synchronous = [p for p in verdict["pairs"] if "tf-async" not in (p["a"], p["b"])]
    assert {p["b"] for p in synchronous} >= {"tf", "horovod", "horovod-dense", "parallax", "parallax-local",
                                             "tf-fault", "horovod-fault", "parallax-fault"}
    assert all(p["identical"] for p in synchronous)
    summary = json.loads((tmp_path / "results/verify-parallax.json").read_text())
    assert summary["throughput"]["unit"] == "examples/sec" and summary["model"] == BAG_OF_WORDS
    assert summary["variables"]["embedding"]["kind"] == "sparse"
    assert summary["variables"]["output/kernel"]["kind"] == "dense"
    assert not list((tmp_path / "checkpoints/verify/tf-fault").glob("*.state.npy"))


def test_a_model_file_that_lacks_part_of_the_contract_is_named(tmp_path, assert_usage_error):
    broken = tmp_path / "broken.py"
    broken.write_text(open(BAG_OF_WORDS).read().replace("def loss(", "def forward("))
    assert_usage_error(run_script("run.py", f"--model={broken}", cwd=tmp_path), "lacks loss", "model contract")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("flags, named", [
    (["--model=nope"], "--model=nope: no such model"),
    (["--model=no/such/file.py"], "--model=no/such/file.py: no such file"),
    ([f"--model={BAG_OF_WORDS}", "--config=small"], "--config=small: model"),
    (["--model=lstm", "--config=base"], "--config=base"),
])
def test_bad_models_and_configs_are_named_by_the_flags_check(tmp_path, monkeypatch, flags, named):
    """The flags check, in this process; the test above shows run.py's one line and exit 2 for a model."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as error:
        runner_flags.parse("run", "", flags)
    assert named in str(error.value)


def test_the_launcher_checks_the_model_before_any_task_starts(tmp_path, assert_usage_error):
    assert_usage_error(launcher_usage_error("tf", ["--workers=2", "--", "--model=nope"], tmp_path), "--model=nope")
