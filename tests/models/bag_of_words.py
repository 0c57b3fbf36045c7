"""A bag-of-words classifier, the tests' own model: it plugs into every runner through the model contract
alone. No carried state, its own synthetic data, a sparse embedding, Adagrad, examples as its unit."""
import dataclasses

import numpy as np
import tensorflow as tf

from harness.update import Adagrad, Rule
from harness.variables import Variable, constant, glorot_uniform, uniform


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    vocab_size: int
    classes: int
    width: int
    words: int        # words per example
    batch_size: int
    keep_prob: float  # dropout on the averaged embedding


CONFIGS = {"tiny": Config("tiny", vocab_size=60, classes=3, width=4, words=6, batch_size=4, keep_prob=0.8)}


class Examples:
    """Ten fixed batches of random words, labelled by whether their ids sum to a multiple of 3."""
    epoch_size = 10

    def __init__(self, config, seed):
        rng = np.random.default_rng([seed, 7])
        self.words = rng.integers(0, config.vocab_size, [self.epoch_size, config.batch_size, config.words],
                                  dtype=np.int32)
        self.labels = (self.words.sum(axis=2) % config.classes).astype(np.int32)

    def __call__(self, step):
        return self.words[step % self.epoch_size], self.labels[step % self.epoch_size]


def data(config, data_path, seed):
    return Examples(config, seed)


def variables(config):
    return {"embedding": Variable([config.vocab_size, config.width], uniform(0.1)),
            "output/kernel": Variable([config.width, config.classes], glorot_uniform(config.width, config.classes)),
            "output/bias": Variable([config.classes], constant(0.0))}


def loss(config, params, inputs, random):
    words, labels = inputs
    features = tf.reduce_mean(params.gather("embedding", words), axis=1)
    features *= tf.where(random.rows("dropout", [config.width]) < config.keep_prob, 1.0 / config.keep_prob, 0.0)
    logits = tf.matmul(features, params["output/kernel"]) + params["output/bias"]
    per_row = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return tf.reduce_sum(per_row) / words.shape[0]


def update_rule(config):
    return Rule(Adagrad(0.1), lambda step, epoch: tf.constant(0.5), clip_norm=1.0)
