"""Copied TensorFlow 2 / Keras code through the contract (harness/layers.py, docs/your-model.md "From copied code"):
the variables its layers make are the toolkit's, its dropout is keyed by row, a loss may return (sum, count); and
what it refuses, in one line."""
import dataclasses
import difflib
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, checkpoint_tensors, launch_and_wait, run_script
from harness import layers, models, update
from harness.variables import Params, StepRandom

TAGGER = os.path.join(REPO, "tests", "models", "keras_tagger.py")


@pytest.mark.parametrize("port, named", [
    ("nmt", {"encoder/gru/gru_cell/kernel": "dense", "encoder/gru/gru_cell/recurrent_kernel": "dense",
             "encoder/embedding/embeddings": "sparse", "decoder/bahdanau_attention/dense/kernel": "dense"}),
    ("bert", {"masked_language_model/embedding/embeddings": "dense",  # tied: read whole by the output layer
              "masked_language_model/embedding_1/embeddings": "sparse",
              "masked_language_model/encoder_block/multi_head_attention/query/kernel": "dense"}),
])
def test_verify_finds_a_port_of_keras_code_identical_in_every_runner(tmp_path, port, named):
    """make verify MODEL=examples/nmt.py (GRUs, attention, a masked (sum, count) loss) and examples/bert.py (multi-head
    attention, layer norm, Keras dropout, a tied embedding, AdamW) at W = 2: identical, bit for bit, in every
    runner, sparse gradients as they are and made dense (the runs' other variants are the runners' own tests)."""
    model_file = os.path.join(REPO, "examples", port + ".py")
    result = run_script("verify.py", f"--model={model_file}", "--config=tiny", "--steps=6", "--warmup_steps=1",
                        "--runs=reference,tf,horovod,horovod-dense,parallax", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    verdict = json.loads((tmp_path / "results/verify.json").read_text())
    with open(model_file, "rb") as f:  # the verdict names the model it judged, and the code
        assert (verdict["config"]["model"], verdict["config"]["model_sha256"]) == (model_file,
                                                                                  hashlib.sha256(f.read()).hexdigest())
    assert {p["b"] for p in verdict["pairs"]} == {"tf", "horovod", "horovod-dense", "parallax"}
    assert verdict["passed"] and all(p["identical"] for p in verdict["pairs"])
    variables = json.loads((tmp_path / "results/verify-parallax.json").read_text())["variables"]
    assert {name: variables[name]["kind"] for name in named} == named
    saved = checkpoint_tensors(tmp_path / "checkpoints/verify/parallax")
    assert {name + "/Adam" for name in named} <= set(saved)


@pytest.mark.parametrize("port", ["nmt", "bert"])
def test_a_port_changes_few_lines_of_the_keras_code_and_both_train_on_their_own(port):
    """The diff of examples/PORT_plain.py and examples/PORT.py, blank lines aside, is at most 6 lines, each changed
    or added line marked "toolkit:" or in a block that starts with one; both still train by their own loop."""
    plain = open(os.path.join(REPO, "examples", f"{port}_plain.py")).read().splitlines()
    ported = open(os.path.join(REPO, "examples", f"{port}.py")).read().splitlines()
    changed = [line for line in difflib.unified_diff(plain, ported, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---")) and line[1:].strip()]
    assert len(changed) <= 6, changed
    assert all("toolkit" in line for line in changed if line.startswith("+") and not line.startswith("+ "))
    for module in (f"examples.{port}_plain", f"examples.{port}"):
        trained = subprocess.run([sys.executable, "-c", f"import {module} as m; m.train(m.CONFIGS['tiny'], 60)"],
                                 cwd=REPO, capture_output=True, text=True, timeout=300)
        assert trained.returncode == 0, trained.stderr[-3000:]
        losses = [float(line.split("loss ")[1]) for line in trained.stdout.splitlines() if "loss " in line]
        assert losses[-1] < losses[0], trained.stdout


def layer_kernel(initializer, shape, seed=1):
    """The initial kernel a Dense layer with `initializer` gets inside the toolkit's loss, for inputs of shape
    [2, shape[0]]."""
    model = models.load(TAGGER)
    config = model.CONFIGS["tiny"]
    with tf.Graph().as_default():
        params = Params(model, config, seed)
        with layers.captured(params, StepRandom(seed, 0, slice(0, 2), 2), "test"):
            tf.keras.layers.Dense(shape[1], kernel_initializer=initializer)(tf.zeros([2, shape[0]]))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return session.run(params.variables["dense/kernel"])


@pytest.mark.parametrize("initializer", [
    "glorot_uniform", "glorot_normal", "he_normal", "he_uniform", "lecun_normal",
    tf.keras.initializers.RandomUniform(-0.3, 0.7), tf.keras.initializers.RandomNormal(1.0, 2.0),
    tf.keras.initializers.TruncatedNormal(0.5, 0.2), tf.keras.initializers.VarianceScaling(2.0, "fan_out", "uniform"),
    tf.keras.initializers.VarianceScaling(1.0, "fan_in", "untruncated_normal"),
    tf.compat.v1.glorot_uniform_initializer(seed=3), tf.compat.v1.random_normal_initializer(0.0, 0.3, seed=3),
])
def test_a_layer_s_weights_are_keyed_draws_of_its_own_initializer_s_kind(initializer):
    """Our draws and the initializer's own (unseeded) agree in mean, spread and range: 120,000 numbers each, so the
    spread's sampling error is 0.3%, a tenth of what is allowed."""
    shape = [400, 300]
    ours = layer_kernel(initializer, shape)
    theirs = tf.keras.initializers.get(initializer)(shape).numpy() if isinstance(initializer, str) else \
        initializer(shape).numpy()
    assert abs(ours.mean() - theirs.mean()) < 0.05 * theirs.std() + 0.01 * abs(theirs.mean())
    assert abs(ours.std() / theirs.std() - 1) < 0.03
    assert ours.min() >= theirs.min() - 0.05 * theirs.std() and ours.max() <= theirs.max() + 0.05 * theirs.std() \
        or not isinstance(initializer, (tf.keras.initializers.RandomUniform, tf.keras.initializers.TruncatedNormal))
    assert np.array_equal(ours, layer_kernel(initializer, shape)), "drawn from (seed, name): the same every time"
    assert not np.array_equal(ours, layer_kernel(initializer, shape, seed=2))


@pytest.mark.parametrize("shape", [[6, 18], [18, 6]])
def test_an_orthogonal_weight_is_orthogonal(shape):
    kernel = layer_kernel("orthogonal", shape).astype(np.float64)
    small = min(shape)
    gram = kernel @ kernel.T if shape[0] < shape[1] else kernel.T @ kernel
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-5)


@pytest.mark.parametrize("initializer, value", [("zeros", 0.0), ("ones", 1.0),
                                                (tf.keras.initializers.Constant(0.25), 0.25)])
def test_constant_initializers_are_constant(initializer, value):
    assert (layer_kernel(initializer, [3, 4]) == value).all()


def one_step(model_file, workers, cwd):
    """The variables after one step of run.py at --emulate_workers=W."""
    ckpt = f"ckpt-{os.path.basename(model_file)}-{workers}"
    result = run_script("run.py", f"--model={model_file}", "--steps=1", "--warmup_steps=0",
                        f"--emulate_workers={workers}", f"--ckpt_dir={ckpt}", f"--run_name=w{workers}", cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return checkpoint_tensors(cwd / ckpt)


def test_a_wide_keras_gru_computes_with_the_flag_s_threads_in_every_process(tmp_path):
    """Keras' GRU asks TensorFlow for GPUs when it is made, which makes the process's devices before any session: at
    width 128 a matrix product blocks its sums by the threads of that first device. run.py and run_tf.py's worker,
    whose first device is its server's, still compute one step to the same bits; two threads give other bits."""
    nmt = os.path.join(REPO, "examples", "nmt.py")
    one_step = ["--model=" + nmt, "--config=small", "--steps=1", "--warmup_steps=0"]
    for threads in (1, 2):
        result = run_script("run.py", *one_step, f"--intra_op_threads={threads}", f"--ckpt_dir=run{threads}",
                            f"--run_name=run{threads}", cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
    launch_and_wait("tf", "--workers=1", "--", *one_step, "--ckpt_dir=tf", cwd=tmp_path)
    reference, two_threads, tf_ps = (checkpoint_tensors(tmp_path / d) for d in ("run1", "run2", "tf"))
    assert any((reference[name] != two_threads[name]).any() for name in reference)
    assert all((reference[name] == tf_ps[name]).all() for name in reference)


def largest_scaled_difference(a, b):
    return max(np.abs(a[name] - b[name]).max() / np.abs(a[name]).max() for name in a if "/Adam" not in name)


def test_a_sum_and_count_loss_trains_one_model_at_any_w_where_a_shard_s_normaliser_does_not(tmp_path):
    """The tagger's masked loss as (sum, real words) is the global mean over real words at W = 1 and 2 (up to the
    order of adding the rows); divided by the shard's own count, it is another model at W = 2."""
    per_shard = tmp_path / "per_shard.py"
    source = open(TAGGER).read()
    per_shard.write_text(source.replace("return tf.reduce_sum(per_word * real), tf.reduce_sum(real)",
                                        "return tf.reduce_sum(per_word * real) / tf.reduce_sum(real)"))
    assert per_shard.read_text() != source
    token_normalised = largest_scaled_difference(one_step(TAGGER, 1, tmp_path), one_step(TAGGER, 2, tmp_path))
    shard_normalised = largest_scaled_difference(one_step(str(per_shard), 1, tmp_path),
                                                 one_step(str(per_shard), 2, tmp_path))
    assert token_normalised < 1e-5
    assert shard_normalised > 100 * max(token_normalised, 1e-7)


# The keras.io BERT example's position embedding: a layer called on tf.range while a functional model is built.
FUNCTIONAL_ON_A_RANGE = """    def functional():
        inputs = tf.keras.Input((config.length,), dtype=tf.int32)
        positions = tf.keras.layers.Embedding(config.length, config.width, name="position_embedding")(
            tf.range(start=0, limit=config.length, delta=1))
        x = tf.keras.layers.Embedding(config.vocab_size, config.width)(inputs) + positions
        return tf.keras.Model(inputs, tf.keras.layers.Dense(config.tags)(x))
    tagger = params.build(functional)"""


@pytest.mark.parametrize("port, wrong", [("nmt", False), ("bert", False), ("nmt", True)])
def test_split_check_tells_a_loss_over_the_global_batch_from_one_over_the_shard(tmp_path, port, wrong):
    """split_check.py compares step 0's gradient at W = 1 and 2 relative to the largest gradient: both ports pass
    (BERT's attention key bias, whose true gradient is zero, too), NMT divided by its shard's real words fails,
    naming its variables. On the old graph's `target != PAD` (one bool) NMT failed too: it counted every pad."""
    model_file = os.path.join(REPO, "examples", port + ".py")
    if wrong:
        source = open(model_file).read()
        model_file = tmp_path / "per_shard.py"
        model_file.write_text(source.replace("return ratio(tf.reduce_sum(per_word * real), tf.reduce_sum(real))",
                                             "return tf.reduce_sum(per_word * real) / tf.reduce_sum(real)"))
        assert model_file.read_text() != source
    result = run_script("split_check.py", f"--model={model_file}", "--config=tiny", cwd=tmp_path)
    assert result.returncode == (1 if wrong else 0), result.stdout + result.stderr[-3000:]
    table = {line.split()[0]: float(line.split()[-1]) for line in result.stdout.splitlines()[2:-1]}
    if wrong:
        assert "split_check: FAILED: splitting the batch moves " in result.stdout
        assert max(table.values()) > 1e-3
    else:
        assert "split_check: PASSED" in result.stdout and max(table.values()) < 1e-6
    if port == "bert":
        assert "masked_language_model/encoder_block/multi_head_attention/key/bias" not in table or \
            table["masked_language_model/encoder_block/multi_head_attention/key/bias"] < 1e-6


def test_copied_code_compares_tensors_element_by_element_in_the_runners_graph():
    """`x != 0` in a loss is a tensor of booleans, as in TensorFlow 2, not the graph's one bool of identity."""
    model = models.load(TAGGER)
    with tf.Graph().as_default():
        params = Params(model, model.CONFIGS["tiny"], 1)
        with layers.captured(params, StepRandom(1, 0, slice(0, 2), 2), "test"):
            words = tf.constant([3, 0, 5])
            differ, same = words != 0, words == 0
        assert (words != 0) is True  # the graph's own, outside the loss
        with tf.compat.v1.Session() as session:
            assert session.run(differ).tolist() == [True, False, True]
            assert session.run(same).tolist() == [False, True, False]


@pytest.mark.parametrize("change, named", [
    (("self.norm = tf.keras.layers.LayerNormalization()", "self.norm = tf.keras.layers.BatchNormalization()"),
     "tagger/batch_normalization/moving_mean, not trainable"),
    (("tagger = params.build(lambda: Tagger(config))", "tagger = Tagger(config)"),
     "on its second call: each call made new layers; make them once with params.build"),
    (("tf.keras.layers.Dense(config.tags)", "tf.keras.layers.Dense(config.tags, kernel_initializer=lambda s, "
                                            "dtype=None: tf.random.normal(s))"),
     "tagger/dense_1/kernel, from <lambda>, which cannot be drawn from (seed, name)"),
    (("return self.out(self.norm(self.hidden(x)))", "self.norm(x)\n        return self.out(self.hidden(x))"),
     "the loss does not depend on tagger/layer_normalization/gamma, tagger/layer_normalization/beta"),
    (("    tagger = params.build(lambda: Tagger(config))", FUNCTIONAL_ON_A_RANGE),
     "the loss does not depend on position_embedding/embeddings: every variable needs a gradient (a layer called "
     "but its output unused? or called on constants alone, as tf.range, while a functional model is built"),
    (("x = self.dropout(self.embedding(words), training=training)",
      "x = tf.transpose(self.dropout(tf.transpose(self.embedding(words), [1, 0, 2]), training=training), [1, 0, 2])"),
     "dropout on a tensor of shape (6, 2, 8): its first dimension must be the batch's 2 rows"),
])
def test_what_the_toolkit_cannot_make_its_own_is_refused_in_one_line(tmp_path, assert_usage_error, change, named):
    mistaken = tmp_path / "mistaken.py"
    source = open(TAGGER).read()
    mistaken.write_text(source.replace(*change))
    assert mistaken.read_text() != source
    result = run_script("run.py", f"--model={mistaken}", "--steps=2", "--warmup_steps=1", "--emulate_workers=2",
                        cwd=tmp_path)
    assert_usage_error(result, f"--model={mistaken}: ", named)
    assert not (tmp_path / "results").exists() and not (tmp_path / "checkpoints").exists()


def test_a_layer_s_table_stays_whole_where_declared_tables_are_split():
    """--partitions splits the sparse variables declared in variables(); a layer reads its own whole, so the
    tagger's embedding stays one variable (placed by size), and the update treats it as whole."""
    model = models.load(TAGGER)
    config = model.CONFIGS["tiny"]
    with tf.Graph().as_default():
        params = Params(model, config, 1, ["tagger/embedding/embeddings"], partitions=2)
        with layers.captured(params, StepRandom(1, 0, slice(0, 4), 4), "test"):
            params.build(lambda: model.Tagger(config))(tf.zeros([4, config.length], tf.int32))
        assert isinstance(params.variables["tagger/embedding/embeddings"], tf.Variable)
        assert params.partitioned == ()


def test_tensorflow_1_get_variable_in_copied_code_is_the_toolkit_s_too():
    """tf.compat.v1.get_variable inside loss (TensorFlow 1 code), its default glorot_uniform and a zeros one: model
    variables named by their scope, drawn from (seed, name) with their initializer's spread."""
    model = models.load(TAGGER)
    with tf.Graph().as_default():
        params = Params(model, model.CONFIGS["tiny"], 1)
        with layers.captured(params, StepRandom(1, 0, slice(0, 2), 2), "test"):
            with tf.compat.v1.variable_scope("copied"):
                tf.compat.v1.get_variable("w", [300, 200])
                tf.compat.v1.get_variable("b", [200], initializer=tf.compat.v1.zeros_initializer())
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            w, b = session.run([params.variables["copied/w"], params.variables["copied/b"]])
    assert list(params.specs) == ["copied/w", "copied/b"]
    assert abs(w.std() / np.sqrt(6 / 500 / 3) - 1) < 0.03 and np.abs(w).max() <= np.sqrt(6 / 500)
    assert (b == 0).all()


def ancestors(op):
    """Every op `op` waits for, through inputs and control inputs."""
    seen, todo = set(), [op]
    while todo:
        op = todo.pop()
        if op not in seen:
            seen.add(op)
            todo += [t.op for t in op.inputs] + list(op.control_inputs)
    return seen


def test_run_tf_s_update_neither_waits_for_nor_uses_the_worker_s_read():
    """run_tf.py reads each whole variable once a step on its worker (caching_device). The chief's update, on the
    servers, must neither wait for that read nor use it (either pulls every variable to the chief again each step),
    with AdamW too, whose update reads the variable."""
    model = models.load(TAGGER)
    config = model.CONFIGS["tiny"]
    with tf.Graph().as_default():
        with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=1,
                                                                           worker_device="/job:worker/task:0")):
            params = Params(model, config, 1, reads_on="/job:worker/task:0")
            params.rule = dataclasses.replace(params.rule, optimizer=update.Adam(weight_decay=0.01))
            with layers.captured(params, StepRandom(1, 0, slice(0, 4), 4), "test"):
                params.build(lambda: model.Tagger(config))(tf.zeros([4, config.length], tf.int32))
            with tf.compat.v1.device(None):  # (not the worker's: what the update waits for on it is the point)
                gradients = [tf.zeros(variable.shape) for variable in params.variable_list]
                learning_rate, step = tf.constant(0.1), tf.constant(0, tf.int64)
            train_op, _ = update.update(params, gradients, learning_rate, step)
    assert len(params.variables) > 3
    # (TensorFlow runs a ReadVariableOp where its variable is, whatever device it was built under)
    assert not [op.name for op in ancestors(train_op)
                if op.device.startswith("/job:worker") and op.type != "ReadVariableOp"]


@pytest.mark.parametrize("whole, server_lookups", [((), 1), (("tagger/embedding/embeddings",), 0)])
def test_a_variable_read_whole_is_looked_up_in_that_read(whole, server_lookups):
    """run_tf.py reads a variable with a dense gradient (a tied embedding) whole, once a step on its worker; its
    lookups (Keras' Embedding's, params.gather's) then gather from that read instead of pulling rows again."""
    model = models.load(TAGGER)
    config = model.CONFIGS["tiny"]
    with tf.Graph().as_default() as graph:
        with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=1,
                                                                           worker_device="/job:worker/task:0")):
            params = Params(model, config, 1, reads_on="/job:worker/task:0", whole=whole)
            with layers.captured(params, StepRandom(1, 0, slice(0, 4), 4), "test"):
                params.build(lambda: model.Tagger(config))(tf.zeros([4, config.length], tf.int32))
    assert len([op for op in graph.get_operations() if op.type == "ResourceGather"]) == server_lookups
