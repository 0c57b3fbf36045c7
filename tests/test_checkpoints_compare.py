"""checkpoints_compare on small hand-made checkpoints: the Python API for the numbers, the CLI for exit
statuses, output and errors."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from checkpoints_compare import CheckpointError, compare, load
from checkpoints_compare.compare import main
from conftest import REPO


def reference_variables():
    rng = np.random.default_rng(0)
    return {"embedding": rng.standard_normal((6, 4)).astype(np.float32),
            "lstm_0/kernel": rng.standard_normal((8, 16)).astype(np.float32),
            "lstm_0/bias": np.zeros(16, np.float32),
            "global_step": np.int64(300)}


def save(directory, variables):
    """Writes `variables` ({name: value}) as training does (Saver, plain names) and returns the prefix."""
    with tf.Graph().as_default():
        saved = {name: tf.compat.v1.Variable(value, name=name.replace("/", "_")) for name, value in variables.items()}
        saver = tf.compat.v1.train.Saver(saved)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return saver.save(session, os.path.join(directory, "model.ckpt"), global_step=300)


def changed(**replacements):
    return {**reference_variables(), **replacements}


def one_ulp_up():
    kernel = reference_variables()["lstm_0/kernel"].copy()
    kernel[1, 2] = np.nextafter(kernel[1, 2], np.float32(np.inf))
    return changed(**{"lstm_0/kernel": kernel})


@pytest.fixture
def checkpoint(tmp_path):
    """save(), each checkpoint in a directory of its own under tmp_path."""
    def make(name, variables):
        return save(str(tmp_path / name), variables)
    return make


def cli(*args):
    return subprocess.run([sys.executable, "-m", "checkpoints_compare", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_identical(checkpoint):
    result = compare(checkpoint("ref", reference_variables()), checkpoint("same", reference_variables()))
    assert result["verdict"] == "identical" and result["identical"] and result["within_tolerance"]
    assert (result["max_abs_diff"], result["max_scaled_diff"], result["max_ulp"]) == (0, 0, 0)
    assert [v["name"] for v in result["variables"]] == ["embedding", "global_step", "lstm_0/bias", "lstm_0/kernel"]
    assert all(v["differing"] == 0 for v in result["variables"])


def test_one_ulp_is_within_default_tolerance_but_not_identical(checkpoint):
    reference, other = checkpoint("ref", reference_variables()), checkpoint("ulp", one_ulp_up())
    result = compare(reference, other)
    assert result["verdict"] == "within_tolerance" and not result["identical"]
    assert result["max_ulp"] == 1 and 0 < result["max_scaled_diff"] < 1e-6
    kernel = {v["name"]: v for v in result["variables"]}["lstm_0/kernel"]
    assert (kernel["differing"], kernel["size"], kernel["max_ulp"]) == (1, 128, 1)
    assert compare(reference, other, rtol=0, atol=0)["verdict"] == "differs"


def test_tolerance_is_relative_to_the_variable_s_largest_magnitude(checkpoint):
    """An element near zero may differ by the rounding noise of its variable's scale, not of its own; a
    difference beyond that scale's rtol is outside."""
    embedding = reference_variables()["embedding"]
    embedding[0, 0] = 1e-4
    scale = np.abs(embedding).max()
    reference = checkpoint("ref", changed(embedding=embedding))
    for name, shift, verdict in (("noise", 0.5e-5 * scale, "within_tolerance"), ("far", 2e-5 * scale, "differs")):
        shifted = embedding.copy()
        shifted[0, 0] += shift  # far beyond rtol of the element itself either way
        result = compare(reference, checkpoint(name, changed(embedding=shifted)))
        assert result["verdict"] == verdict
        assert result["max_scaled_diff"] == pytest.approx(shift / scale, rel=1e-3)  # what rtol bounds


def test_large_difference_and_step_counter_differ(checkpoint):
    embedding = reference_variables()["embedding"] + 0.5
    result = compare(checkpoint("ref", reference_variables()),
                     checkpoint("far", changed(embedding=embedding, global_step=np.int64(301))))
    assert result["verdict"] == "differs"
    outside = {v["name"]: v for v in result["variables"] if not v["within_tolerance"]}
    assert sorted(outside) == ["embedding", "global_step"]
    assert outside["embedding"]["differing"] == 24
    assert math.isclose(outside["embedding"]["max_abs_diff"], 0.5, rel_tol=1e-6)
    assert outside["global_step"]["max_abs_diff"] == 1 and outside["global_step"]["max_ulp"] is None


def test_nan_equals_nan_in_the_same_place_only(checkpoint):
    with_nan = reference_variables()["lstm_0/bias"].copy()
    with_nan[3] = np.nan
    reference = checkpoint("ref", changed(**{"lstm_0/bias": with_nan}))
    assert compare(reference, checkpoint("nan", changed(**{"lstm_0/bias": with_nan})))["verdict"] == "identical"

    result = compare(reference, checkpoint("number", reference_variables()))
    bias = {v["name"]: v for v in result["variables"]}["lstm_0/bias"]
    assert result["verdict"] == "differs" and bias["differing"] == 1
    assert bias["max_abs_diff"] == bias["max_scaled_diff"] == bias["max_ulp"] == math.inf


def test_signed_zeros_and_ulps_across_zero(checkpoint):
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    reference = checkpoint("ref", {"x": np.array([0.0, 0.0, -tiny], np.float32)})
    result = compare(reference, checkpoint("other", {"x": np.array([-0.0, 0.0, tiny], np.float32)}))
    assert result["variables"][0]["differing"] == 1 and result["max_ulp"] == 2  # -tiny, (+-0), +tiny


def test_missing_extra_and_mismatched_variables(checkpoint):
    variables = reference_variables()
    del variables["embedding"]
    variables["softmax_b"] = np.zeros(6, np.float32)
    variables["lstm_0/kernel"] = np.zeros((8, 8), np.float32)
    variables["lstm_0/bias"] = np.zeros(16, np.float64)
    result = compare(checkpoint("ref", reference_variables()), checkpoint("other", variables))
    assert result["verdict"] == "differs"
    assert (result["missing"], result["extra"]) == (["embedding"], ["softmax_b"])
    assert result["mismatched"] == [
        {"name": "lstm_0/bias", "reference_shape": [16], "shape": [16], "reference_dtype": "float32",
         "dtype": "float64"},
        {"name": "lstm_0/kernel", "reference_shape": [8, 16], "shape": [8, 8], "reference_dtype": "float32",
         "dtype": "float32"}]
    assert [v["name"] for v in result["variables"]] == ["global_step"]


def test_directory_prefix_and_file_paths_resolve(checkpoint):
    prefix = checkpoint("ref", reference_variables())
    directory = os.path.dirname(prefix)
    assert load(directory) == load(prefix) == load(prefix + ".index") == prefix
    os.remove(os.path.join(directory, "checkpoint"))  # no state file: the one *.index file is the checkpoint
    assert load(directory) == prefix


@pytest.mark.parametrize("args, words", [
    (["{tmp}/absent", "{tmp}/absent"], ["absent", "no such"]),
    (["{tmp}", "{tmp}"], ["no single checkpoint"]),  # a directory without checkpoints
    (["{tmp}/notes.txt", "{tmp}/notes.txt"], ["notes.txt", "not a readable checkpoint"]),
    (["only_one"], ["required"]),
    (["a", "b", "--rtol=-1"], ["--rtol"]),
    (["a", "b", "--atol=x"], ["--atol"]),
])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, args, words):
    (tmp_path / "notes.txt").write_text("not a checkpoint\n")
    with pytest.raises(SystemExit) as exit_:
        main([arg.format(tmp=tmp_path) for arg in args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("checkpoints_compare: error: ") and all(word in err for word in words), err


def test_load_raises_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="absent"):
        load(str(tmp_path / "absent"))


def test_cli_several_checkpoints_table(checkpoint):
    reference = checkpoint("ref", reference_variables())
    same, ulp = checkpoint("same", reference_variables()), checkpoint("ulp", one_ulp_up())
    result = cli(os.path.dirname(reference), os.path.dirname(same), ulp)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("IDENTICAL") == 1 and "WITHIN TOLERANCE (rtol=1e-05, atol=1e-07)" in result.stdout
    assert "lstm_0/kernel" in result.stdout and "1/128" in result.stdout

    far = checkpoint("far", changed(embedding=reference_variables()["embedding"] * 2))
    result = cli(reference, ulp, far, "--rtol=0", "--atol=0")
    assert result.returncode == 1, result.stderr
    verdicts = [line for line in result.stdout.splitlines() if line.startswith("DIFFERS")]
    assert verdicts == ["DIFFERS: outside rtol=0, atol=0: lstm_0/kernel",
                        "DIFFERS: outside rtol=0, atol=0: embedding"]


def test_cli_json(checkpoint):
    with_nan = reference_variables()["lstm_0/bias"].copy()
    with_nan[0] = np.nan
    other = checkpoint("other", changed(**{"lstm_0/bias": with_nan}))
    result = cli(checkpoint("ref", reference_variables()), other, "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] is False and (report["rtol"], report["atol"]) == (1e-5, 1e-7)
    [checked] = report["checkpoints"]
    assert checked["path"] == other and checked["verdict"] == "differs"
    assert checked["max_abs_diff"] == checked["max_ulp"] == "inf"
    assert set(checked["variables"][0]) == {"name", "shape", "dtype", "max_abs_diff", "max_scaled_diff", "max_ulp",
                                            "differing", "size", "identical", "within_tolerance"}


def test_cli_bad_checkpoint_exits_2_with_one_line(checkpoint, tmp_path, assert_usage_error):
    result = cli(checkpoint("ref", reference_variables()), str(tmp_path / "absent"))
    assert_usage_error(result, "error", "absent")
