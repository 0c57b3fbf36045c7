"""A masked language model in BERT's style (Devlin et al. 2019, arXiv:1810.04805), written as Keras code is: token
and position embeddings; Transformer encoder blocks of multi-head self-attention and a GELU feed-forward layer,
each with dropout, a residual and layer normalisation; an output layer tied to the token embedding; 15% of the
positions masked (80% [MASK], 10% a random word, 10% kept) and a loss over them only; AdamW with a linear warm-up
and decay. examples/bert_plain.py is plain TensorFlow 2 with its own training loop (python -m
examples.bert_plain); examples/bert.py is the same file through the toolkit's contract, each change marked
"toolkit:" (docs/your-model.md, "From copied code")."""
import dataclasses

import numpy as np
from harness.keras_program import ratio, toolkit_trains  # toolkit: before TensorFlow (it fixes its kernels)
import tensorflow as tf

PAD, MASK, SPECIAL = 0, 1, 2  # ids below SPECIAL are no words


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    vocab_size: int
    width: int
    heads: int
    layers: int
    length: int          # positions of a sequence
    batch_size: int
    dropout: float
    learning_rate: float
    warmup_steps: int
    total_steps: int     # the learning rate decays linearly to 0 here
    weight_decay: float


CONFIGS = {"small": Config("small", vocab_size=8000, width=128, heads=4, layers=2, length=64, batch_size=32,
                           dropout=0.1, learning_rate=5e-4, warmup_steps=100, total_steps=10000, weight_decay=0.01),
           "tiny": Config("tiny", vocab_size=50, width=8, heads=2, layers=1, length=8, batch_size=4, dropout=0.1,
                          learning_rate=1e-3, warmup_steps=10, total_steps=1000, weight_decay=0.01)}


class MaskedSentences:
    """A synthetic corpus of Zipfian words in fixed batches, 15% of each sequence's positions chosen to predict:
    (inputs with the chosen positions replaced, the original words, 1.0 at the chosen positions)."""
    epoch_size = 50

    def __init__(self, config, seed):
        rng = np.random.default_rng([seed, 5])
        shape = [self.epoch_size, config.batch_size, config.length]
        words = SPECIAL + (rng.zipf(1.3, shape) - 1) % (config.vocab_size - SPECIAL)
        chosen = rng.random(shape) < 0.15
        draw = rng.random(shape)
        replaced = np.where(draw < 0.8, MASK, np.where(draw < 0.9, rng.integers(SPECIAL, config.vocab_size, shape),
                                                       words))
        self.inputs = np.where(chosen, replaced, words).astype(np.int32)
        self.targets = words.astype(np.int32)
        self.weights = chosen.astype(np.float32)

    def __call__(self, step):
        i = step % self.epoch_size
        return self.inputs[i], self.targets[i], self.weights[i]


class EncoderBlock(tf.keras.layers.Layer):
    def __init__(self, config):
        super().__init__()
        self.attention = tf.keras.layers.MultiHeadAttention(config.heads, config.width // config.heads,
                                                            dropout=config.dropout)
        self.attention_norm = tf.keras.layers.LayerNormalization(epsilon=1e-12)
        self.feed_forward = tf.keras.Sequential([tf.keras.layers.Dense(4 * config.width, activation="gelu"),
                                                 tf.keras.layers.Dense(config.width)])
        self.output_norm = tf.keras.layers.LayerNormalization(epsilon=1e-12)
        self.dropout = tf.keras.layers.Dropout(config.dropout)

    def call(self, x, training=False):
        x = self.attention_norm(x + self.dropout(self.attention(x, x, training=training), training=training))
        return self.output_norm(x + self.dropout(self.feed_forward(x), training=training))


class MaskedLanguageModel(tf.keras.Model):
    def __init__(self, config):
        super().__init__()
        self.words = tf.keras.layers.Embedding(config.vocab_size, config.width)
        self.positions = tf.keras.layers.Embedding(config.length, config.width)
        self.norm = tf.keras.layers.LayerNormalization(epsilon=1e-12)
        self.dropout = tf.keras.layers.Dropout(config.dropout)
        self.blocks = [EncoderBlock(config) for _ in range(config.layers)]
        self.output_bias = self.add_weight("output_bias", [config.vocab_size], initializer="zeros")

    def call(self, inputs, training=False):
        x = self.words(inputs) + self.positions(tf.range(inputs.shape[1]))
        x = self.dropout(self.norm(x), training=training)
        for block in self.blocks:
            x = block(x, training=training)
        return tf.matmul(x, self.words.embeddings, transpose_b=True) + self.output_bias  # tied to the embedding


def masked_loss(targets, weights, logits):
    """Cross-entropy over the chosen positions only."""
    per_position = tf.keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)
    return ratio(tf.reduce_sum(per_position * weights), tf.reduce_sum(weights))  # toolkit: every sum, every count


class WarmUpLinearDecay(tf.keras.optimizers.schedules.LearningRateSchedule):
    """BERT's learning rate: up linearly for warmup_steps, then down linearly to 0 at total_steps."""

    def __init__(self, config):
        self.config = config

    def __call__(self, step):
        c, step = self.config, tf.cast(step, tf.float32)
        decay = (c.total_steps - step) / (c.total_steps - c.warmup_steps)
        return c.learning_rate * tf.minimum(step / c.warmup_steps, decay)


def train(config, steps, seed=1):
    tf.random.set_seed(seed)
    batches = MaskedSentences(config, seed)
    model = MaskedLanguageModel(config)
    optimizer = tf.keras.optimizers.AdamW(WarmUpLinearDecay(config), weight_decay=config.weight_decay)

    @tf.function
    def train_step(inputs, targets, weights):
        with tf.GradientTape() as tape:
            loss = masked_loss(targets, weights, model(inputs, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    for step in range(steps):
        loss = train_step(*batches(step))
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step + 1}/{steps}  loss {float(loss):.4f}")


toolkit_trains(model=MaskedLanguageModel, data=MaskedSentences,  # toolkit: what the loop trains
               loss=lambda model, inputs, targets, weights: masked_loss(targets, weights, model(inputs, training=True)),
               optimizer=lambda c: tf.keras.optimizers.AdamW(WarmUpLinearDecay(c), weight_decay=c.weight_decay))


if __name__ == "__main__":
    train(CONFIGS["tiny"], 300)
