"""A word tagger written as copied TensorFlow 2 / Keras code is: Keras layers (an embedding, dropout, dense layers,
layer normalisation) made once per graph with params.build, padded sentences and a masked loss returned as (sum,
real words). The tests' own model of the contract's "From copied code" part."""
import dataclasses

import numpy as np
import tensorflow as tf

from harness.update import Adam, Rule


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    vocab_size: int
    tags: int
    width: int
    length: int       # words per sentence, padding included
    batch_size: int
    dropout: float


CONFIGS = {"tiny": Config("tiny", vocab_size=40, tags=3, width=8, length=6, batch_size=4, dropout=0.2)}


class Sentences:
    """Ten fixed batches of sentences of 1 to `length` words (id 0 pads), each word tagged by its id modulo tags."""
    epoch_size = 10

    def __init__(self, config, seed):
        rng = np.random.default_rng([seed, 11])
        shape = [self.epoch_size, config.batch_size, config.length]
        lengths = rng.integers(1, config.length + 1, shape[:2])
        self.words = np.where(np.arange(config.length) < lengths[..., None],
                              rng.integers(1, config.vocab_size, shape), 0).astype(np.int32)
        self.tags = (self.words % config.tags).astype(np.int32)

    def __call__(self, step):
        return self.words[step % self.epoch_size], self.tags[step % self.epoch_size]


class Tagger(tf.keras.Model):
    def __init__(self, config):
        super().__init__()
        self.embedding = tf.keras.layers.Embedding(config.vocab_size, config.width)
        self.dropout = tf.keras.layers.Dropout(config.dropout)
        self.hidden = tf.keras.layers.Dense(config.width, activation="relu")
        self.norm = tf.keras.layers.LayerNormalization()
        self.out = tf.keras.layers.Dense(config.tags)

    def call(self, words, training=False):
        x = self.dropout(self.embedding(words), training=training)
        return self.out(self.norm(self.hidden(x)))


def data(config, data_path, seed):
    return Sentences(config, seed)


def loss(config, params, inputs, random):
    words, tags = inputs
    tagger = params.build(lambda: Tagger(config))
    per_word = tf.keras.losses.sparse_categorical_crossentropy(tags, tagger(words, training=True), from_logits=True)
    real = tf.cast(words > 0, tf.float32)
    return tf.reduce_sum(per_word * real), tf.reduce_sum(real)


def update_rule(config):
    return Rule(Adam(), lambda step, epoch: tf.constant(0.01))
