import argparse
import hashlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import model
from bench.sparse_update import densify
from conftest import REPO, bit_identical
from harness import data, determinism

TINY = model.CONFIGS["tiny"]
LM1B_TINY = model.CONFIGS["lm1b-tiny"]


def build(config=TINY, seed=1, rows=slice(None), partitions=1):
    """A graph with the model and one worker's loss on `rows`; returns (graph, lm, loss, feed)."""
    graph = tf.Graph()
    with graph.as_default():
        lm = model.LSTMLanguageModel(config, seed, partitions)
        n = len(range(config.batch_size)[rows])
        inputs = tf.compat.v1.placeholder(tf.int32, [n, config.num_steps])
        step = tf.constant(3, tf.int64)
        loss, _ = lm.loss(inputs, inputs, tf.zeros(model.state_shape(config, n)), lm.dropout_masks(seed, step, rows),
                          lm.sampled_candidates(seed, step))
    return graph, lm, loss, inputs


def initial_values(graph, lm):
    """{name: value} of every variable after initialisation, a partitioned one with its parts concatenated."""
    with graph.as_default():
        whole = {name: tf.concat(lm.parts(name), 0) if name in lm.partitioned else v for name, v in lm.variables.items()}
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        return session.run(whole)


def initial_parameters_digest(seed):
    """A digest of the initial parameters as the TensorFlow variables hold them after initialisation."""
    values = initial_values(*build(seed=seed)[:2])
    return hashlib.sha256(b"".join(values[name].tobytes() for name in sorted(values))).hexdigest()


def test_initial_parameters_are_the_same_in_every_process():
    code = ("import harness, sys; sys.path.insert(0, 'tests'); import test_model; "
            "print(test_model.initial_parameters_digest(7))")
    other_process = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                   check=True).stdout.strip()
    assert other_process == initial_parameters_digest(7)
    assert initial_parameters_digest(8) != other_process


def test_variables_hold_the_documented_initial_values():
    values = initial_values(*build(seed=5)[:2])
    for name, value in values.items():
        assert value.shape == model.variable_shapes(TINY)[name]
        np.testing.assert_array_equal(value, model.initial_value(TINY, 5, name))  # eager: the same function
        assert np.abs(value).max() <= TINY.init_scale
    embedding = values["embedding"]  # uniform in [-0.1, 0.1]: mean 0, standard deviation 0.1 / sqrt(3)
    assert abs(embedding.mean()) < 0.005 and embedding.std() == pytest.approx(0.1 / np.sqrt(3), rel=0.05)
    assert not np.array_equal(values["lstm_0/bias"], values["lstm_1/bias"][:64])  # keyed by the name


def test_initial_values_do_not_depend_on_the_partitioning():
    """A part generates exactly its rows of the whole value; lm1b-tiny's rows of 6 numbers put the parts'
    first elements inside Philox blocks of 4, and softmax_b's rows of one number everywhere."""
    whole = initial_values(*build(LM1B_TINY)[:2])
    graph, lm, _, _ = build(LM1B_TINY, partitions=4)
    assert set(lm.partitioned) == {"embedding", "softmax_w", "softmax_b"}
    assert all(len(lm.parts(name)) == 4 for name in lm.partitioned)
    parted = initial_values(graph, lm)
    assert all(bit_identical(whole[name], parted[name]) for name in whole)


@pytest.mark.parametrize("config", [TINY, LM1B_TINY], ids=lambda c: c.name)
def test_the_sparse_variables_are_those_with_indexed_slices_gradients(config):
    graph, lm, loss, _ = build(config)
    with graph.as_default():
        raw = dict(zip(lm.variables, tf.gradients(loss, list(lm.variables.values()))))
    assert list(lm.variables) == list(model.variable_shapes(config))
    assert [n for n, g in raw.items() if isinstance(g, tf.IndexedSlices)] == list(model.sparse_variables(config))
    assert all(isinstance(g, tf.Tensor) for n, g in raw.items() if n not in model.sparse_variables(config))


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
        lm = model.LSTMLanguageModel(model.CONFIGS["small"], 1)
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


def test_the_update_clips_the_global_norm_and_takes_a_step():
    config = model.Config("t", 4, 1, 1, 1, 1, 0.1, learning_rate=0.5, max_grad_norm=1.0, keep_prob=1.0,
                          max_epoch=1, lr_decay=1.0)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        table = tf.Variable(np.zeros([4, 2], np.float32))
        bias = tf.Variable(np.zeros([2], np.float32))
        gradients = [tf.IndexedSlices(tf.constant([[3.0, 0.0], [0.0, 0.0]]), tf.constant([2, 2]),
                                      tf.constant([4, 2])), tf.constant([0.0, 4.0])]
        train_op, norm = model.sgd_update(config, [table, bias], gradients, 0.5)
        session.run(tf.compat.v1.global_variables_initializer())
        norm, _ = session.run([norm, train_op])
        table, bias = session.run([table, bias])
    assert norm == pytest.approx(5.0)  # sqrt(3^2 + 4^2): the gradient is scaled to norm 1
    np.testing.assert_allclose(table[2], [-0.5 * 0.6, 0.0])
    np.testing.assert_allclose(bias, [0.0, -0.5 * 0.8])
    assert not table[[0, 1, 3]].any()


@pytest.mark.parametrize("name", ["small", "lm1b-tiny"])
def test_the_scatter_update_equals_the_dense_update_bit_for_bit(name):
    """sgd_update scatters a sparse gradient into the rows it touches; summing it into a dense table first and
    updating the whole table (the rule before, bench/sparse_update.densify) gives the same bits: the norm,
    and every variable. Two workers' gradients of one step of real shapes."""
    config = model.CONFIGS[name]
    batches = data.Batches(data.synthetic_tokens(config.vocab_size, 1), config.batch_size, config.num_steps)
    inputs, targets = batches(0)
    graph = tf.Graph()
    with graph.as_default():
        lm = model.LSTMLanguageModel(config, 1)
        step = tf.constant(0, tf.int64)
        gradients = []
        for r in range(2):
            rows = data.shard(config.batch_size, r, 2)
            state = tf.zeros(model.state_shape(config, len(range(config.batch_size)[rows])))
            loss, _ = lm.loss(inputs[rows], targets[rows], state, lm.dropout_masks(1, step, rows),
                              lm.sampled_candidates(1, step))
            gradients.append(lm.worker_gradients(loss))
        averaged = model.average_worker_gradients(gradients)
        updates = {"scatter": model.sgd_update(config, lm.variable_list, averaged, 0.5),
                   "dense": model.sgd_update(config, lm.variable_list, densify(lm.variable_list, averaged), 0.5)}
    results = {}
    config_of_every_runner = determinism.session_config(argparse.Namespace(intra_op_threads=1, inter_op_threads=1))
    with tf.compat.v1.Session(graph=graph, config=config_of_every_runner) as session:
        for kind, (train_op, norm) in updates.items():
            session.run(tf.compat.v1.global_variables_initializer())
            results[kind] = session.run([norm, train_op])[0], session.run(lm.variables)
    (scatter_norm, scatter), (dense_norm, dense) = results["scatter"], results["dense"]
    assert bit_identical(scatter_norm, dense_norm)
    assert all(bit_identical(scatter[name], dense[name]) for name in scatter)
    initial = initial_values(graph, lm)
    assert np.any(scatter["embedding"] != initial["embedding"])


def test_sampled_candidates_are_drawn_from_the_seed_and_the_step_alone():
    """Every worker builds its own graph and every emulated shard calls sampled_candidates again: all of them
    draw the same words, Zipfian over the vocabulary, and another step or seed draws others."""
    def candidates(seed, step, rows):
        graph, lm, _, _ = build(LM1B_TINY, rows=rows)
        with graph.as_default():
            words = [lm.sampled_candidates(seed, tf.constant(s, tf.int64)) for s in range(step, step + 50)]
        with tf.compat.v1.Session(graph=graph) as session:
            return np.stack(session.run(words))

    reference = candidates(1, 7, slice(None))
    for r in range(2):
        np.testing.assert_array_equal(candidates(1, 7, data.shard(LM1B_TINY.batch_size, r, 2)), reference)
    assert reference.dtype == np.int32 and reference.shape == (50, LM1B_TINY.num_sampled)
    assert not np.array_equal(reference[1:], reference[:-1])  # each step its own
    assert not np.array_equal(candidates(2, 7, slice(None)), reference)
    assert reference.min() >= 0 and reference.max() < LM1B_TINY.vocab_size
    # log-uniform over 500 words: P(word < 50) = ln(51) / ln(501) = 0.63
    assert (reference < 50).mean() == pytest.approx(np.log(51) / np.log(501), abs=0.05)


def test_the_learning_rate_follows_the_paper_schedule():
    small = model.CONFIGS["small"]  # 1.0 for 4 epochs, then halved every epoch
    assert [model.learning_rate(small, e) for e in range(6)] == [1.0, 1.0, 1.0, 1.0, 0.5, 0.25]
