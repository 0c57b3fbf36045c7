"""The sparse-heavy lm1b configuration (Parallax's LM1B benchmark, scaled down) at test size, lm1b-tiny: a
sampled softmax, so both big tables get sparse gradients, and every synchronous architecture still ends
with the reference's parameters bit for bit at W = 2."""
import json
import re

import pytest

from harness import models
from launcher.tasks import TASKS_PEAK_MEMORY
from conftest import bit_identical, checkpoint_tensors, launch_and_wait, read_jsonl, train_reference

LM1B_TINY = ["--config=lm1b-tiny", "--steps=20", "--warmup_steps=5", "--log_every=10"]
SYNCHRONOUS = {  # name: (architecture, launcher flags, runner flags)
    "tf": ("tf", ["--ps=2"], ["--partitions=3"]),
    "tf_div": ("tf", ["--ps=2"], ["--partitions=3", "--partition_strategy=div"]),
    "horovod": ("horovod", [], []),
    "horovod_sparse_as_dense": ("horovod", [], ["--sparse_as_dense"]),
    "parallax": ("parallax", ["--ps=2"], ["--partitions=3"]),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("lm1b")
    train_reference(LM1B_TINY, 2, "ckpt/reference", work)
    outputs = {}
    for name, (architecture, launcher_flags, runner_flags) in SYNCHRONOUS.items():
        outputs[name] = launch_and_wait(architecture, "--workers=2", *launcher_flags, "--", *LM1B_TINY,
                                        *runner_flags, f"--run_name={name}", f"--ckpt_dir=ckpt/{name}", cwd=work)
    return work, outputs


@pytest.mark.parametrize("name", list(SYNCHRONOUS))
def test_two_workers_match_the_reference_bit_for_bit(runs, name):
    """The candidates are drawn from (seed, step) alone, so every worker's sampled softmax is a shard of the
    reference's; with partitioned tables (tf, parallax: round robin; tf_div: contiguous ranges) too, Adagrad's
    accumulators included."""
    work, _ = runs
    reference, trained = checkpoint_tensors(work / "ckpt/reference"), checkpoint_tensors(work / f"ckpt/{name}")
    lstm = models.load("lstm")
    names = list(lstm.variables(lstm.CONFIGS["lm1b-tiny"]))
    assert sorted(trained) == sorted(names + [f"{n}/Adagrad" for n in names])
    assert [n for n in reference if not bit_identical(reference[n], trained[n])] == []
    losses = [[r["loss"] for r in read_jsonl(work / f"results/{run}.jsonl")] for run in ("reference", name)]
    assert losses[0] == losses[1]


def test_the_placement_table_shows_both_tables_as_sparse_on_the_parameter_servers(runs):
    _, outputs = runs
    rows = [line.split()[2:] for line in outputs["parallax"].splitlines() if " bytes " in line]
    where = {row[0]: (row[1], row[-1]) for row in rows}
    tables = [where[f"{name}/part_{i}"] for name in ("embedding", "softmax_w", "softmax_b") for i in range(3)]
    assert {kind for kind, _ in tables} == {"sparse"}
    assert {device for _, device in tables} == {"/job:ps/task:0", "/job:ps/task:1"}
    for name in ("lstm_0/kernel", "lstm_0/bias", "lstm_0/projection"):
        assert where[name] == ("dense", "/job:worker/task:0")


def test_every_summary_reports_the_peak_resident_memory(runs):
    work, outputs = runs
    for name in SYNCHRONOUS:
        # the summary's figure is the chief's at its checkpoint: at most what the chief prints when it exits
        summary = json.loads((work / f"results/{name}.json").read_text())["peak_resident_bytes"] / 2**20
        at_exit = peaks(outputs[name])["worker0"]
        assert 50 < summary <= at_exit + 1, (name, summary, at_exit)
    rule = json.loads((work / "results/reference.json").read_text())["update_rule"]
    assert rule.startswith("Adagrad(initial_accumulator=1.0, epsilon=0.0); the global norm of lstm_0/kernel, "
                           "lstm_0/")
    # every task says it at its end, parameter servers too; the launcher shows them in one line
    assert set(peaks(outputs["tf"])) == {"ps0", "ps1", "worker0", "worker1"}
    assert "[worker0] run_tf.py: peak resident memory" not in outputs["tf"]


def peaks(output):
    """{task: MiB} from the launcher's line of its tasks' peak resident memory."""
    line = next(line for line in output.splitlines() if line.startswith(f"launch: {TASKS_PEAK_MEMORY}: "))
    return {task: float(mib.replace(",", "")) for task, mib in re.findall(r"(\w+) ([\d,]+) MiB", line)}


def test_tensorflow_s_sync_replicas_optimizer_applies_parallax_s_rule(tmp_path):
    """--sync_replicas wraps the model's own rule: Adagrad's accumulators are the model's (1.0 plus the
    squares of the applied gradients), in the checkpoint under their names, and every step trains once."""
    launch_and_wait("tf", "--workers=2", "--ps=2", "--", *LM1B_TINY, "--sync_replicas", "--partitions=3",
                    "--run_name=replicas", "--ckpt_dir=ckpt/replicas", cwd=tmp_path)
    assert [r["step"] for r in read_jsonl(tmp_path / "results/replicas.jsonl")] == list(range(20))
    trained = checkpoint_tensors(tmp_path / "ckpt/replicas")
    lstm = models.load("lstm")
    names = list(lstm.variables(lstm.CONFIGS["lm1b-tiny"]))
    assert sorted(trained) == sorted(names + [f"{n}/Adagrad" for n in names])
    for name in names:
        assert (trained[f"{name}/Adagrad"] >= 1.0).all() and (trained[f"{name}/Adagrad"] > 1.0).any(), name
