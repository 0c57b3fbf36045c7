"""verify.py (make verify) end to end on the tiny config, with negative controls."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, read_jsonl
import checkpoints_compare
from harness import UsageError
import verify as verify_module

TINY = ["--config=tiny", "--steps=30", "--warmup_steps=5", "--log_every=30"]


def verify(*flags, cwd):
    return subprocess.run([sys.executable, os.path.join(REPO, "verify.py"), *TINY, *flags], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


def test_every_synchronous_architecture_trains_the_reference_model(verify_run):
    tmp_path, result = verify_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "results/verify.json").read_text())
    assert report["passed"] is True
    assert [run["name"] for run in report["runs"]] == ["reference", "tf", "horovod", "horovod-dense", "parallax",
                                                       "parallax-local", "horovod-exact", "parallax-exact",
                                                       "tf-async", "tf-fault", "horovod-fault", "parallax-fault"]
    pairs = {(p["a"], p["b"]): p for p in report["pairs"]}
    for name in ["tf", "horovod", "horovod-dense", "parallax", "parallax-local", "horovod-exact", "parallax-exact"]:
        assert pairs["reference", name]["identical"] and pairs["reference", name]["max_abs_diff"] == 0
    assert ("tf", "parallax") in pairs and pairs["tf", "parallax"]["max_ulp"] == 0
    async_pair = pairs["reference", "tf-async"]  # reported, never hidden, and not part of the verdict
    assert not async_pair["within_tolerance"] and async_pair["differing_variables"]
    assert "differs, as expected (asynchronous)" in result.stdout
    assert "@event" not in result.stdout + result.stderr  # the launcher's lines, not the reader's
    assert report["config"]["model"] == "lstm" and len(report["config"]["model_sha256"]) == 64
    # a parameter server leaves after the chief, whose last step and cleanup still call it; a run killed on
    # purpose (its command has --fault=) may meet a dead task
    for section in result.stdout.split("\nverify: "):
        command_line = section.partition("\n")[0]
        assert " --fault=" in command_line or "Cleanup partition error" not in section, command_line
    for run in report["runs"]:  # each run's figures as its own summary has them
        summary = json.loads((tmp_path / f"results/verify-{run['name']}.json").read_text())
        assert run["throughput"] == summary["throughput"] and run["final_loss"] == summary["final_loss"]


def test_faults_kill_a_task_of_each_architecture_and_the_resumed_runs_match(verify_run):
    """verify --faults: a parameter server of tf, a worker of horovod and the chief of parallax are killed at
    steps drawn from the seed, each run is resumed from its checkpoints, and each matches the reference."""
    tmp_path, result = verify_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "results/verify.json").read_text())
    faults = {run["name"]: run["fault"] for run in report["runs"] if "fault" in run}
    assert {name: fault["task"] for name, fault in faults.items()} == {
        "tf-fault": "ps0", "horovod-fault": "worker1", "parallax-fault": "worker0"}
    for name, fault in faults.items():
        # killed after a step that is no checkpoint's, resumed from the last checkpoint before it (every 10)
        assert 10 < fault["killed_after_step"] < 30 and fault["killed_after_step"] % 10
        assert fault["resumed_at_step"] == fault["killed_after_step"] // 10 * 10
        assert f"launch: fault: killing {fault['task']} after step {fault['killed_after_step']}" in result.stderr
        assert [r["step"] for r in read_jsonl(tmp_path / f"results/verify-{name}.jsonl")] == list(range(30))
    pairs = {(p["a"], p["b"]): p for p in report["pairs"]}
    assert all(pairs["reference", name]["identical"] for name in faults)


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


@pytest.mark.parametrize("flags, named", [
    (["--runs=reference,gossip"], "--runs: unknown gossip"),
    (["--runs=reference,tf-async"], "--runs: no synchronous run"),
    (["--runs=reference,tf,tf"], "--runs: tf named twice"),
    (["--runs=tf"], "--runs: no reference"),
    (["--runner_args=mpi=--x"], "--runner_args"),
    (["--rtol=nan"], "--rtol=nan"),
    (["--atol=inf"], "--atol=inf"),
    (["--rtol=-1"], "--rtol=-1"),
    (["--hosts=h:x"], "--hosts=h:x"),
    (["--net=fast"], "--net=fast: expected a rate"),
    (["--delay=5ms"], "--delay: only with --net"),
    (["--hosts=h:1", "--net=1gbit"], "--net: not with --hosts"),
    (["--workers=3"], "3 workers do not divide the global batch of 4 rows"),
    (["--runner_args=horovod=--no_such_flag"], "run horovod: --no_such_flag: no such flag"),
    (["--runner_args=tf=--sync=maybe"], "run tf: --sync=maybe"),
    (["--faults", "--steps=3", "--warmup_steps=1"], "--faults: --steps=3"),
])
def test_bad_input_is_named_by_the_flags_check(tmp_path, monkeypatch, flags, named):
    """verify's flags check, in this process, before any run: the next test shows how verify.py reports it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as error:
        verify_module.parse_flags([*TINY, *flags])
    assert named in str(error.value)


@pytest.mark.parametrize("flags, named", [(["--rtol=nan"], "--rtol=nan"),
                                          (["--runner_args=tf=--sync=maybe"], "run tf: --sync=maybe")])
def test_bad_input_is_one_line_and_exit_2_before_any_run(tmp_path, assert_usage_error, flags, named):
    result = verify(*flags, cwd=tmp_path)
    assert_usage_error(result, named)
    assert result.stdout == ""  # no run started


def pair(identical, within_tolerance):
    return {"identical": identical, "within_tolerance": within_tolerance,
            "differing_variables": ["softmax_b", "softmax_w"],
            "outside_tolerance": [] if within_tolerance else ["softmax_w"]}


def test_with_two_workers_a_synchronous_run_must_be_identical():
    args = verify_module.parse_flags(["--config=tiny", "--workers=2"])
    assert verify_module.judge(args, "reference", "tf", pair(True, True))[0] is True
    passed, verdict, _ = verify_module.judge(args, "reference", "horovod", pair(False, True))
    assert passed is False and verdict == "NOT IDENTICAL (required with 2 workers): softmax_b, softmax_w"
    assert verify_module.judge(args, "reference", "tf-async", pair(False, False))[0] is None  # not in the verdict
    passed, verdict, _ = verify_module.judge(args, "reference", "horovod", pair(False, False))
    assert passed is False and verdict == "DIFFERS: softmax_w"


def test_the_tolerance_is_the_model_s_unless_given(tmp_path):
    assert (verify_module.parse_flags(["--model=lstm"]).rtol, verify_module.parse_flags(["--model=lstm"]).atol) == (
        checkpoints_compare.DEFAULT_RTOL, checkpoints_compare.DEFAULT_ATOL)
    mine = tmp_path / "mine.py"
    mine.write_text(open(os.path.join(REPO, "models", "lstm.py")).read() + "\nTOLERANCE = (1e-3, 1e-6)\n")
    assert (verify_module.parse_flags([f"--model={mine}"]).rtol, verify_module.parse_flags([f"--model={mine}"]).atol) \
        == (1e-3, 1e-6)
    assert verify_module.parse_flags([f"--model={mine}", "--rtol=0.5"]).rtol == 0.5


def test_with_four_workers_the_tolerance_applies_after_the_first_step_and_the_cause_is_named():
    """Horovod's own allreduce is judged where its rounding has not grown: after step 1, whatever the last step's
    difference; without a first step's checkpoint (a run of one step) at the last."""
    args = verify_module.parse_flags(["--config=tiny", "--workers=4", "--runs=reference,horovod"])
    assert verify_module.first_step_judged(args)
    passed, verdict, cause = verify_module.judge(args, "reference", "horovod",
                                                 {**pair(False, False), "first_step": pair(False, True)})
    assert (passed, verdict) == (True, "within tolerance at step 1") and "ring" in cause and "grows" in cause
    passed, verdict, _ = verify_module.judge(args, "reference", "horovod",
                                             {**pair(False, True), "first_step": pair(False, False)})
    assert (passed, verdict) == (False, "DIFFERS at step 1: softmax_w")
    passed, verdict, cause = verify_module.judge(args, "reference", "horovod", pair(False, True))
    assert (passed, verdict) == (True, "within tolerance") and "ring" in cause
    assert verify_module.judge(args, "reference", "horovod", pair(False, False))[0] is False
    one_step = verify_module.parse_flags(["--workers=4", "--steps=1", "--warmup_steps=0"])
    assert not verify_module.first_step_judged(one_step)
    assert not verify_module.first_step_judged(verify_module.parse_flags(["--workers=4", "--runs=reference,tf"]))
    for exact in ("tf", "horovod-exact", "parallax-exact"):  # runs that add in rank order: identical at any W
        passed, verdict, _ = verify_module.judge(args, "reference", exact, pair(False, True))
        assert passed is False and verdict.startswith("NOT IDENTICAL (required with 4 workers)"), exact
    strict = verify_module.parse_flags(["--config=tiny", "--workers=4", "--runs=reference,horovod",
                                        "--match=identical"])
    assert verify_module.judge(strict, "reference", "horovod", pair(False, True))[0] is False


def test_with_four_workers_the_exact_runs_are_identical_and_horovod_s_own_within_tolerance(tmp_path):
    """End to end at W = 4: the runs that add in rank order are identical to the reference, bit for bit; Horovod's
    own allreduce is within tolerance, the ring's order named as the cause."""
    result = verify("--model=transformer", "--workers=4", "--runs=reference,tf,horovod,horovod-exact,parallax-exact",
                    cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    pairs = {pair["b"]: pair for pair in json.loads((tmp_path / "results/verify.json").read_text())["pairs"]
             if pair["a"] == "reference"}
    assert {name: pairs[name]["verdict"] for name in ("tf", "horovod-exact", "parallax-exact")} == dict.fromkeys(
        ("tf", "horovod-exact", "parallax-exact"), "identical")
    assert (pairs["horovod"]["identical"], pairs["horovod"]["verdict"]) == (False, "within tolerance at step 1")
    assert pairs["horovod"]["first_step"]["within_tolerance"] and "reference and horovod after step 1" in result.stdout
    assert "ring" in pairs["horovod"]["cause"] and f"why not identical: {pairs['horovod']['cause']}" in result.stdout


# The ring's rounding grows by an amount that varies from run to run (fusion regroups it): judged at the last
# step, the exact run adding in the ring's order may be outside tolerance or only not identical. Both fail.
def test_with_four_workers_another_seed_or_order_fails(tmp_path):
    """Negative controls at W = 4, in one verify (one reference for both): Horovod's own allreduce with another
    seed is a real difference after step 1; the exact run adding in the ring's order instead fails, its variables
    named."""
    result = verify("--model=transformer", "--workers=4", "--runs=reference,horovod,horovod-exact",
                    "--runner_args=horovod=--seed=2", "--runner_args=horovod-exact=--reduction=horovod", cwd=tmp_path)
    pairs = {p["b"]: p for p in json.loads((tmp_path / "results/verify.json").read_text())["pairs"]
             if p["a"] == "reference"}
    assert result.returncode == 1 and "verify: FAILED" in result.stdout, result.stdout[-3000:]
    for run, verdicts in (("horovod", ("DIFFERS at step 1: ",)), ("horovod-exact", ("NOT IDENTICAL", "DIFFERS: "))):
        assert pairs[run]["passed"] is False and pairs[run]["verdict"].startswith(verdicts), pairs[run]
        assert pairs[run]["differing_variables"]


def test_with_three_workers_the_exact_runs_are_identical(tmp_path):
    """W = 3: chunks of unequal length in the exact reduction, a division that is not a power of two; Horovod's
    run reduces its gradients in groups of about 256 bytes (many), the hybrid's in one: the same bits."""
    result = verify("--workers=3", "--batch_size=6", "--runs=reference,tf,horovod-exact,parallax-exact",
                    "--runner_args=horovod-exact=--exact_group_bytes=256", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "results/verify.json").read_text())
    assert all(pair["verdict"] == "identical" for pair in report["pairs"]), report["pairs"]


def test_an_old_summary_is_never_taken_for_this_runs(tmp_path):
    """A run that writes its summary elsewhere (here: another --run_name) must fail verify, even though a
    summary from an earlier run lies at the path verify reads."""
    stale = tmp_path / "results" / "verify-tf.json"
    stale.parent.mkdir()
    stale.write_text(json.dumps({"checkpoint": "old", "steps": 30, "seed": 1, "config": {"name": "tiny"},
                                 "final_loss": 1.0, "throughput": {}}))
    result = verify("--runs=reference,tf", "--runner_args=tf=--run_name=elsewhere", cwd=tmp_path)
    assert result.returncode == 1
    assert "run tf finished but wrote no results/verify-tf.json" in result.stderr
    assert not (tmp_path / "results/verify.json").exists()


def test_non_finite_parameters_fail_verify(tmp_path, monkeypatch):
    """A run that diverged (NaN parameters) must fail, although NaN == NaN in the same place would compare as
    identical. The "run" here is a process that writes what a diverged run leaves."""
    monkeypatch.chdir(tmp_path)
    args = verify_module.parse_flags(["--config=tiny", "--steps=30", "--warmup_steps=5", "--runs=reference,tf"])
    writer = (f"import json, os, numpy as np, tensorflow as tf; v = tf.Variable(np.array([1.0, np.nan], np.float32)); "
              f"os.makedirs('results', exist_ok=True); "
              f"tf.train.Checkpoint(embedding=v).write('{args.ckpt_dir}/tf/model.ckpt-30'); "
              f"json.dump({{'runner': 'run_tf', 'checkpoint': '{args.ckpt_dir}/tf/model.ckpt-30', 'steps': 30, "
              f"'seed': 1, 'config': {{'name': 'tiny'}}, 'final_loss': float('nan'), 'throughput': "
              f"{{k: 0.0 for k in ('median', 'p16', 'p84', 'mean', 'median_step_seconds', 'measured_steps')}}}}, "
              f"open('results/verify-tf.json', 'w'))")
    monkeypatch.setattr(verify_module, "command", lambda args, name: [sys.executable, "-c", writer])
    with pytest.raises(verify_module.RunFailed, match="run tf diverged: final loss nan, non-finite parameters in "
                                                       "embedding"):
        verify_module.train(args, "tf")
