"""run.py end to end, on the tiny config."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, bit_identical, checkpoint_tensors, read_jsonl, run_script
from harness import UsageError, runner_flags

TINY = ["--config=tiny", "--steps=60", "--warmup_steps=10", "--log_every=20"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Four runs on the tiny config: the reference twice, 2 emulated workers, another seed."""
    work = tmp_path_factory.mktemp("runs")
    flags = {"first": [], "rerun": [], "two_workers": ["--emulate_workers=2"], "other_seed": ["--seed=2"]}
    for name, extra in flags.items():
        result = run_script("run.py", *TINY, *extra, f"--run_name={name}", f"--ckpt_dir=ckpt/{name}", cwd=work)
        assert result.returncode == 0, result.stderr
    return work


def test_identical_runs_give_bit_identical_checkpoints(runs):
    first, rerun = checkpoint_tensors(runs / "ckpt/first"), checkpoint_tensors(runs / "ckpt/rerun")
    assert sorted(first) == sorted(["embedding", "lstm_0/kernel", "lstm_0/bias", "lstm_1/kernel", "lstm_1/bias",
                                    "softmax_w", "softmax_b"])
    assert all(bit_identical(first[name], rerun[name]) for name in first)
    losses = [[r["loss"] for r in read_jsonl(runs / f"results/{n}.jsonl")] for n in ("first", "rerun")]
    assert losses[0] == losses[1]


def test_emulated_workers_change_only_the_rounding(runs):
    one, two = checkpoint_tensors(runs / "ckpt/first"), checkpoint_tensors(runs / "ckpt/two_workers")
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert not all(bit_identical(one[name], two[name]) for name in one)  # two shards sum in another order


def test_another_seed_trains_another_model(runs):
    one, other = checkpoint_tensors(runs / "ckpt/first"), checkpoint_tensors(runs / "ckpt/other_seed")
    assert all(np.abs(one[name] - other[name]).max() > 1e-3 for name in one)


def test_the_loss_falls(runs):
    losses = [r["loss"] for r in read_jsonl(runs / "results/first.jsonl")]
    assert len(losses) == 60
    # From ln(200) = 5.3, a uniform guess, towards the entropy of the Zipf distribution of the corpus (4.15).
    assert losses[0] == pytest.approx(np.log(200), abs=0.05)
    assert np.mean(losses[-10:]) < min(np.mean(losses[:10]), losses[0] - 0.7)


def test_the_summary_reports_throughput_and_environment(runs):
    summary = json.loads((runs / "results/two_workers.json").read_text())
    throughput = summary["throughput"]
    assert throughput["measured_steps"] == 50 and throughput["warmup_steps"] == 10
    steps = read_jsonl(runs / "results/two_workers.jsonl")
    measured = [r["words_per_sec"] for r in steps[10:]]  # the statistics are of the steps after the warm-up
    assert throughput["median"] == pytest.approx(np.median(measured))
    assert throughput["p84"] == pytest.approx(np.percentile(measured, 84)) and throughput["p84"] > 0
    environment = summary["environment"]
    assert environment["workers"] == 2 and environment["rows_per_worker"] == 2
    assert environment["tensorflow"] == "2.15.1" and environment["intra_op_threads"] == 1
    assert summary["config"]["name"] == "tiny" and summary["steps"] == 60
    assert summary["checkpoint"].endswith("model.ckpt-60")
    assert [r["step"] for r in steps] == list(range(60))
    assert set(steps[0]) >= {"loss", "perplexity", "seconds", "words_per_sec", "grad_norm"}
    assert [f for f in os.listdir(runs / "results/tensorboard/two_workers") if f.startswith("events.out.tfevents")]


def finished_looking_outputs(directory, run_name, ckpt_dir):
    """The summary and checkpoint files a finished run leaves (empty: only their names matter here)."""
    paths = [directory / "results" / f"{run_name}.json", directory / ckpt_dir / "checkpoint",
             directory / ckpt_dir / "model.ckpt-60.index", directory / ckpt_dir / "model.ckpt-60.data-00000-of-00001"]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    return paths


def test_a_killed_run_leaves_no_finished_looking_results(tmp_path):
    """A run into the directories of a finished one first removes its checkpoint and summary."""
    stale = finished_looking_outputs(tmp_path, "first", "ckpt/first")
    process = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "run.py"), "--config=tiny", "--steps=100000", "--log_every=10",
         "--run_name=first", "--ckpt_dir=ckpt/first"], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        assert "step 10/100000" in process.stdout.readline()  # training has begun
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert [path for path in stale if path.exists()] == []


def test_a_run_that_fails_at_start_up_leaves_no_finished_looking_results(tmp_path, assert_usage_error):
    """Valid flags, then a start-up failure (a text too short for one batch): exit 2, and the outputs of the
    earlier run at the same paths are gone."""
    stale = finished_looking_outputs(tmp_path, "run", "checkpoints/run")
    (tmp_path / "short.txt").write_text("too few words\n")
    assert_usage_error(run_script("run.py", "--config=tiny", "--data_path=short.txt", cwd=tmp_path), "too few")
    assert [path for path in stale if path.exists()] == []


@pytest.mark.parametrize("flag", ["--ckpt_dir", "--results_dir"])
def test_an_output_directory_that_cannot_be_made_is_bad_input(tmp_path, assert_usage_error, flag):
    (tmp_path / "a_file").write_text("")
    result = run_script("run.py", "--config=tiny", f"{flag}=a_file/below", cwd=tmp_path)
    assert_usage_error(result, f"{flag}=a_file/below", "is not a directory")


def test_flags_from_a_flagfile_and_help(tmp_path, assert_usage_error):
    """absl's --flagfile reads flags from a file; --help and --helpfull list every flag and exit 0."""
    (tmp_path / "experiment.flags").write_text("--config=tiny\n--steps=0\n")
    assert_usage_error(run_script("run.py", "--flagfile=experiment.flags", cwd=tmp_path), "--steps=0")
    (tmp_path / "experiment.flags").write_text("--config=tiny\n--steps=3\n--warmup_steps=1\n--run_name=from_file\n")
    assert run_script("run.py", "--flagfile=experiment.flags", cwd=tmp_path).returncode == 0
    assert json.loads((tmp_path / "results/from_file.json").read_text())["steps"] == 3
    for flag in ("--help", "--helpfull"):
        result = run_script("run.py", flag, cwd=tmp_path)
        assert result.returncode == 0 and "--emulate_workers" in result.stdout and "--flagfile" in result.stdout


@pytest.mark.parametrize("flags, named", [
    (["--steps=0"], "--steps"),
    (["--steps=many"], "--steps"),
    (["--warmup_steps=-1"], "--warmup_steps"),
    (["--steps=10", "--warmup_steps=10"], "--warmup_steps=10"),
    (["--emulate_workers=3"], "3 workers"),
    (["--batch_size=6", "--emulate_workers=4"], "4 workers"),
    (["--batch_size=0"], "--batch_size"),
    (["--config=huge"], "--config"),
    (["--data_path=/no/such/corpus"], "--data_path"),
    (["--intra_op_threads=0"], "--intra_op_threads"),
    (["--seed=-1"], "--seed"),
    (["--seed=9223372036854775808"], "--seed"),  # 2**63: past the generators' int64 key
    (["--no_such_flag=1"], "--no_such_flag"),
    (["--flagfile=no/such/file"], "--flagfile"),
    (["--results_dir=/proc/results"], "--results_dir=/proc/results"),  # writable by its mode bits, not in fact
])
def test_bad_input_is_named_by_the_flags_check(tmp_path, monkeypatch, flags, named):
    """run.py's flags check, in this process: test_bad_input_is_one_line_and_exit_2 shows how run.py reports it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as error:
        runner_flags.parse("run", "", ["--config=tiny", *flags])
    assert named in str(error.value)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "results").exists()


@pytest.mark.parametrize("flags, named", [(["--steps=0"], "--steps"), (["--emulate_workers=3"], "3 workers")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, assert_usage_error, flags, named):
    result = run_script("run.py", "--config=tiny", *flags, cwd=tmp_path)
    assert_usage_error(result, named)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "results").exists()


def test_batch_size_sets_the_global_batch(tmp_path):
    result = run_script("run.py", "--config=tiny", "--steps=3", "--warmup_steps=1", "--batch_size=12",
                        "--emulate_workers=3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "results/run.json").read_text())
    assert summary["config"]["batch_size"] == 12
    steps = read_jsonl(tmp_path / "results/run.jsonl")
    assert all(r["words_per_sec"] * r["seconds"] == pytest.approx(12 * summary["config"]["num_steps"]) for r in steps)


def test_a_text_too_short_for_one_batch_is_bad_input(tmp_path, assert_usage_error):
    (tmp_path / "short.txt").write_text("too few words\n")
    result = run_script("run.py", "--config=tiny", "--data_path=short.txt", cwd=tmp_path)
    assert_usage_error(result, "too few for one batch")


def test_training_on_a_text(tmp_path):
    words = [f"w{i % 37}" for i in range(3000)]
    (tmp_path / "ptb.train.txt").write_text("\n".join(" ".join(words[i:i + 12]) for i in range(0, 3000, 12)))
    result = run_script("run.py", "--config=tiny", "--steps=20", "--warmup_steps=0", f"--data_path={tmp_path}",
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "results/run.json").read_text())["data"] == str(tmp_path)


@pytest.mark.parametrize("variable", ["HOSTS=node1:1", "NET=100mbit", "PS=2"])
def test_make_run_refuses_what_only_distributed_runs_use(tmp_path, variable):
    """make run is run.py on this machine: HOSTS, NET and PS are refused in one line, not ignored."""
    result = subprocess.run(["make", "-s", "-C", REPO, "-o", ".venv/.setup-done", "run", variable], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "make run trains on one device here" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
