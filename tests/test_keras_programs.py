"""Keras programs as tutorials publish them (harness/keras_program.py, docs/your-model.md "Keras programs"): a
model.fit program with one marked line, Sequential and functional models, compile's loss and optimizer mapped to the
toolkit's rules, its arrays batched by step; and the layers' defaults the runners once refused."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, checkpoint_tensors, launch_and_wait, read_jsonl, run_script
from harness import UsageError, keras_program, layers, models, update
from harness.variables import Params, StepRandom

FIT_PROGRAMS = {
    # the tutorial "Text classification with an RNN": Sequential, Embedding(mask_zero), Bidirectional(LSTM) with
    # its default unit_forget_bias, Dropout after Keras' symbolic build, numpy's int64 ids, validation_split
    "rnn": os.path.join(REPO, "tests", "models", "keras_fit_rnn.py"),
    # Keras' "Text classification with Transformer": functional, custom layers (one whose call needs `training`),
    # a position embedding of tf.range, compile by names ("adam", "sparse_categorical_crossentropy")
    "transformer": os.path.join(REPO, "tests", "models", "keras_fit_transformer.py"),
    # Keras' "Masked Language Modeling with BERT": a functional model calling layers.MultiHeadAttention, a residual
    # `query + attention_output` of Keras tensors, Adam made before compile, a dataset with sample weights
    "masked_lm": os.path.join(REPO, "tests", "models", "keras_fit_masked_lm.py"),
    # Keras' "sequence-to-sequence Transformer": custom layers building a causal mask with tf.shape, tf.range,
    # tf.reshape and tf.tile, masks from compute_mask, two models called in a third, compile's metrics
    "seq2seq": os.path.join(REPO, "tests", "models", "keras_fit_seq2seq_transformer.py"),
    # The tf.keras.layers.Attention docstring's CNN+Attention network: two Inputs, a shared Embedding, Conv1D,
    # Attention, GlobalAveragePooling1D, Concatenate
    "attention": os.path.join(REPO, "tests", "models", "keras_fit_attention.py"),
    # Keras' "Character-level recurrent sequence-to-sequence model": LSTMs with return_state and initial_state
    "char_seq2seq": os.path.join(REPO, "tests", "models", "keras_fit_char_seq2seq.py"),
    # Keras' "Sequence to sequence learning for performing number addition": Sequential, RepeatVector, fit in a
    # loop over epochs
    "addition": os.path.join(REPO, "tests", "models", "keras_fit_addition.py"),
    # Keras' "Timeseries forecasting for weather prediction": timeseries_dataset_from_array, its first batch read
    # (`for batch in dataset_train.take(1)`) for the Input's shape, callbacks
    "timeseries": os.path.join(REPO, "tests", "models", "keras_fit_timeseries.py"),
    # TensorFlow's "Text generation with an RNN": StringLookup, .numpy() and a dataset's batches read while the
    # data is made, a subclassed GRU model called on an example batch before summary()
    "text_generation": os.path.join(REPO, "tests", "models", "keras_fit_text_generation.py"),
    # Keras' "Text classification from scratch": TextVectorization adapted and mapped over the dataset, Conv1D
    "conv1d_text": os.path.join(REPO, "tests", "models", "keras_fit_conv1d_text.py"),
    # Keras' "Collaborative Filtering for Movie Recommendations": a subclassed model of Embeddings with regularizers
    "recommender": os.path.join(REPO, "tests", "models", "keras_fit_recommender.py"),
    # Keras' "Structured data classification from scratch": dict inputs, one of them strings; Normalization,
    # IntegerLookup and StringLookup (multi-hot) adapted to the data inside the model
    "structured": os.path.join(REPO, "tests", "models", "keras_fit_structured.py"),
}


def assert_one_marked_line(program):
    source = open(program).read().splitlines()
    assert [line for line in source if "toolkit" in line] == [
        "import harness.keras_program  # toolkit: model.fit below trains in the toolkit's runners (before TensorFlow)"]


# These are verified at W = 4 below, which runs every runner's graph too: the two Keras' from_config could not make
# again, and the one whose adapted layers are constants and lookup tables in each graph.
AT_FOUR_WORKERS = ["masked_lm", "seq2seq", "structured"]


@pytest.mark.parametrize("program", sorted(set(FIT_PROGRAMS) - set(AT_FOUR_WORKERS)))
def test_a_model_fit_program_with_one_marked_line_is_identical_in_every_runner(tmp_path, program):
    assert_one_marked_line(FIT_PROGRAMS[program])
    result = run_script("verify.py", f"--model={FIT_PROGRAMS[program]}", "--steps=4", "--warmup_steps=1",
                        "--runs=reference,tf,horovod,parallax", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    verdict = json.loads((tmp_path / "results/verify.json").read_text())
    assert verdict["passed"] and all(p["identical"] for p in verdict["pairs"])


@pytest.mark.parametrize("program", AT_FOUR_WORKERS)
def test_a_program_made_again_in_each_runner_s_graph_is_identical_at_four_workers(tmp_path, program):
    """The shapes Keras' from_config could not make again (MultiHeadAttention's config; op layers whose
    reconstruction ran Keras' own session on the workers' devices): the program itself makes them in each graph.
    Its layers adapted at load are given what they adapted there: a table each worker initialises, constants."""
    assert_one_marked_line(FIT_PROGRAMS[program])
    result = run_script("verify.py", f"--model={FIT_PROGRAMS[program]}", "--steps=3", "--warmup_steps=1",
                        "--workers=4", "--runs=reference,tf,horovod-exact,parallax-exact", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    verdict = json.loads((tmp_path / "results/verify.json").read_text())
    assert verdict["passed"] and all(p["identical"] for p in verdict["pairs"])


def test_a_program_run_by_python_trains_as_keras_alone_would(tmp_path):
    """`python yours.py`, its marked line in place: Keras' own fit, unseeded shuffles included (the toolkit's op
    determinism, which refuses a random op without a seed, is its runners')."""
    result = subprocess.run([sys.executable, FIT_PROGRAMS["attention"]], cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": REPO}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Epoch 2/2" in result.stdout


def test_split_check_finds_the_published_recommender_scores_a_row_by_its_whole_batch(tmp_path):
    """Its tf.tensordot(user_vector, movie_vector, 2) sums over the whole batch: every runner is identical to the
    reference of W shards (above), and split_check finds that W shards train another model than one batch does."""
    result = run_script("split_check.py", f"--model={FIT_PROGRAMS['recommender']}", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    assert "split_check: FAILED: splitting the batch moves " in result.stdout
    assert "recommender_net/embedding/embeddings" in result.stdout


def test_fit_s_arrays_are_batched_by_step_and_reshuffled_by_seed_and_epoch():
    model = models.load(FIT_PROGRAMS["rnn"])
    config = model.CONFIGS["default"]
    assert config.batch_size == 16  # fit's batch_size
    batches = model.data(config, None, 1)
    assert batches.epoch_size == 192 // 16  # 256 reviews, the last quarter held out by validation_split
    epoch = np.concatenate([batches(step)[0] for step in range(batches.epoch_size)])
    assert sorted(map(tuple, epoch)) == sorted(map(tuple, model.reviews[:192]))  # every kept row once
    assert batches(0)[0].dtype == np.int64
    assert np.array_equal(batches(3)[0], model.data(config, None, 1)(3)[0])
    assert not np.array_equal(batches(0)[0], batches(batches.epoch_size)[0])  # the next epoch's order
    assert not np.array_equal(batches(0)[0], model.data(config, None, 2)(0)[0])


COMPARED = """
import sys
import harness.determinism
import numpy as np
import tensorflow as tf
from harness import keras_program, update
keras = eval(sys.argv[1])
mapped = keras_program.rule_of(keras)
assert mapped.optimizer == eval(sys.argv[2]), mapped.optimizer
start = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)
gradients = [np.sin(np.arange(12, dtype=np.float32) * (k + 1)).reshape(3, 4) for k in range(3)]
variable = tf.Variable(start)
for g in gradients:
    keras.apply_gradients([(tf.constant(g), variable)])
theirs = variable.numpy()
with tf.Graph().as_default():
    ours = tf.compat.v1.get_variable("v", initializer=start)
    slots = [tf.compat.v1.get_variable(f"v/{name}", initializer=np.full_like(start, value))
             for name, value in mapped.optimizer.slots]
    step, g = tf.compat.v1.placeholder(tf.int64, []), tf.compat.v1.placeholder(tf.float32, [3, 4])
    train = tf.group(*mapped.optimizer.apply(ours, slots, g, mapped.learning_rate(step, 0), step))
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        for t, gradient in enumerate(gradients):
            session.run(train, {step: t, g: gradient})
        np.testing.assert_allclose(session.run(ours), theirs, rtol=2e-6, atol=1e-7)
"""


@pytest.mark.parametrize("keras, rule", [
    ("tf.keras.optimizers.SGD(0.1)", "update.SGD()"),
    ("tf.keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True)", "update.Momentum(0.9, True)"),
    ("tf.keras.optimizers.Adam(0.01)", "update.Adam(0.9, 0.999, 1e-7)"),
    ("tf.keras.optimizers.AdamW(0.01, weight_decay=0.1)", "update.Adam(0.9, 0.999, 1e-7, 0.1)"),
    ("tf.keras.optimizers.RMSprop(0.01)", "update.RMSProp(0.9, 1e-7)"),
    ("tf.keras.optimizers.Adagrad(0.1)", "update.Adagrad(0.1, 1e-7)"),
    ("tf.keras.optimizers.legacy.Adam(0.01)", "update.Adam(0.9, 0.999, 1e-7)"),
])
def test_a_keras_optimizer_is_the_toolkit_s_rule_doing_the_same_steps(keras, rule):
    """Mapped to the rule, and three steps of it agree with Keras' own (to float32 rounding); in a process of its
    own, where eager execution is on, as when a runner loads a program."""
    compared = subprocess.run([sys.executable, "-c", COMPARED, keras, rule], capture_output=True, text=True,
                              cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, timeout=300)
    assert compared.returncode == 0, compared.stderr[-3000:]


@pytest.mark.parametrize("keras, named", [
    (tf.keras.optimizers.Adam(0.01, clipnorm=1.0), "Adam with per-variable clipping (clipnorm): use global_clipnorm"),
    (tf.keras.optimizers.Nadam(0.01), "the optimizer Nadam: the toolkit's rules are Keras' SGD"),
    (tf.keras.optimizers.RMSprop(0.01, momentum=0.9), "RMSprop with momentum=0.9"),
    (tf.keras.optimizers.SGD(tf.keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5), momentum=0.9),
     "SGD with momentum and a schedule"),
    (tf.keras.optimizers.SGD(0.01, weight_decay=1e-4), "SGD with weight_decay=0.0001 (AdamW is the rule"),
])
def test_an_optimizer_the_toolkit_has_no_rule_for_is_refused_in_one_line(keras, named):
    if not tf.executing_eagerly():
        pytest.skip("another test of this process turned eager execution off: the optimizer's settings need it")
    with pytest.raises(UsageError, match=r"^[^\n]*$") as refused:
        keras_program.rule_of(keras)
    assert named in str(refused.value)


def test_a_fit_program_s_global_clipnorm_and_schedule_are_the_rule_s():
    if not tf.executing_eagerly():
        pytest.skip("another test of this process turned eager execution off: the optimizer's settings need it")
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    rule = keras_program.rule_of(tf.keras.optimizers.SGD(schedule, global_clipnorm=2.0))
    assert rule.clip_norm == 2.0
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        assert session.run(rule.learning_rate(tf.constant(10, tf.int64), 0)) == pytest.approx(0.05)


def built_bias(layer, rows=2, length=3):
    """The initial bias of a Keras LSTM layer made inside the toolkit's loss."""
    model = models.load(os.path.join(REPO, "tests", "models", "keras_tagger.py"))
    with tf.Graph().as_default():
        params = Params(model, model.CONFIGS["tiny"], 1)
        with layers.captured(params, StepRandom(1, 0, slice(0, rows), rows), "test"):
            layer(tf.zeros([rows, length, 4]))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return session.run(next(v for name, v in params.variables.items() if name.endswith("lstm_cell/bias")))


def test_the_lstm_s_default_forget_bias_of_one_is_drawn_as_keras_draws_it():
    """unit_forget_bias (Keras' default) concatenates three initializers: the bias is zeros, then ones for the
    forget gate; another bias initializer's parts are drawn from the variable's own numbers."""
    assert np.array_equal(built_bias(tf.keras.layers.LSTM(5)), np.repeat([0.0, 1.0, 0.0, 0.0], 5))
    uniform = built_bias(tf.keras.layers.LSTM(5, bias_initializer=tf.keras.initializers.RandomUniform(2.0, 3.0)))
    assert np.array_equal(uniform[5:10], np.ones(5)) and ((uniform[:5] >= 2) & (uniform[:5] < 3)).all()
    assert len(set(uniform[10:].tolist())) == 10


def test_int64_ids_train_in_run_tf(tmp_path):
    """numpy's default integer for a contract model's ids (a sparse gradient's indices int64) in the parameter
    servers' queues."""
    source = open(os.path.join(REPO, "tests", "models", "bag_of_words.py")).read()
    wide = tmp_path / "int64_ids.py"
    wide.write_text(source.replace("dtype=np.int32)", "dtype=np.int64)"))
    assert wide.read_text() != source
    launch_and_wait("tf", "--workers=2", "--ps=1", "--", f"--model={wide}", "--steps=2", "--warmup_steps=0",
                    cwd=tmp_path)


BATCH_NORMALIZED = '''import harness.keras_program  # toolkit: model.fit below trains in the toolkit's runners
import numpy as np
import tensorflow as tf

images = np.random.rand(64, 8, 8, 1)
labels = np.random.randint(0, 10, 64)
model = tf.keras.Sequential([
    tf.keras.layers.Conv2D(4, 3, input_shape=(8, 8, 1)), tf.keras.layers.BatchNormalization(),
    tf.keras.layers.ReLU(), tf.keras.layers.MaxPooling2D(), tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])
model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(images, labels, batch_size=8, epochs=1)
'''


def test_a_lenet_with_batch_normalization_is_refused_in_one_line_naming_the_alternative(tmp_path,
                                                                                          assert_usage_error):
    lenet = tmp_path / "lenet.py"
    lenet.write_text(BATCH_NORMALIZED)
    result = run_script("run.py", f"--model={lenet}", "--steps=2", "--warmup_steps=0", cwd=tmp_path)
    assert_usage_error(result, f"--model={lenet}: ", "moving_mean, not trainable",
                       "LayerNormalization or GroupNormalization")


@pytest.mark.parametrize("change, named", [
    (("model.compile(", "model.fit(images, labels)\nmodel.compile("), "model.fit on a model not compiled"),
    (('optimizer="sgd"', 'optimizer="nadam"'), "the optimizer Nadam"),
    (("model.fit(images, labels, batch_size=8", "model.fit(tf.data.Dataset.from_tensor_slices((images, labels))"
                                                ".batch(8).repeat()"), "repeats forever"),
    (("batch_size=8", "batch_size=100"), "64 examples, fewer than a batch of 100"),
    (("model.fit(", 'if len(images) > 64:\n    model.fit('), "ran to its end without reaching model.fit"),
    (("model.fit(", 'import sys\nsys.exit("no data")\nmodel.fit('), "stopped at line 12 (sys.exit) before reaching"),
    (("model.fit(images, labels, batch_size=8", "model.fit(tf.data.Dataset.from_tensor_slices((images, labels))"),
     "the program's dataset is not batched: give it .batch(B)"),
    (("epochs=1)", "epochs=1, class_weight={0: 2.0})"), "model.fit with class_weight: give the examples' weights"),
    (('model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))',
      'model.compile(optimizer="sgd")'), "model.compile without a loss"),
    (("model = tf.keras.Sequential([", "class Own(tf.keras.Sequential):\n    def train_step(self, data):\n"
                                       "        return {}\n\n\nmodel = Own(["),
     "Own overrides train_step, whose loss the toolkit cannot see: call toolkit_trains"),
    (("model = tf.keras.Sequential([", "bins = tf.keras.layers.Discretization(num_bins=4, input_shape=(8, 8, 1))\n"
                                       "bins.adapt(images)\nmodel = tf.keras.Sequential([bins, "
                                       "tf.keras.layers.Lambda(lambda x: tf.cast(x, 'float32')), "),
     "discretization (Discretization) is adapted to the data and is a layer of the model"),
    (("model = tf.keras.Sequential([", "class Probe(tf.keras.layers.Layer):\n    def call(self, x):\n"
                                       "        if not tf.compat.v1.executing_eagerly_outside_functions():\n"
                                       "            raise ValueError('not in a graph')\n        return x\n\n\n"
                                       "model = tf.keras.Sequential([Probe(input_shape=(8, 8, 1)), "),
     "program.py, in layer probe (Probe): ValueError: not in a graph"),
])
def test_what_a_fit_program_gives_that_the_toolkit_cannot_take_is_one_line(tmp_path, assert_usage_error, change,
                                                                           named):
    program = tmp_path / "program.py"
    program.write_text(BATCH_NORMALIZED.replace("tf.keras.layers.BatchNormalization(),", "").replace(*change))
    result = run_script("run.py", f"--model={program}", "--steps=2", "--warmup_steps=0", cwd=tmp_path)
    assert_usage_error(result, f"--model={program}: ", named)


GIVEN_TABLES = '''import harness.keras_program  # toolkit: model.fit below trains in the toolkit's runners
import numpy as np
import tensorflow as tf
from tensorflow.keras import layers

rng = np.random.default_rng(0)
TABLE, POSITIONS, KERNEL = rng.normal(size=(20, 4)), rng.normal(size=(6, 4)), rng.normal(size=(4, 20))
ids = rng.integers(0, 20, (16, 6))
inputs = layers.Input((6,), dtype="int32")
words = layers.Embedding(20, 4, weights=[TABLE], name="words")(inputs)
positions = layers.Embedding(6, 4, weights=[POSITIONS], name="positions")(tf.range(6))
outputs = layers.Dense(20, kernel_initializer=tf.keras.initializers.Constant(KERNEL), name="out")(words + positions)
model = tf.keras.Model(inputs, outputs)
model.compile(optimizer=tf.keras.optimizers.SGD(0.0),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ids, ids, batch_size=16, shuffle=False)
'''


def test_tables_given_to_layers_and_a_layer_called_on_constants_are_keras_own(tmp_path):
    """weights=[table] and Constant(table) are a variable's initial value; a layer called on tf.range as the model
    is built is that call's value, a constant, as Keras computes it (no variable): the first step's loss is the one
    numpy computes from the tables. The run records the program's own data as its data."""
    program = tmp_path / "given.py"
    program.write_text(GIVEN_TABLES)
    result = run_script("run.py", f"--model={program}", "--steps=1", "--warmup_steps=0", "--ckpt_dir=ckpt",
                        "--run_name=given", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "keras: positions (Embedding) is called on constants while the model is built" in result.stderr
    rng = np.random.default_rng(0)
    table, positions, kernel = rng.normal(size=(20, 4)), rng.normal(size=(6, 4)), rng.normal(size=(4, 20))
    ids = rng.integers(0, 20, (16, 6))
    logits = (table[ids] + positions) @ kernel
    expected = np.mean(np.log(np.exp(logits).sum(-1)) - np.take_along_axis(logits, ids[..., None], -1)[..., 0])
    (step,) = read_jsonl(tmp_path / "results/given.jsonl")
    assert step["loss"] == pytest.approx(expected, rel=1e-5)
    assert json.loads((tmp_path / "results/given.json").read_text())["data"] == "the program's own"
    trained = checkpoint_tensors(tmp_path / "ckpt")
    assert sorted(trained) == ["out/bias", "out/kernel", "words/embeddings"]  # with a learning rate of 0
    assert np.array_equal(trained["words/embeddings"], table.astype(np.float32))
    assert np.array_equal(trained["out/kernel"], kernel.astype(np.float32))


def test_a_program_training_under_main_with_its_own_flags_runs_as_python_runs_it(tmp_path):
    """As most published scripts are: argparse in main(), called under `if __name__ == "__main__":`. The toolkit
    runs the file as a script with its own argv, so fit is reached with the flags' defaults, not the runner's."""
    program = tmp_path / "program.py"
    body = BATCH_NORMALIZED.replace("tf.keras.layers.BatchNormalization(),", "").split("\n")
    main = ["import argparse", "", "", "def main():", "    parser = argparse.ArgumentParser()",
            "    parser.add_argument('--batch_size', type=int, default=8)", "    flags = parser.parse_args()",
            *[f"    {line}".replace("batch_size=8", "batch_size=flags.batch_size") for line in body[1:] if line],
            "", "", 'if __name__ == "__main__":', "    main()"]
    program.write_text("\n".join([body[0], *main]) + "\n")
    result = run_script("run.py", f"--model={program}", "--steps=2", "--warmup_steps=0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "results/run.json").read_text())["config"]["batch_size"] == 8


@pytest.mark.parametrize("loss", [tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                  "sparse_categorical_crossentropy", tf.keras.losses.sparse_categorical_crossentropy])
def test_compile_s_loss_is_keras_own_mean_as_a_sum_and_count(loss):
    """With the output's mask (mask_zero) and sample weights, Keras divides the weighted sum by the values the mask
    keeps: the objective is that (sum, count); without a mask, the mean over every value."""
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 5, [4, 6])
    scores = rng.random([4, 6, 5]).astype(np.float32)
    weights = rng.random([4]).astype(np.float32)
    mask = rng.random([4, 6]) < 0.6
    keras_loss = tf.keras.losses.get(loss) if isinstance(loss, str) else loss
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        y_pred = tf.constant(scores)
        unmasked = keras_program.keras_objective(loss, tf.constant(labels), y_pred, tf.constant(weights), [])
        y_pred._keras_mask = tf.constant(mask)
        masked = keras_program.keras_objective(loss, tf.constant(labels), y_pred, tf.constant(weights), [])
        wrapped = keras_loss if isinstance(keras_loss, tf.keras.losses.Loss) else \
            keras_program.LossFunctionWrapper(keras_loss)
        theirs = wrapped(tf.constant(labels), y_pred, sample_weight=tf.constant(weights))
        y_pred._keras_mask = None
        theirs_unmasked = wrapped(tf.constant(labels), y_pred, sample_weight=tf.constant(weights))
        (total, count), mean, keras_masked, keras_unmasked = session.run([masked, unmasked, theirs,
                                                                          theirs_unmasked])
    assert count == mask.sum()
    assert total / count == pytest.approx(keras_masked, rel=1e-6)
    assert mean == pytest.approx(keras_unmasked, rel=1e-6)


DATASET_PROGRAM = '''import harness.keras_program  # toolkit: model.fit below trains in the toolkit's runners
import numpy as np
import tensorflow as tf

x = np.arange(40, dtype=np.float32).reshape(20, 2)
y = np.arange(20) % 2
model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss=tf.keras.losses.SparseCategoricalCrossentropy(True))
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).shuffle(20).batch(6), epochs=3)
'''


def test_fit_s_dataset_is_read_once_unbatched_and_batched_by_step(tmp_path):
    """A tf.data pipeline with an unseeded shuffle: its batch size is fit's, every example is read, and the
    toolkit's order is its own, drawn from (seed, epoch)."""
    program = tmp_path / "dataset_program.py"
    program.write_text(DATASET_PROGRAM)
    model = models.load(str(program))
    config = model.CONFIGS["default"]
    assert config.batch_size == 6
    batches = model.data(config, None, 1)
    assert batches.epoch_size == 3  # 20 examples: 3 batches of 6, 2 left out
    seen = np.concatenate([batches(step)[0] for step in range(3)])
    assert len({tuple(row) for row in seen}) == 18 and set(seen[:, 0]) <= set(model.x[:, 0])
    assert np.array_equal(batches(1)[0], model.data(config, None, 1)(1)[0])
