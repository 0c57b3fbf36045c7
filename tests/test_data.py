import numpy as np
import pytest

from harness import UsageError, data


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_shards_split_the_batch_into_contiguous_equal_rows(workers):
    rows = [list(range(20))[data.shard(20, r, workers)] for r in range(workers)]
    assert sum(rows, []) == list(range(20))
    assert {len(r) for r in rows} == {20 // workers}


def test_a_batch_that_workers_do_not_divide_is_an_error():
    with pytest.raises(UsageError, match="3 workers do not divide the global batch of 20 rows"):
        data.shard(20, 0, 3)


def test_the_batch_of_a_step_depends_on_the_step_alone():
    tokens = np.arange(1000, dtype=np.int32)
    first, second = data.Batches(tokens, 4, 5), data.Batches(tokens.copy(), 4, 5)
    for step in [0, 7, 3, 7]:
        for a, b in zip(first(step), second(step)):
            np.testing.assert_array_equal(a, b)
    inputs, targets = first(3)
    assert inputs.shape == targets.shape == (4, 5)
    np.testing.assert_array_equal(inputs[:, 1:], targets[:, :-1])  # targets are the next words
    next_inputs, _ = first(4)
    np.testing.assert_array_equal(next_inputs[:, 0], targets[:, -1])  # each row continues where it stopped
    np.testing.assert_array_equal(inputs[:, 0], [15, 265, 515, 765])  # row r is the r-th quarter of the text


def test_an_epoch_wraps_around_and_restarts_the_state():
    import tensorflow as tf
    from harness import models
    from harness.training import StepFeed
    batches = data.Batches(np.arange(1000, dtype=np.int32), 4, 5)
    assert batches.epoch_size == 49  # (250 - 1) // 5
    np.testing.assert_array_equal(batches(49)[0], batches(0)[0])
    lstm = models.load("lstm")
    with tf.Graph().as_default():
        feed = StepFeed(lstm, lstm.CONFIGS["tiny"], batches, slice(0, 2))
        carried = np.ones(feed.state_shape, np.float32)
        assert [feed(s, carried)[feed.initial_state].any() for s in (1, 48, 49, 50, 98)] == [True, True, False,
                                                                                           True, False]


def test_a_corpus_too_small_for_one_batch_is_an_error():
    with pytest.raises(UsageError, match="too few for one batch"):
        data.Batches(np.arange(40, dtype=np.int32), 4, 10)


def test_the_synthetic_corpus_is_a_function_of_the_seed_with_zipf_frequencies():
    a, b, c = data.synthetic_tokens(100, 1), data.synthetic_tokens(100, 1), data.synthetic_tokens(100, 2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    counts = np.bincount(a, minlength=100)
    assert a.min() >= 0 and a.max() < 100
    # Zipf with exponent 1: word k is about (k+1) times rarer than word 0.
    assert counts.argmax() == 0
    assert 1.8 < counts[0] / counts[1] < 2.2 and 8 < counts[0] / counts[9] < 12


def test_a_text_gets_a_capped_vocabulary_with_unk(tmp_path):
    (tmp_path / "ptb.train.txt").write_text(" a b a c a b d\n e a b\n")
    ids = data.text_tokens(str(tmp_path), vocab_size=4)  # a:4 b:3 <eos>:2, the rest become <unk>
    words = "a b a c a b d <eos> e a b <eos>".split()
    vocabulary = {"a": 0, "b": 1, "<eos>": 2, "<unk>": 3}
    np.testing.assert_array_equal(ids, [vocabulary.get(w, 3) for w in words])
    np.testing.assert_array_equal(data.text_tokens(str(tmp_path / "ptb.train.txt"), 4), ids)  # file or dir


def test_an_unreadable_text_is_an_error(tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        data.text_tokens(str(tmp_path), 10)  # a directory without ptb.train.txt
