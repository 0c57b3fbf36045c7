import argparse
import dataclasses
import hashlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import configs
import model
from bench.sparse_update import densify
from conftest import REPO, bit_identical
from harness import data, determinism

TINY = configs.CONFIGS["tiny"]
LM1B_TINY = configs.CONFIGS["lm1b-tiny"]


def build(config=TINY, seed=1, rows=slice(None), partitions=1, strategy="mod"):
    """A graph with the model and one worker's loss on `rows`; returns (graph, lm, loss, feed)."""
    graph = tf.Graph()
    with graph.as_default():
        lm = model.LSTMLanguageModel(config, seed, partitions, strategy)
        n = len(range(config.batch_size)[rows])
        inputs = tf.compat.v1.placeholder(tf.int32, [n, config.num_steps])
        step = tf.constant(3, tf.int64)
        loss, _ = lm.loss(inputs, inputs, tf.zeros(configs.state_shape(config, n)), lm.dropout_masks(seed, step, rows),
                          lm.sampled_candidates(seed, step))
    return graph, lm, loss, inputs


def initial_values(graph, lm):
    """{name: value} of every variable after initialisation, a partitioned one with its parts joined in row order."""
    with graph.as_default():
        whole = {name: model.join_rows([p.read_value() for p in lm.parts(name)], lm.strategy)
                 if name in lm.partitioned else v for name, v in lm.variables.items()}
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        return session.run(whole)


def initial_parameters_digest(seed):
    """A digest of the initial parameters as the TensorFlow variables hold them after initialisation."""
    values = initial_values(*build(seed=seed)[:2])
    return hashlib.sha256(b"".join(values[name].tobytes() for name in sorted(values))).hexdigest()


def test_initial_parameters_are_the_same_in_every_process():
    code = ("import harness.determinism, sys; sys.path.insert(0, 'tests'); import test_model; "
            "print(test_model.initial_parameters_digest(7))")
    other_process = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                   check=True).stdout.strip()
    assert other_process == initial_parameters_digest(7)
    assert initial_parameters_digest(8) != other_process


def test_variables_hold_the_documented_initial_values():
    values = initial_values(*build(seed=5)[:2])
    for name, value in values.items():
        assert value.shape == configs.variable_shapes(TINY)[name]
        np.testing.assert_array_equal(value, model.initial_value(TINY, 5, name))  # eager: the same function
        assert np.abs(value).max() <= TINY.init_scale
    embedding = values["embedding"]  # uniform in [-0.1, 0.1]: mean 0, standard deviation 0.1 / sqrt(3)
    assert abs(embedding.mean()) < 0.005 and embedding.std() == pytest.approx(0.1 / np.sqrt(3), rel=0.05)
    assert not np.array_equal(values["lstm_0/bias"], values["lstm_1/bias"][:64])  # keyed by the name


@pytest.mark.parametrize("strategy", configs.PARTITION_STRATEGIES)
def test_initial_values_do_not_depend_on_the_partitioning(strategy):
    """A part generates exactly its rows of the whole value, contiguous ("div") or every 4th ("mod");
    lm1b-tiny's rows of 6 numbers put the rows' first elements inside Philox blocks of 4, and softmax_b's rows
    of one number everywhere."""
    whole = initial_values(*build(LM1B_TINY)[:2])
    graph, lm, _, _ = build(LM1B_TINY, partitions=4, strategy=strategy)
    assert set(lm.partitioned) == {"embedding", "softmax_w", "softmax_b"}
    assert all(len(lm.parts(name)) == 4 for name in lm.partitioned)
    parted = initial_values(graph, lm)
    assert all(bit_identical(whole[name], parted[name]) for name in whole)
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        part_1 = session.run(lm.parts("embedding")[1])
    rows_of_part_1 = np.arange(1, 500, 4) if strategy == "mod" else np.arange(125, 250)
    assert bit_identical(part_1, whole["embedding"][rows_of_part_1])


def test_mod_places_word_i_in_part_i_mod_p_as_tensorflow_1_did():
    """TensorFlow 1's embedding_lookup(params, ids, partition_strategy="mod") (still in tf.compat.v1): id i is
    row i // P of params[i % P]. The parts hold exactly those rows, so a lookup of every word gives the whole
    table in word order; the same with "div", contiguous ranges."""
    assert configs.part_rows(10, 3, "mod") == [range(0, 10, 3), range(1, 10, 3), range(2, 10, 3)]
    assert configs.part_rows(10, 3, "div") == [range(0, 4), range(4, 7), range(7, 10)]
    for strategy in configs.PARTITION_STRATEGIES:
        with tf.Graph().as_default():
            sizes = [len(rows) for rows in configs.part_rows(10, 3, strategy)]
            assert sizes == [4, 3, 3]  # both strategies: the first 10 % 3 parts one row longer
            values = np.arange(20, dtype=np.float32).reshape(10, 2)
            split = model.split_rows(tf.constant(values), configs.part_rows(10, 3, strategy))
            looked_up = tf.compat.v1.nn.embedding_lookup(split, tf.range(10), partition_strategy=strategy)
            with tf.compat.v1.Session() as session:
                found, joined, split = session.run([looked_up, model.join_rows(split, strategy), split])
        np.testing.assert_array_equal(found, values)
        np.testing.assert_array_equal(joined, values)
        if strategy == "mod":
            np.testing.assert_array_equal(split[1], values[[1, 4, 7]])


def test_strided_rows_draw_the_numbers_of_tensorflows_generator():
    """initial_value's own Philox (for the rows of a "mod" part) gives the numbers TensorFlow's kernel gives
    for the whole value, at rows whose first element starts anywhere in a block of 4."""
    for name in ("embedding", "softmax_b", "lstm_0/kernel"):
        whole = model.initial_value(LM1B_TINY, 3, name).numpy()
        for rows in (range(1, 500, 4), range(3, 31, 7), range(0, 1, 2)):
            rows = range(rows.start, min(rows.stop, len(whole)), rows.step)
            assert bit_identical(model.initial_value(LM1B_TINY, 3, name, rows).numpy(), whole[list(rows)])


@pytest.mark.parametrize("config", [TINY, LM1B_TINY], ids=lambda c: c.name)
def test_the_sparse_variables_are_those_with_indexed_slices_gradients(config):
    graph, lm, loss, _ = build(config)
    with graph.as_default():
        raw = dict(zip(lm.variables, tf.gradients(loss, list(lm.variables.values()))))
    assert list(lm.variables) == list(configs.variable_shapes(config))
    assert [n for n, g in raw.items() if isinstance(g, tf.IndexedSlices)] == list(configs.sparse_variables(config))
    assert all(isinstance(g, tf.Tensor) for n, g in raw.items() if n not in configs.sparse_variables(config))


def test_worker_gradients_have_one_embedding_row_per_word():
    graph, lm, loss, inputs = build()
    words = np.array([[3, 1, 3, 3, 2]] * TINY.batch_size, np.int32)
    with graph.as_default():
        gradients = lm.worker_gradients(loss)
        raw = tf.gradients(loss, lm.variables["embedding"])[0]
        dense_raw = tf.convert_to_tensor(raw)
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        sparse, expected = session.run([gradients[0], dense_raw], {inputs: words})
    assert list(sparse.indices) == [3, 1, 2]  # in order of first appearance
    np.testing.assert_allclose(sparse.values, expected[[3, 1, 2]], rtol=1e-6)


def test_dropout_masks_do_not_depend_on_the_sharding():
    graph, lm, _, _ = build()
    with graph.as_default():
        step = tf.constant(11, tf.int64)
        whole = lm.dropout_masks(1, step, slice(None))
        halves = [lm.dropout_masks(1, step, data.shard(TINY.batch_size, r, 2)) for r in range(2)]
        other_step = lm.dropout_masks(1, tf.constant(12, tf.int64), slice(None))
    with tf.compat.v1.Session(graph=graph) as session:
        whole, halves, other_step = session.run([whole, halves, other_step])
    np.testing.assert_array_equal(np.concatenate(halves, axis=1), whole)
    assert set(np.unique(whole)) == {0.0, np.float32(1 / TINY.keep_prob)}
    assert not np.array_equal(whole, other_step)
    assert 0.8 < (whole > 0).mean() < 1.0  # keep_prob 0.9


def test_no_dropout_ops_without_dropout():
    graph = tf.Graph()
    with graph.as_default():
        lm = model.LSTMLanguageModel(configs.CONFIGS["small"], 1)
        assert lm.dropout_masks(1, tf.constant(0, tf.int64), slice(None)) is None


def test_averaging_two_workers_concatenates_sparse_rows_and_halves_everything():
    def worker(rows, indices, dense):
        return [tf.IndexedSlices(tf.constant(rows), tf.constant(indices), tf.constant([8, 1])), tf.constant(dense)]

    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        sparse, dense = model.average_worker_gradients([worker([[2.0], [4.0]], [5, 1], [1.0, 2.0]),
                                                        worker([[6.0]], [5], [3.0, 5.0])])
        rows, indices, dense = session.run([sparse.values, sparse.indices, dense])
    np.testing.assert_array_equal(rows, [[1.0], [2.0], [3.0]])
    np.testing.assert_array_equal(indices, [5, 1, 5])
    np.testing.assert_array_equal(dense, [2.0, 3.5])


def two_variables(config, table, bias):
    """A stand-in for LSTMLanguageModel with a sparse "embedding" and a dense "lstm_0/bias"."""
    variables = {"embedding": tf.Variable(table), "lstm_0/bias": tf.Variable(bias)}
    accumulators = {name: tf.Variable(tf.fill(v.shape, config.update_rule.initial_accumulator))
                    for name, v in variables.items()}
    return argparse.Namespace(config=config, variables=variables, accumulators=accumulators, partitioned=(),
                              strategy="mod")


def test_the_update_clips_the_global_norm_and_takes_a_step():
    config = configs.Config("t", 4, 1, 1, 1, 1, 0.1, learning_rate=0.5, max_grad_norm=1.0, keep_prob=1.0,
                          max_epoch=1, lr_decay=1.0)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        lm = two_variables(config, np.zeros([4, 2], np.float32), np.zeros([2], np.float32))
        table, bias = lm.variables.values()
        gradients = [tf.IndexedSlices(tf.constant([[3.0, 0.0], [0.0, 0.0]]), tf.constant([2, 2]),
                                      tf.constant([4, 2])), tf.constant([0.0, 4.0])]
        train_op, norm = model.update(lm, gradients, 0.5)
        session.run(tf.compat.v1.global_variables_initializer())
        norm, _ = session.run([norm, train_op])
        table, bias = session.run([table, bias])
    assert norm == pytest.approx(5.0)  # sqrt(3^2 + 4^2): the gradient is scaled to norm 1
    np.testing.assert_allclose(table[2], [-0.5 * 0.6, 0.0])
    np.testing.assert_allclose(bias, [0.0, -0.5 * 0.8])
    assert not table[[0, 1, 3]].any()


@pytest.mark.parametrize("name", ["small", "lm1b-tiny"])
def test_the_scatter_update_equals_the_dense_update_bit_for_bit(name):
    """update scatters a sparse gradient into the rows it touches; summing it into a dense table first and
    updating the whole table (the rule before, bench/sparse_update.densify) gives the same bits: the norm,
    and every variable and accumulator (lm1b-tiny: Adagrad). Two workers' gradients of one step of real
    shapes."""
    config = configs.CONFIGS[name]
    batches = data.Batches(data.synthetic_tokens(config.vocab_size, 1), config.batch_size, config.num_steps)
    inputs, targets = batches(0)
    graph = tf.Graph()
    with graph.as_default():
        lm = model.LSTMLanguageModel(config, 1)
        step = tf.constant(0, tf.int64)
        gradients = []
        for r in range(2):
            rows = data.shard(config.batch_size, r, 2)
            state = tf.zeros(configs.state_shape(config, len(range(config.batch_size)[rows])))
            loss, _ = lm.loss(inputs[rows], targets[rows], state, lm.dropout_masks(1, step, rows),
                              lm.sampled_candidates(1, step))
            gradients.append(lm.worker_gradients(loss))
        averaged = model.average_worker_gradients(gradients)
        updates = {"scatter": model.update(lm, averaged, 0.5),
                   "dense": model.update(lm, densify(lm.variable_list, averaged), 0.5)}
        state = {v.op.name: v for v in lm.state()}
    results = {}
    config_of_every_runner = determinism.session_config(argparse.Namespace(intra_op_threads=1, inter_op_threads=1))
    with tf.compat.v1.Session(graph=graph, config=config_of_every_runner) as session:
        for kind, (train_op, norm) in updates.items():
            session.run(tf.compat.v1.global_variables_initializer())
            results[kind] = session.run([norm, train_op])[0], session.run(state)
    (scatter_norm, scatter), (dense_norm, dense) = results["scatter"], results["dense"]
    assert bit_identical(scatter_norm, dense_norm)
    assert all(bit_identical(scatter[name], dense[name]) for name in scatter)
    initial = initial_values(graph, lm)
    assert np.any(scatter["embedding"] != initial["embedding"])


def test_sampled_candidates_are_drawn_from_the_seed_and_the_step_alone():
    """Every worker builds its own graph and every emulated shard calls sampled_candidates again: all of them
    draw the same words, num_sampled distinct ones, Zipfian over the vocabulary, and another step or seed
    draws others."""
    def candidates(seed, step, rows):
        graph, lm, _, _ = build(LM1B_TINY, rows=rows)
        with graph.as_default():
            drawn = [lm.sampled_candidates(seed, tf.constant(s, tf.int64)) for s in range(step, step + 50)]
        with tf.compat.v1.Session(graph=graph) as session:
            drawn = session.run(drawn)
        return np.stack([words for words, _ in drawn]), np.array([tries for _, tries in drawn])

    reference, tries = candidates(1, 7, slice(None))
    for r in range(2):
        words, their_tries = candidates(1, 7, data.shard(LM1B_TINY.batch_size, r, 2))
        np.testing.assert_array_equal(words, reference)
        np.testing.assert_array_equal(their_tries, tries)
    assert reference.dtype == np.int32 and reference.shape == (50, LM1B_TINY.num_sampled)
    assert all(len(np.unique(step)) == LM1B_TINY.num_sampled for step in reference)  # distinct, as unique=True
    assert (tries >= LM1B_TINY.num_sampled).all() and (tries > LM1B_TINY.num_sampled).any()
    assert not np.array_equal(reference[1:], reference[:-1])  # each step its own
    assert not np.array_equal(candidates(2, 7, slice(None))[0], reference)
    assert reference.min() >= 0 and reference.max() < LM1B_TINY.vocab_size
    # the first candidate is the first draw, log-uniform over 500 words: P(word < 50) = ln(51) / ln(501) = 0.63
    assert (reference[:, 0] < 50).mean() == pytest.approx(np.log(51) / np.log(501), abs=0.2)


def test_expected_counts_are_those_of_tensorflows_unique_sampler():
    """tf.random.log_uniform_candidate_sampler(unique=True) reports each candidate's expected count from the
    number of draws it took, which it does not report: found here from one candidate's count, the formula
    of the loss must give every other count TensorFlow reports. TensorFlow computes in float32 (its
    ExpectedCountHelper takes a float probability), the loss in float64 rounded to float32: a relative
    difference of a few float32 roundings, 1e-5 at most; the with-replacement formula, num_sampled * p, is
    off by more than 50% for the frequent words."""
    vocab, num_sampled = 500, 32
    config = dataclasses.replace(LM1B_TINY, vocab_size=vocab, num_sampled=num_sampled)
    true = tf.constant([[1], [7], [400]], tf.int64)
    candidates, true_count, sampled_count = tf.random.log_uniform_candidate_sampler(
        true, 1, num_sampled, unique=True, range_max=vocab, seed=3)
    p = np.log1p(1.0 / (candidates.numpy() + 1.0)) / np.log(vocab + 1.0)
    tries = int(round(np.log1p(-sampled_count.numpy()[0]) / np.log1p(-p[0])))
    words = np.concatenate([true.numpy()[:, 0], candidates.numpy()]).astype(np.int32)
    assert tries > num_sampled
    graph = tf.Graph()
    with graph.as_default():
        lm = model.LSTMLanguageModel(config, 1)
        log_counts = lm.log_expected_count(tf.constant(words), tf.constant(tries))
    with tf.compat.v1.Session(graph=graph) as session:
        counts = np.exp(session.run(log_counts))
    ours = counts.astype(np.float64)
    theirs = np.concatenate([true_count.numpy()[:, 0], sampled_count.numpy()]).astype(np.float64)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    with_replacement = num_sampled * np.log1p(1.0 / (words + 1.0)) / np.log(vocab + 1.0)
    assert np.max(np.abs(with_replacement / theirs - 1)) > 0.5


def test_adagrad_takes_tensorflows_adagrad_step():
    """PARALLAX_LM1B's update of one step against tf.compat.v1.train.AdagradOptimizer(0.2,
    initial_accumulator_value=1.0) on the same gradients, sparse and dense: the accumulators bit for bit (both
    add g * g), the variables within 2 float32 ulps (TensorFlow's kernel multiplies by an approximate
    1/sqrt(acc), ours divides by the correctly rounded sqrt(acc); docstring of model.apply_gradient)."""
    config = dataclasses.replace(LM1B_TINY, max_grad_norm=0.0)  # no clipping: the bare optimiser
    rng = np.random.default_rng(1)
    table, bias = rng.standard_normal([50, 6]).astype(np.float32), rng.standard_normal([8]).astype(np.float32)
    rows = np.array([3, 17, 40], np.int32)
    values = rng.standard_normal([3, 6]).astype(np.float32)
    dense = rng.standard_normal([8]).astype(np.float32)
    results = []
    for ours in (True, False):
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            lm = two_variables(config, table, bias)
            gradients = [tf.IndexedSlices(tf.constant(values), tf.constant(rows), tf.constant([50, 6])),
                         tf.constant(dense)]
            if ours:
                step, _ = model.update(lm, gradients, 0.2)
                slots = list(lm.accumulators.values())
            else:
                gradients[0] = tf.IndexedSlices(gradients[0].values * 4.0, gradients[0].indices,
                                                gradients[0].dense_shape)  # the embedding: times the batch of 4
                optimizer = tf.compat.v1.train.AdagradOptimizer(0.2, initial_accumulator_value=1.0)
                step = optimizer.apply_gradients(zip(gradients, lm.variables.values()))
                slots = [optimizer.get_slot(v, "accumulator") for v in lm.variables.values()]
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(step)
            results.append(session.run([*lm.variables.values(), *slots]))
    (table_ours, bias_ours, *slots_ours), (table_tf, bias_tf, *slots_tf) = results
    assert all(bit_identical(a, b) for a, b in zip(slots_ours, slots_tf))
    assert bit_identical(table_ours[[0, 1, 2, 49]], table[[0, 1, 2, 49]])  # untouched rows stay
    for a, b in ((table_ours, table_tf), (bias_ours, bias_tf)):
        assert np.max(np.abs(a - b) / np.spacing(np.abs(b))) <= 2
    assert not np.allclose(table_ours[rows], table[rows])


@pytest.mark.parametrize("strategy", configs.PARTITION_STRATEGIES)
def test_a_checkpoint_holds_whole_tables_whatever_the_partitioning(tmp_path, strategy):
    """Saved from 4 parts, restored into 3 of the other strategy: the same names and values as an
    unpartitioned model's, accumulators ("<name>/Adagrad") included."""
    whole = initial_values(*build(LM1B_TINY)[:2])
    graph, lm, _, _ = build(LM1B_TINY, partitions=4, strategy=strategy)
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(lm.accumulators["softmax_w"][2].assign_add(tf.ones_like(lm.accumulators["softmax_w"][2])))
        prefix = lm.saver().save(session, str(tmp_path / "model.ckpt"))
    reader = tf.train.load_checkpoint(prefix)
    names = list(configs.variable_shapes(LM1B_TINY))
    assert sorted(reader.get_variable_to_shape_map()) == sorted(names + [n + "/Adagrad" for n in names])
    assert all(bit_identical(reader.get_tensor(n), whole[n]) for n in names)
    accumulator = reader.get_tensor("softmax_w/Adagrad")
    bumped = configs.part_rows(LM1B_TINY.vocab_size, 4, strategy)[2]
    assert (accumulator[list(bumped)] == 2.0).all() and (np.delete(accumulator, list(bumped), 0) == 1.0).all()
    other = "div" if strategy == "mod" else "mod"
    graph, lm, _, _ = build(LM1B_TINY, seed=9, partitions=3, strategy=other)
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        lm.saver().restore(session, prefix)
        joined = session.run(model.join_rows([p.read_value() for p in lm.accumulators["softmax_w"]], other))
    assert bit_identical(joined, accumulator)


def test_the_learning_rate_follows_the_paper_schedule():
    small = configs.CONFIGS["small"]  # 1.0 for 4 epochs, then halved every epoch
    assert [configs.learning_rate(small, e) for e in range(6)] == [1.0, 1.0, 1.0, 1.0, 0.5, 0.25]
