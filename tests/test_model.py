import hashlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import model
from conftest import REPO
from harness import data

TINY = model.CONFIGS["tiny"]


def build(config=TINY, seed=1, rows=slice(None)):
    """A graph with the model and one worker's loss on `rows`; returns (graph, lm, loss, feed)."""
    graph = tf.Graph()
    with graph.as_default():
        lm = model.LSTMLanguageModel(config, seed)
        n = len(range(config.batch_size)[rows])
        inputs = tf.compat.v1.placeholder(tf.int32, [n, config.num_steps])
        state = tf.zeros([config.num_layers, 2, n, config.hidden_size])
        loss, _ = lm.loss(inputs, inputs, state, lm.dropout_masks(seed, tf.constant(3, tf.int64), rows))
    return graph, lm, loss, inputs


def initial_parameters_digest(seed):
    """A digest of the initial parameters as the TensorFlow variables hold them after initialisation."""
    graph, lm, _, _ = build(seed=seed)
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        values = session.run(lm.variables)
    return hashlib.sha256(b"".join(values[name].tobytes() for name in sorted(values))).hexdigest()


def test_initial_parameters_are_the_same_in_every_process():
    code = ("import harness, sys; sys.path.insert(0, 'tests'); import test_model; "
            "print(test_model.initial_parameters_digest(7))")
    other_process = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                   check=True).stdout.strip()
    assert other_process == initial_parameters_digest(7)
    assert initial_parameters_digest(8) != other_process


def test_variables_hold_the_documented_initial_values():
    graph, lm, _, _ = build(seed=5)
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        for name, variable in lm.variables.items():
            value = session.run(variable)
            assert value.shape == model.variable_shapes(TINY)[name]
            np.testing.assert_array_equal(value, model.initial_value(TINY, 5, name))
            assert np.abs(value).max() <= TINY.init_scale


def test_only_the_embedding_gets_a_sparse_gradient():
    graph, lm, loss, _ = build()
    with graph.as_default():
        raw = dict(zip(lm.variables, tf.gradients(loss, list(lm.variables.values()))))
    assert list(lm.variables) == list(model.variable_shapes(TINY))
    assert [n for n, g in raw.items() if isinstance(g, tf.IndexedSlices)] == list(model.SPARSE_VARIABLES)
    assert all(isinstance(g, tf.Tensor) for n, g in raw.items() if n not in model.SPARSE_VARIABLES)


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


def test_the_learning_rate_follows_the_paper_schedule():
    small = model.CONFIGS["small"]  # 1.0 for 4 epochs, then halved every epoch
    assert [model.learning_rate(small, e) for e in range(6)] == [1.0, 1.0, 1.0, 1.0, 0.5, 0.25]
