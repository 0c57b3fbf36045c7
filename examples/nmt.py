"""Neural machine translation with attention (Bahdanau, Cho and Bengio 2015, arXiv:1409.0473), written as the
TensorFlow tutorial's Keras code is: a GRU encoder; a GRU decoder that attends over the encoder's outputs
(additive attention) and is fed the previous target word (teacher forcing); padded sentence pairs and a loss
over the real target words. examples/nmt_plain.py is plain TensorFlow 2 with its own training loop (python -m
examples.nmt_plain); examples/nmt.py is the same file through the toolkit's contract, each change marked
"toolkit:" (docs/your-model.md, "From copied code")."""
import dataclasses

import numpy as np
from harness.keras_program import ratio, toolkit_trains  # toolkit: before TensorFlow (it fixes its kernels)
import tensorflow as tf

PAD, START, END = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    vocab_size: int      # each language's words, PAD, START and END included
    embedding_size: int
    units: int           # the GRUs' and the attention's width
    length: int          # words of a sentence, START, END and padding included
    batch_size: int
    learning_rate: float


CONFIGS = {"small": Config("small", vocab_size=2000, embedding_size=64, units=128, length=12, batch_size=32,
                           learning_rate=0.002),
           "tiny": Config("tiny", vocab_size=40, embedding_size=8, units=16, length=7, batch_size=4,
                          learning_rate=0.01)}


class SentencePairs:
    """A synthetic parallel corpus of fixed batches: source sentences of 1 to length - 2 random words, each
    translated by a fixed word-for-word dictionary and reversed, framed by START and END, padded with PAD."""
    epoch_size = 50

    def __init__(self, config, seed):
        rng = np.random.default_rng([seed, 3])
        words = config.length - 2
        shape = [self.epoch_size, config.batch_size, words]
        lengths = rng.integers(1, words + 1, shape[:2])[..., None]
        source = np.where(np.arange(words) < lengths, rng.integers(END + 1, config.vocab_size, shape), PAD)
        dictionary = np.concatenate([[PAD, START, END], END + 1 + rng.permutation(config.vocab_size - END - 1)])
        reversed_ = np.take_along_axis(source, np.clip(lengths - 1 - np.arange(words), 0, None), axis=2)
        translated = np.where(np.arange(words) < lengths, dictionary[reversed_], PAD)
        target = np.concatenate([np.full(shape[:2] + [1], START), translated, np.full(shape[:2] + [1], PAD)], 2)
        np.put_along_axis(target, lengths + 1, END, axis=2)
        self.source = np.concatenate([source, np.full(shape[:2] + [2], PAD)], 2).astype(np.int32)
        self.target = target.astype(np.int32)

    def __call__(self, step):
        return self.source[step % self.epoch_size], self.target[step % self.epoch_size]


class Encoder(tf.keras.Model):
    def __init__(self, config):
        super().__init__()
        self.embedding = tf.keras.layers.Embedding(config.vocab_size, config.embedding_size)
        self.gru = tf.keras.layers.GRU(config.units, return_sequences=True, return_state=True)

    def call(self, source):
        return self.gru(self.embedding(source))


class BahdanauAttention(tf.keras.layers.Layer):
    def __init__(self, units):
        super().__init__()
        self.query = tf.keras.layers.Dense(units)
        self.keys = tf.keras.layers.Dense(units)
        self.score = tf.keras.layers.Dense(1)

    def call(self, query, values, mask):
        scores = self.score(tf.nn.tanh(self.query(query[:, None, :]) + self.keys(values)))[:, :, 0]
        weights = tf.nn.softmax(tf.where(mask, scores, -1e9), axis=1)
        return tf.reduce_sum(weights[:, :, None] * values, axis=1)


class Decoder(tf.keras.Model):
    def __init__(self, config):
        super().__init__()
        self.embedding = tf.keras.layers.Embedding(config.vocab_size, config.embedding_size)
        self.attention = BahdanauAttention(config.units)
        self.gru = tf.keras.layers.GRU(config.units, return_sequences=True, return_state=True)
        self.output_layer = tf.keras.layers.Dense(config.vocab_size)

    def call(self, word, hidden, encoded, mask):
        context = self.attention(hidden, encoded, mask)
        x = tf.concat([context[:, None, :], self.embedding(word)], axis=-1)
        output, hidden = self.gru(x, initial_state=hidden)
        return self.output_layer(output[:, 0]), hidden


def forward(encoder, decoder, source, target):
    """The logits of every target word after START, each predicted from the words before it (teacher forcing)."""
    encoded, hidden = encoder(source)
    logits = []
    for t in range(target.shape[1] - 1):
        word_logits, hidden = decoder(target[:, t:t + 1], hidden, encoded, source != PAD)
        logits.append(word_logits)
    return tf.stack(logits, axis=1)


def masked_loss(target, logits):
    """Cross-entropy over the real target words: padding counts for nothing."""
    per_word = tf.keras.losses.sparse_categorical_crossentropy(target, logits, from_logits=True)
    real = tf.cast(target != PAD, tf.float32)
    return ratio(tf.reduce_sum(per_word * real), tf.reduce_sum(real))  # toolkit: every worker's sum, every count


def train(config, steps, seed=1):
    tf.random.set_seed(seed)
    pairs = SentencePairs(config, seed)
    encoder, decoder = Encoder(config), Decoder(config)
    optimizer = tf.keras.optimizers.Adam(config.learning_rate)

    @tf.function
    def train_step(source, target):
        with tf.GradientTape() as tape:
            loss = masked_loss(target[:, 1:], forward(encoder, decoder, source, target))
        variables = encoder.trainable_variables + decoder.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    for step in range(steps):
        loss = train_step(*pairs(step))
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step + 1}/{steps}  loss {float(loss):.4f}")


toolkit_trains(model=lambda config: (Encoder(config), Decoder(config)), data=SentencePairs,  # toolkit: what trains
               loss=lambda models, source, target: masked_loss(target[:, 1:], forward(*models, source, target)),
               optimizer=lambda config: tf.keras.optimizers.Adam(config.learning_rate))


if __name__ == "__main__":
    train(CONFIGS["tiny"], 300)
