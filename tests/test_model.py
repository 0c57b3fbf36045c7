"""The model contract's machinery (harness/variables.py, harness/update.py) and the LSTM written to it."""
import argparse
import dataclasses
import hashlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, bit_identical
from harness import data, determinism, models, reduction, update
from harness.training import StepFeed
from harness.partitioning import join_rows, part_rows, split_rows
from harness.variables import Params, StepRandom, Variable, initial_value, uniform

LSTM = models.load("lstm")
TINY = LSTM.CONFIGS["tiny"]
LM1B_TINY = LSTM.CONFIGS["lm1b-tiny"]
LM1B_SPARSE = ("embedding", "softmax_w", "softmax_b")


def build(config=TINY, seed=1, rows=slice(None), partitions=1, strategy="mod"):
    """A graph with the model and one worker's loss on `rows`; returns (graph, params, loss, feed)."""
    graph = tf.Graph()
    with graph.as_default():
        params = Params(LSTM, config, seed, LM1B_SPARSE if config.num_sampled else ("embedding",), partitions,
                        strategy)
        feed = StepFeed(LSTM, config, LSTM.data(config, "", seed), rows)
        loss, _ = feed.loss(params, seed)
    return graph, params, loss, feed


def initial_values(graph, params):
    """{name: value} of every variable after initialisation, a partitioned one with its parts joined in row order."""
    with graph.as_default():
        whole = {name: params[name] for name in params.variables}
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
    specs = LSTM.variables(TINY)
    for name, value in values.items():
        assert value.shape == specs[name].shape
        np.testing.assert_array_equal(value, initial_value(specs[name], 5, name))  # eager: the same function
        assert np.abs(value).max() <= TINY.init_scale
    embedding = values["embedding"]  # uniform in [-0.1, 0.1]: mean 0, standard deviation 0.1 / sqrt(3)
    assert abs(embedding.mean()) < 0.005 and embedding.std() == pytest.approx(0.1 / np.sqrt(3), rel=0.05)
    assert not np.array_equal(values["lstm_0/bias"], values["lstm_1/bias"][:64])  # keyed by the name


def test_the_toolkit_s_initializers_map_uniform_numbers():
    ones, normal = Variable([3], lambda u: tf.zeros_like(u) + 1.0), Variable([20_000], lambda u: tf.math.ndtri(u))
    from harness.variables import normal as normal_init
    assert (initial_value(ones, 1, "b").numpy() == 1.0).all()
    drawn = initial_value(Variable([20_000], normal_init(2.0)), 1, "w").numpy()
    assert np.isfinite(drawn).all() and drawn.std() == pytest.approx(2.0, rel=0.05)
    assert initial_value(Variable([], lambda u: u), 1, "scalar").shape == ()
    del normal


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_initial_values_do_not_depend_on_the_partitioning(strategy):
    """A part generates exactly its rows of the whole value, contiguous ("div") or every 4th ("mod");
    lm1b-tiny's rows of 6 numbers put the rows' first elements inside Philox blocks of 4, and softmax_b's rows
    of one number everywhere."""
    whole = initial_values(*build(LM1B_TINY)[:2])
    graph, params, _, _ = build(LM1B_TINY, partitions=4, strategy=strategy)
    assert set(params.partitioned) == set(LM1B_SPARSE)
    assert all(len(params.variables[name]) == 4 for name in params.partitioned)
    parted = initial_values(graph, params)
    assert all(bit_identical(whole[name], parted[name]) for name in whole)
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        part_1 = session.run(params.variables["embedding"][1])
    rows_of_part_1 = np.arange(1, 500, 4) if strategy == "mod" else np.arange(125, 250)
    assert bit_identical(part_1, whole["embedding"][rows_of_part_1])


def test_mod_places_word_i_in_part_i_mod_p_as_tensorflow_1_did():
    """TensorFlow 1's embedding_lookup(params, ids, partition_strategy="mod") (still in tf.compat.v1): id i is
    row i // P of params[i % P]. The parts hold exactly those rows, so a lookup of every word gives the whole
    table in word order; the same with "div", contiguous ranges."""
    assert part_rows(10, 3, "mod") == [range(0, 10, 3), range(1, 10, 3), range(2, 10, 3)]
    assert part_rows(10, 3, "div") == [range(0, 4), range(4, 7), range(7, 10)]
    for strategy in ("mod", "div"):
        with tf.Graph().as_default():
            sizes = [len(rows) for rows in part_rows(10, 3, strategy)]
            assert sizes == [4, 3, 3]  # both strategies: the first 10 % 3 parts one row longer
            values = np.arange(20, dtype=np.float32).reshape(10, 2)
            split = split_rows(tf.constant(values), part_rows(10, 3, strategy))
            looked_up = tf.compat.v1.nn.embedding_lookup(split, tf.range(10), partition_strategy=strategy)
            with tf.compat.v1.Session() as session:
                found, joined, split = session.run([looked_up, join_rows(split, strategy), split])
        np.testing.assert_array_equal(found, values)
        np.testing.assert_array_equal(joined, values)
        if strategy == "mod":
            np.testing.assert_array_equal(split[1], values[[1, 4, 7]])


def test_strided_rows_draw_the_numbers_of_tensorflows_generator():
    """initial_value's own Philox (for the rows of a "mod" part) gives the numbers TensorFlow's kernel gives
    for the whole value, at rows whose first element starts anywhere in a block of 4."""
    specs = LSTM.variables(LM1B_TINY)
    for name in ("embedding", "softmax_b", "lstm_0/kernel"):
        whole = initial_value(specs[name], 3, name).numpy()
        for rows in (range(1, 500, 4), range(3, 31, 7), range(0, 1, 2)):
            rows = range(rows.start, min(rows.stop, len(whole)), rows.step)
            assert bit_identical(initial_value(specs[name], 3, name, rows).numpy(), whole[list(rows)])


@pytest.mark.parametrize("config, sparse", [(TINY, ["embedding"]), (LM1B_TINY, list(LM1B_SPARSE))],
                         ids=["tiny", "lm1b-tiny"])
def test_the_sparse_variables_are_those_with_indexed_slices_gradients(config, sparse):
    graph, params, loss, _ = build(config)
    with graph.as_default():
        raw = dict(zip(params.variables, tf.gradients(loss, [params.variables[n] for n in params.variables])))
    assert list(params.variables) == list(LSTM.variables(config))
    assert [n for n, g in raw.items() if isinstance(g, tf.IndexedSlices)] == sparse
    assert all(isinstance(g, tf.Tensor) for n, g in raw.items() if n not in sparse)


def test_worker_gradients_have_one_embedding_row_per_word():
    graph, params, loss, feed = build()
    words = np.array([[3, 1, 3, 3, 2]] * TINY.batch_size, np.int32)
    with graph.as_default():
        gradients = params.gradients(loss)
        dense_raw = tf.convert_to_tensor(tf.gradients(loss, params.variables["embedding"])[0])
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        fed = {**feed(3, None), feed.inputs[0]: words, feed.inputs[1]: words}
        sparse, expected = session.run([gradients[0], dense_raw], fed)
    assert list(sparse.indices) == [3, 1, 2]  # in order of first appearance
    np.testing.assert_allclose(sparse.values, expected[[3, 1, 2]], rtol=1e-6)


def test_per_row_randomness_does_not_depend_on_the_sharding():
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        def draw(step, rows):
            return StepRandom(1, tf.constant(step, tf.int64), rows, 4).rows("dropout", [3, 5])
        whole, halves, other_step = session.run([draw(11, slice(None)), [draw(11, data.shard(4, r, 2))
                                                                          for r in range(2)], draw(12, slice(None))])
        shared = session.run([StepRandom(1, tf.constant(11, tf.int64), data.shard(4, r, 2), 4).shared("c", [7])
                              for r in range(2)])
    np.testing.assert_array_equal(np.concatenate(halves, axis=0), whole)
    assert whole.shape == (4, 3, 5) and not np.array_equal(whole, other_step)
    np.testing.assert_array_equal(*shared)


def test_the_workers_mean_adds_in_rank_order_then_divides():
    """((g0 + g1) + g2) / 3, dense and row by row: 1e8 - 1e8 + 1 is 1 in this order and 0 in any other that adds 1
    to -1e8 first (float32's step at 1e8 is 8); sparse rows concatenated in rank order, each index once."""
    def worker(rows, indices, dense):
        return [tf.IndexedSlices(tf.constant(rows), tf.constant(indices), tf.constant([8, 1])), tf.constant(dense)]

    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        sparse, dense = reduction.workers_mean([worker([[1e8], [4.0]], [5, 1], [1e8, 2.0]),
                                                worker([[-1e8]], [5], [-1e8, 5.0]),
                                                worker([[1.0]], [5], [1.0, 6.0])])
        rows, indices, dense = session.run([sparse.values, sparse.indices, dense])
    third = np.float32(1) / np.float32(3)
    np.testing.assert_array_equal(indices, [5, 1])
    np.testing.assert_array_equal(rows, [[third], [np.float32(4) / np.float32(3)]])
    np.testing.assert_array_equal(dense, [third, np.float32(13) / np.float32(3)])


def two_variables(rule, table, bias):
    """What update needs of Params: a sparse "embedding" and a dense "lstm_0/bias" with the rule's slots."""
    variables = {"embedding": tf.Variable(table), "lstm_0/bias": tf.Variable(bias)}
    slots = {name: {slot: tf.Variable(tf.fill(v.shape, value)) for slot, value in rule.optimizer.slots}
             for name, v in variables.items()}
    return argparse.Namespace(rule=rule, variables=variables, slots=slots, partitioned=(), strategy="mod")


def test_the_update_clips_the_global_norm_and_takes_a_step():
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        params = two_variables(update.Rule(update.SGD(), None, clip_norm=1.0), np.zeros([4, 2], np.float32),
                               np.zeros([2], np.float32))
        table, bias = params.variables.values()
        gradients = [tf.IndexedSlices(tf.constant([[3.0, 0.0], [0.0, 0.0]]), tf.constant([2, 2]),
                                      tf.constant([4, 2])), tf.constant([0.0, 4.0])]
        train_op, norm = update.update(params, gradients, 0.5, tf.constant(0, tf.int64))
        session.run(tf.compat.v1.global_variables_initializer())
        norm, _ = session.run([norm, train_op])
        table, bias = session.run([table, bias])
    assert norm == pytest.approx(5.0)  # sqrt(3^2 + 4^2): the gradient is scaled to norm 1
    np.testing.assert_allclose(table[2], [-0.5 * 0.6, 0.0])
    np.testing.assert_allclose(bias, [0.0, -0.5 * 0.8])
    assert not table[[0, 1, 3]].any()


def densified(gradients):
    """Every sparse gradient summed into a dense tensor of its variable's shape."""
    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in gradients]


@pytest.mark.parametrize("name", ["small", "lm1b-tiny"])
def test_the_scatter_update_equals_the_dense_update_bit_for_bit(name):
    """update scatters a sparse gradient into the rows it touches; summing it into a dense table first and
    updating the whole table (Horovod's --sparse_as_dense) gives the same bits: the norm, and every variable
    and slot (lm1b-tiny: Adagrad). Two workers' gradients of one step of real shapes."""
    config = LSTM.CONFIGS[name]
    graph = tf.Graph()
    with graph.as_default():
        params = Params(LSTM, config, 1)
        feed = StepFeed(LSTM, config, LSTM.data(config, "", 1), slice(None))
        gradients = [params.gradients(feed.loss(params, 1, data.shard(config.batch_size, r, 2))[0]) for r in range(2)]
        averaged = reduction.workers_mean(gradients)
        updates = {"scatter": update.update(params, averaged, 0.5, feed.step),
                   "dense": update.update(params, densified(averaged), 0.5, feed.step)}
        state = {v.op.name: v for v in params.state()}
    results = {}
    config_of_every_runner = determinism.session_config(argparse.Namespace(intra_op_threads=1, inter_op_threads=1))
    with tf.compat.v1.Session(graph=graph, config=config_of_every_runner) as session:
        for kind, (train_op, norm) in updates.items():
            session.run(tf.compat.v1.global_variables_initializer())
            results[kind] = session.run([norm, train_op], feed(0, None))[0], session.run(state)
    (scatter_norm, scatter), (dense_norm, dense) = results["scatter"], results["dense"]
    assert bit_identical(scatter_norm, dense_norm)
    assert all(bit_identical(scatter[name], dense[name]) for name in scatter)
    initial = initial_values(graph, params)
    assert np.any(scatter["embedding"] != initial["embedding"])


def test_adam_updates_every_row_and_a_sparse_gradient_as_its_densified_self():
    """Adam on a sparse gradient moves every row with a moment (rows 1 and 4 at the second step, which touches
    only row 2), as TensorFlow's Adam does, with the bits of the same gradient densified; and it takes
    TensorFlow's step to float32 rounding (TF's kernel folds the bias correction in elsewhere)."""
    rng = np.random.default_rng(2)
    table, bias = rng.standard_normal([6, 3]).astype(np.float32), rng.standard_normal([4]).astype(np.float32)
    touched = [np.array([1, 4], np.int32), np.array([2], np.int32)]
    rows = [rng.standard_normal([len(t), 3]).astype(np.float32) for t in touched]
    dense = [rng.standard_normal([4]).astype(np.float32) for _ in touched]
    rule = update.Rule(update.Adam(0.9, 0.98, 1e-9), None)
    results = []
    for kind in ("sparse", "densified", "tensorflow"):
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            params = two_variables(rule, table, bias)
            gradients = [[tf.IndexedSlices(tf.constant(r), tf.constant(t), tf.constant([6, 3])), tf.constant(d)]
                         for r, t, d in zip(rows, touched, dense)]
            if kind == "tensorflow":
                optimizer = tf.compat.v1.train.AdamOptimizer(0.01, 0.9, 0.98, 1e-9)
                steps = [optimizer.apply_gradients(zip(densified(g), params.variables.values())) for g in gradients]
            else:
                steps = [update.update(params, densified(g) if kind == "densified" else g, 0.01,
                                       tf.constant(t, tf.int64))[0] for t, g in enumerate(gradients)]
            session.run(tf.compat.v1.global_variables_initializer())
            results.append([(session.run(step), session.run(list(params.variables.values())))[1] for step in steps])
    (sparse, densified_, theirs) = results
    assert all(bit_identical(a, b) for step_a, step_b in zip(sparse, densified_) for a, b in zip(step_a, step_b))
    first, second = sparse[0][0], sparse[1][0]
    assert not np.array_equal(second[[1, 4]], first[[1, 4]]) and bit_identical(second[[0, 3, 5]], table[[0, 3, 5]])
    for ours, tensorflow in zip(sparse[1], theirs[1]):
        np.testing.assert_allclose(ours, tensorflow, rtol=1e-5, atol=1e-6)


# The update rules the toolkit offers; a rule of your own (docs/your-model.md, "Update rules") belongs here too.
RULES = [update.SGD(), update.Adagrad(0.1), update.Adagrad(0.1, 1e-7), update.Adam(), update.Adam(weight_decay=0.01),
         update.Momentum(0.9), update.Momentum(0.9, nesterov=True), update.RMSProp()]


def steps_of_a_rule(optimizer, densify=False, partitions=1, steps=3):
    """A table read by rows (a sparse gradient, a row twice) and a bias after `steps` steps of `optimizer`."""
    model = argparse.Namespace(
        variables=lambda config: {"table": Variable([7, 3], uniform(1.0)), "bias": Variable([3], uniform(1.0))},
        update_rule=lambda config: update.Rule(optimizer, None, clip_norm=2.0))
    runners = determinism.session_config(argparse.Namespace(intra_op_threads=1, inter_op_threads=1))
    with tf.Graph().as_default(), tf.compat.v1.Session(config=runners) as session:
        params = Params(model, None, 1, ("table",), partitions)
        step = tf.compat.v1.placeholder(tf.int64, [])
        weights = tf.sin(tf.cast(step + 1, tf.float32) * tf.reshape(tf.range(9, dtype=tf.float32), [3, 3]))
        rows = params.gather("table", tf.constant([1, 4, 1])) * weights
        gradients = params.gradients(tf.reduce_sum(rows * params["bias"]) + tf.reduce_sum(params["bias"] ** 2))
        train_op, _ = update.update(params, densified(gradients) if densify else gradients, 0.1, step)
        session.run(tf.compat.v1.global_variables_initializer())
        for t in range(steps):
            session.run(train_op, {step: t})
        return session.run({name: params[name] for name in params.variables})


@pytest.mark.parametrize("optimizer", RULES, ids=repr)
def test_an_update_rule_gives_the_same_bits_sparse_densified_and_partitioned(optimizer):
    """The update rule protocol (harness/update.py): a sparse gradient and its densified form (horovod-dense), and
    any partitioning (run_tf.py and run_parallax.py --partitions), give the same bits; the rule moves the rows."""
    sparse = steps_of_a_rule(optimizer)
    for other in (steps_of_a_rule(optimizer, densify=True), steps_of_a_rule(optimizer, partitions=3)):
        assert all(bit_identical(sparse[name], other[name]) for name in sparse)
    initial = steps_of_a_rule(optimizer, steps=0)
    assert (sparse["table"][[1, 4]] != initial["table"][[1, 4]]).all()
    assert (sparse["bias"] != initial["bias"]).all()
    untouched = [0, 2, 3, 5, 6]
    if not optimizer.updates_every_row:  # what the bench prices: the rows of the gradient, no others
        assert bit_identical(sparse["table"][untouched], initial["table"][untouched])
    elif getattr(optimizer, "weight_decay", 0):  # AdamW decays every row
        assert (sparse["table"][untouched] != initial["table"][untouched]).all()


def test_sampled_candidates_are_drawn_from_the_seed_and_the_step_alone():
    """Every worker draws the same words, num_sampled distinct ones, Zipfian over the vocabulary, and another
    step or seed draws others."""
    def candidates(seed, step, rows):
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            drawn = [LSTM._candidates(LM1B_TINY, StepRandom(seed, tf.constant(s, tf.int64), rows, 4))
                     for s in range(step, step + 50)]
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
    of the loss must give every other count TensorFlow reports (to float32 roundings); the with-replacement
    formula, num_sampled * p, is off by more than 50% for the frequent words."""
    vocab, num_sampled = 500, 32
    config = dataclasses.replace(LM1B_TINY, vocab_size=vocab, num_sampled=num_sampled)
    true = tf.constant([[1], [7], [400]], tf.int64)
    candidates, true_count, sampled_count = tf.random.log_uniform_candidate_sampler(
        true, 1, num_sampled, unique=True, range_max=vocab, seed=3)
    p = np.log1p(1.0 / (candidates.numpy() + 1.0)) / np.log(vocab + 1.0)
    tries = int(round(np.log1p(-sampled_count.numpy()[0]) / np.log1p(-p[0])))
    words = np.concatenate([true.numpy()[:, 0], candidates.numpy()]).astype(np.int32)
    assert tries > num_sampled
    ours = np.exp(LSTM._log_expected_count(config, tf.constant(words), tf.constant(tries)).numpy()).astype(np.float64)
    theirs = np.concatenate([true_count.numpy()[:, 0], sampled_count.numpy()]).astype(np.float64)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    with_replacement = num_sampled * np.log1p(1.0 / (words + 1.0)) / np.log(vocab + 1.0)
    assert np.max(np.abs(with_replacement / theirs - 1)) > 0.5


def test_adagrad_takes_tensorflows_adagrad_step():
    """lm1b's rule of one step against tf.compat.v1.train.AdagradOptimizer(0.2, initial_accumulator_value=1.0)
    on the same gradients, sparse and dense: the accumulators bit for bit (both add g * g), the variables within
    2 float32 ulps (TensorFlow's kernel multiplies by an approximate 1/sqrt(acc), ours divides by the correctly
    rounded sqrt(acc))."""
    rule = dataclasses.replace(LSTM.update_rule(LM1B_TINY), clip_norm=0.0)  # no clipping: the bare optimiser
    rng = np.random.default_rng(1)
    table, bias = rng.standard_normal([50, 6]).astype(np.float32), rng.standard_normal([8]).astype(np.float32)
    rows = np.array([3, 17, 40], np.int32)
    values = rng.standard_normal([3, 6]).astype(np.float32)
    dense = rng.standard_normal([8]).astype(np.float32)
    results = []
    for ours in (True, False):
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            params = two_variables(rule, table, bias)
            gradients = [tf.IndexedSlices(tf.constant(values), tf.constant(rows), tf.constant([50, 6])),
                         tf.constant(dense)]
            if ours:
                step, _ = update.update(params, gradients, 0.2, tf.constant(0, tf.int64))
                slots = [s["Adagrad"] for s in params.slots.values()]
            else:
                gradients[0] = tf.IndexedSlices(gradients[0].values * 4.0, gradients[0].indices,
                                                gradients[0].dense_shape)  # the embedding: times the batch of 4
                optimizer = tf.compat.v1.train.AdagradOptimizer(0.2, initial_accumulator_value=1.0)
                step = optimizer.apply_gradients(zip(gradients, params.variables.values()))
                slots = [optimizer.get_slot(v, "accumulator") for v in params.variables.values()]
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(step)
            results.append(session.run([*params.variables.values(), *slots]))
    (table_ours, bias_ours, *slots_ours), (table_tf, bias_tf, *slots_tf) = results
    assert all(bit_identical(a, b) for a, b in zip(slots_ours, slots_tf))
    assert bit_identical(table_ours[[0, 1, 2, 49]], table[[0, 1, 2, 49]])  # untouched rows stay
    for a, b in ((table_ours, table_tf), (bias_ours, bias_tf)):
        assert np.max(np.abs(a - b) / np.spacing(np.abs(b))) <= 2
    assert not np.allclose(table_ours[rows], table[rows])


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_a_checkpoint_holds_whole_tables_whatever_the_partitioning(tmp_path, strategy):
    """Saved from 4 parts, restored into 3 of the other strategy: the same names and values as an
    unpartitioned model's, slots ("<name>/Adagrad") included."""
    whole = initial_values(*build(LM1B_TINY)[:2])
    graph, params, _, _ = build(LM1B_TINY, partitions=4, strategy=strategy)
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        bumped_part = params.slots["softmax_w"]["Adagrad"][2]
        session.run(bumped_part.assign_add(tf.ones_like(bumped_part)))
        prefix = params.saver().save(session, str(tmp_path / "model.ckpt"))
    reader = tf.train.load_checkpoint(prefix)
    names = list(LSTM.variables(LM1B_TINY))
    assert sorted(reader.get_variable_to_shape_map()) == sorted(names + [n + "/Adagrad" for n in names])
    assert all(bit_identical(reader.get_tensor(n), whole[n]) for n in names)
    accumulator = reader.get_tensor("softmax_w/Adagrad")
    bumped = part_rows(LM1B_TINY.vocab_size, 4, strategy)[2]
    assert (accumulator[list(bumped)] == 2.0).all() and (np.delete(accumulator, list(bumped), 0) == 1.0).all()
    other = "div" if strategy == "mod" else "mod"
    graph, params, _, _ = build(LM1B_TINY, seed=9, partitions=3, strategy=other)
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        params.saver().restore(session, prefix)
        joined = session.run(join_rows([p.read_value() for p in params.slots["softmax_w"]["Adagrad"]], other))
    assert bit_identical(joined, accumulator)


def test_the_learning_rate_follows_the_paper_schedule():
    rate = LSTM.update_rule(LSTM.CONFIGS["small"]).learning_rate  # 1.0 for 4 epochs, then halved every epoch
    step = tf.constant(0, tf.int64)
    assert [float(rate(step, tf.constant(e, tf.int64))) for e in range(6)] == [1.0, 1.0, 1.0, 1.0, 0.5, 0.25]
