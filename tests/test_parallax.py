"""run_parallax.py, the hybrid runner, on the tiny config; and its placement rule on other models."""
import json

import numpy as np
import pytest
import tensorflow as tf

from harness import models
from harness.hybrid import hybrid_placement
from harness.variables import initial_value
import checkpoints_compare
from checkpoints_compare import compare
from conftest import (VERIFY_FLAGS, VERIFY_STEPS, bit_identical, checkpoint_tensors, copy_verified, is_task,
                      kill_a_task_mid_run, launch_and_wait, launcher_usage_error, read_jsonl, train_reference)
from harness import placement

STEPS = VERIFY_STEPS  # the session's verify run's, whose runs these tests read


@pytest.fixture(scope="module")
def runs(tmp_path_factory, verify_run):
    """(directory, outputs) of the runs: one parameter server, with and without local aggregation, are the
    session's verify run's (conftest.verify_run); two servers is trained here with its flags."""
    verified, _ = verify_run
    work = tmp_path_factory.mktemp("parallax")
    copy_verified(verified, work, {"reference": "reference", "one_ps": "parallax",
                                   "local_aggregation": "parallax-local"})
    outputs = {"two_ps": launch_and_wait("parallax", "--workers=2", "--ps=2", "--", *VERIFY_FLAGS, "--partitions=2",
                                         "--run_name=two_ps", "--ckpt_dir=ckpt/two_ps", cwd=work)}
    return work, outputs


@pytest.mark.parametrize("name", ["one_ps", "two_ps", "local_aggregation"])
def test_hybrid_training_matches_the_reference_bit_for_bit(runs, name):
    work, _ = runs
    reference, trained = checkpoint_tensors(work / "ckpt/reference"), checkpoint_tensors(work / f"ckpt/{name}")
    assert sorted(trained) == sorted(reference)
    assert [n for n in reference if not bit_identical(reference[n], trained[n])] == []


def test_local_aggregation_sends_one_sparse_gradient_per_machine_with_fewer_rows(runs):
    """Both workers are on this machine: worker0 sums their embedding gradients before the parameter server
    gets them, so the server receives one gradient per step, whose rows are the words either worker saw,
    once each, instead of each worker's rows."""
    work, _ = runs
    summary = json.loads((work / "results/local_aggregation.json").read_text())
    assert (summary["local_aggregation"], summary["sparse_senders"]) == (True, 1)
    assert json.loads((work / "results/one_ps.json").read_text())["sparse_senders"] == 2
    aggregated = [r["sparse_rows_received"] for r in read_jsonl(work / "results/local_aggregation.jsonl")]
    separate = [r["sparse_rows_received"] for r in read_jsonl(work / "results/one_ps.jsonl")]
    assert len(aggregated) == len(separate) == STEPS
    assert all(a <= s for a, s in zip(aggregated, separate)) and sum(aggregated) < sum(separate)


def test_local_aggregation_over_two_machines(tmp_path):
    """4 workers on two (loopback) machines: each machine's first worker sends the sum of its two workers'
    sparse gradients, so the parameter server gets 2 per step. Horovod's ring allreduce of the dense
    gradients and the machines' sums order the additions differently from the reference for 4 workers, so
    the result is within tolerance after step 1 (verify's rule: training grows that rounding, by an amount that
    varies from run to run, past any tolerance later), and finite at the last."""
    ten_steps = ["--config=tiny", "--steps=10", "--warmup_steps=2", "--save_step=1"]
    train_reference(ten_steps, 4, "reference", tmp_path)
    launch_and_wait("parallax", "--workers=4", "--machines=2", "--", *ten_steps, "--local_aggregation=true",
                    "--ckpt_dir=aggregated", cwd=tmp_path)
    assert json.loads((tmp_path / "results/run_parallax.json").read_text())["sparse_senders"] == 2
    assert compare(str(tmp_path / "reference/model.ckpt-1"), str(tmp_path / "aggregated/model.ckpt-1"))[
        "within_tolerance"]
    assert not checkpoints_compare.non_finite(str(tmp_path / "aggregated/model.ckpt-10"))


def test_workers_are_grouped_into_machines_by_host():
    assert placement.machines(["a:1", "a:2", "b:1", "b:2"]) == [[0, 1], [2, 3]]
    assert placement.machines(["127.0.0.1:5", "127.0.0.2:6", "127.0.0.1:7"]) == [[0, 2], [1]]


def test_the_embedding_lives_on_the_parameter_servers_and_the_rest_on_the_workers(runs):
    _, outputs = runs
    rows = [line.split()[2:] for line in outputs["two_ps"].splitlines() if " bytes " in line]
    where = {row[0]: (row[1], row[-1]) for row in rows}
    assert where["embedding/part_0"] == ("sparse", "/job:ps/task:0")
    assert where["embedding/part_1"] == ("sparse", "/job:ps/task:1")
    for name in ["lstm_0/kernel", "lstm_0/bias", "lstm_1/kernel", "lstm_1/bias", "softmax_w", "softmax_b"]:
        assert where[name] == ("dense", "/job:worker/task:0")


def test_summing_sparse_gradients_doubles_the_first_embedding_step(tmp_path):
    """Parallax's default (--average_sparse=false) sums the embedding's gradients over workers instead of
    averaging them: with 2 workers and no clipping (the first global norm is about 1.2, under 5), the first
    update of the embedding is twice the reference's, and every other variable's is the reference's."""
    one_step = ["--config=tiny", "--steps=1", "--warmup_steps=0"]
    train_reference(one_step, 2, "reference", tmp_path)
    launch_and_wait("parallax", "--workers=2", "--", *one_step, "--average_sparse=false", "--ckpt_dir=summed",
                    cwd=tmp_path)
    reference, summed = checkpoint_tensors(tmp_path / "reference"), checkpoint_tensors(tmp_path / "summed")
    lstm = models.load("lstm")
    initial = initial_value(lstm.variables(lstm.CONFIGS["tiny"])["embedding"], 1, "embedding")
    # Up to the rounding of the subtraction: half an ULP of values near init_scale = 0.1 is 3.7e-9.
    np.testing.assert_allclose(summed["embedding"] - initial, 2 * (reference["embedding"] - initial),
                               rtol=1e-4, atol=2e-8)
    assert np.abs(reference["embedding"] - initial).max() > 1e-4
    assert all(bit_identical(reference[n], summed[n]) for n in reference if n != "embedding")


def test_the_placement_rule_on_models_with_one_kind_of_variable():
    """Sparse is what has an IndexedSlices gradient: a model with only dense gradients degrades to pure
    allreduce (nothing on the parameter servers), one with only sparse ones to pure PS."""
    with tf.Graph().as_default():
        table = tf.Variable(np.ones([10, 3], np.float32), name="table")
        weights = tf.Variable(np.ones([3, 2], np.float32), name="weights")
        only_sparse = tf.reduce_sum(tf.nn.embedding_lookup(table, [1, 2, 1]))
        only_dense = tf.reduce_sum(tf.matmul(tf.ones([1, 3]), weights))
        assert placement.gradient_kinds(["table"], tf.gradients(only_sparse, [table])) == {"table": "sparse"}
        assert placement.gradient_kinds(["weights"], tf.gradients(only_dense, [weights])) == {"weights": "dense"}

    place = hybrid_placement({"table": "sparse", "weights": "dense"}, 2, "/job:worker/task:1")
    with tf.Graph().as_default():
        handles = [tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=shape, name=name, shared_name=name).op
                   for name, shape in [("table", [10, 3]), ("weights", [3, 2])]]
        assert [place(op) for op in handles] == ["/job:ps/task:0", "/job:worker/task:1"]
        with tf.device("/job:ps/task:1"):
            queue_op = tf.queue.FIFOQueue(1, [tf.int32]).queue_ref.op
        assert place(queue_op).startswith("/job:ps/task:1")  # an op's own device stands


@pytest.mark.parametrize("victim, job, index", [("worker1", "worker", 1), ("ps0", "ps", 0)])
def test_a_killed_task_takes_the_run_down(tmp_path, victim, job, index):
    kill_a_task_mid_run("parallax", victim, is_task(job, index), tmp_path, "--ps=1")


@pytest.mark.parametrize("flags, named", [
    (["--workers=3", "--", "--config=tiny"], "3 workers do not divide the global batch of 4 rows"),
    (["--", "--config=tiny", "--average_sparse=sometimes"], "--average_sparse"),
    (["--workers=2", "--machines=3", "--", "--config=tiny"], "--machines=3"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, assert_usage_error, flags, named):
    assert_usage_error(launcher_usage_error("parallax", flags, tmp_path), named)


def test_the_partition_search_runs_end_to_end(tmp_path):
    output = launch_and_wait("parallax", "--workers=2", "--ps=2", "--", "--config=tiny", "--steps=20",
                             "--warmup_steps=5", "--search_partitions", cwd=tmp_path)
    record = json.loads((tmp_path / "results/partition-search.json").read_text())
    assert record["partitions"][:2] == [1, 2] and len(record["median_step_seconds"]) == len(record["partitions"])
    assert f"partition search: best {record['best']} partitions" in output
    assert json.loads((tmp_path / "results/run_parallax.json").read_text())["partitions"] == record["best"]
