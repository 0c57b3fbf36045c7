"""The Transformer language model (models/transformer.py) under the model contract: its learning-rate schedule,
its causal attention, which of its gradients are sparse, and a loss that splits over rows."""
import argparse

import numpy as np
import pytest
import tensorflow as tf

from harness import data, determinism, models
from harness.training import StepFeed
from harness.variables import Params, StepRandom

TRANSFORMER = models.load("transformer")
TINY = TRANSFORMER.CONFIGS["tiny"]
ONE_THREAD = determinism.session_config(argparse.Namespace(intra_op_threads=1, inter_op_threads=1))


def build(seed=1):
    """A graph with the tiny model and its inputs; returns (graph, params, feed)."""
    graph = tf.Graph()
    with graph.as_default():
        params = Params(TRANSFORMER, TINY, seed)
        feed = StepFeed(TRANSFORMER, TINY, TRANSFORMER.data(TINY, "", seed), slice(None))
    return graph, params, feed


def run(graph, fetches, feed_dict):
    """`fetches` after initialising the variables, with one thread as the runners use."""
    with tf.compat.v1.Session(graph=graph, config=ONE_THREAD) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        return session.run(fetches, feed_dict)


def test_the_learning_rate_warms_up_then_decays_as_the_paper_s():
    """lrate = d_model^-0.5 * min(t^-0.5, t * warmup^-1.5) at the t-th step, t = step + 1: linear up to its peak
    at t = warmup, then 1/sqrt(t)."""
    config = TRANSFORMER.CONFIGS["small"]
    d, warmup = config.d_model, config.warmup_steps
    rate = TRANSFORMER.update_rule(config).learning_rate

    def at(step):
        return float(rate(tf.constant(step, tf.int64), tf.constant(0, tf.int64)))

    peak = 1.0 / np.sqrt(d * warmup)
    assert at(0) == pytest.approx(1.0 / (np.sqrt(d) * warmup ** 1.5), rel=1e-6)
    assert at(warmup // 2 - 1) == pytest.approx(peak / 2, rel=1e-6)
    assert at(warmup - 1) == pytest.approx(peak, rel=1e-6)
    assert at(4 * warmup - 1) == pytest.approx(peak / 2, rel=1e-6)
    assert at(warmup - 2) < at(warmup - 1) > at(warmup)


def test_a_position_attends_only_to_itself_and_earlier_ones():
    """Changing the word at position 3 leaves the losses at positions 0-2 bit for bit, dropout included, and
    changes those from 3 on."""
    graph, params, feed = build()
    with graph.as_default():
        random = StepRandom(1, feed.step, slice(0, TINY.batch_size), TINY.batch_size)
        losses = TRANSFORMER.position_losses(TINY, params, feed.inputs, random)
    fed = feed(3, None)
    words = fed[feed.inputs[0]]
    changed = words.copy()
    changed[:, 3] = (changed[:, 3] + 1) % TINY.vocab_size
    before, after = (run(graph, losses, {**fed, feed.inputs[0]: w})
                     for w in (words, changed))
    np.testing.assert_array_equal(before[:, :3], after[:, :3])
    assert (before[:, 3:] != after[:, 3:]).all()


def test_only_the_embedding_has_a_sparse_gradient():
    graph, params, feed = build()
    with graph.as_default():
        loss, _ = feed.loss(params, 1)
        gradients = dict(zip(params.variables, tf.gradients(loss, params.variable_list)))
    assert list(params.variables) == list(TRANSFORMER.variables(TINY))
    assert [name for name, g in gradients.items() if isinstance(g, tf.IndexedSlices)] == ["embedding"]
    assert all(isinstance(g, tf.Tensor) for name, g in gradients.items() if name != "embedding")


def test_the_loss_of_all_rows_is_the_mean_of_its_halves():
    """The mean over rows of a per-row loss, each row's dropout its own whatever the split: two workers'
    objectives average to the global batch's."""
    graph, params, feed = build()
    with graph.as_default():
        whole, _ = feed.loss(params, 1)
        halves = [feed.loss(params, 1, data.shard(TINY.batch_size, r, 2))[0] for r in range(2)]
    whole, halves = run(graph, [whole, halves], feed(7, None))
    np.testing.assert_allclose(whole, np.mean(halves), rtol=1e-6)
    assert halves[0] != halves[1]
