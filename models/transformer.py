"""The Transformer of Vaswani et al. 2017, "Attention Is All You Need" (arXiv:1706.03762), as a decoder-only
word-level language model: the paper's post-norm decoder blocks (3.1-3.5) without encoder attention, its Adam and
warm-up schedule (5.3), residual dropout and label smoothing (5.4), no gradient clipping.

Configs: small (a quarter of the base widths, 2 of 6 blocks), base (the paper's base shape), tiny (for tests).
Unlike the paper (3.4) the embedding is not tied to the softmax, so that its gradient stays sparse.
"""
import dataclasses
import math

import numpy as np
import tensorflow as tf

from harness.data import language_model
from harness.update import Adam, Rule
from harness.variables import Variable, constant, glorot_uniform, normal


@dataclasses.dataclass(frozen=True)
class Config:
    """Hyperparameters, with the paper's names where it has one."""
    name: str
    vocab_size: int
    d_model: int            # the width of the embeddings and of every sublayer's output
    num_heads: int          # h: attention heads, each d_model / h wide
    d_ff: int               # the inner width of each feed-forward network
    num_layers: int         # N: decoder blocks
    num_steps: int          # positions per row: the context a prediction attends to
    batch_size: int         # rows of the GLOBAL batch
    dropout: float          # P_drop, the residual dropout rate; 0 disables dropout
    label_smoothing: float  # eps_ls: the target distribution puts this mass uniformly over the vocabulary
    warmup_steps: int       # the learning rate rises linearly for this many steps, then falls as 1/sqrt(step)


CONFIGS = {
    # A quarter of the paper's base widths and 2 of its 6 blocks, on PTB's vocabulary and the LSTM's batch.
    "small": Config("small", vocab_size=10000, d_model=128, num_heads=4, d_ff=512, num_layers=2, num_steps=20,
                    batch_size=20, dropout=0.1, label_smoothing=0.1, warmup_steps=4000),
    # For tests: tiny, yet with dropout, smoothing and every code path of the larger ones.
    "tiny": Config("tiny", vocab_size=200, d_model=16, num_heads=2, d_ff=32, num_layers=2, num_steps=5,
                   batch_size=4, dropout=0.1, label_smoothing=0.1, warmup_steps=10),
    # The paper's base shape (d_model 512, h 8, d_ff 2048, N 6) with far fewer words a step than its 25,000.
    "base": Config("base", vocab_size=10000, d_model=512, num_heads=8, d_ff=2048, num_layers=6, num_steps=35,
                   batch_size=32, dropout=0.1, label_smoothing=0.1, warmup_steps=4000),
}

UNIT = "words"
BENCH_CONFIGS = ("small", "base")  # a light and a heavy dense step beside the same sparse embedding


def units_per_row(config):
    return config.num_steps


def data(config, data_path, seed):
    return language_model(config.vocab_size, config.batch_size, config.num_steps, data_path, seed)


def variables(config):
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    specs = {"embedding": Variable((v, d), normal(d ** -0.5))}
    for layer in range(config.num_layers):
        prefix = f"layer_{layer}"
        # qkv holds three d x d projections: each initialised with its own fans.
        specs.update({f"{prefix}/attention/qkv": Variable((d, 3 * d), glorot_uniform(d, d)),
                       f"{prefix}/attention/output": Variable((d, d), glorot_uniform(d, d)),
                       f"{prefix}/norm_1/gain": Variable((d,), constant(1.0)),
                       f"{prefix}/norm_1/bias": Variable((d,), constant(0.0)),
                       f"{prefix}/ffn/in": Variable((d, f), glorot_uniform(d, f)),
                       f"{prefix}/ffn/in_bias": Variable((f,), constant(0.0)),
                       f"{prefix}/ffn/out": Variable((f, d), glorot_uniform(f, d)),
                       f"{prefix}/ffn/out_bias": Variable((d,), constant(0.0)),
                       f"{prefix}/norm_2/gain": Variable((d,), constant(1.0)),
                       f"{prefix}/norm_2/bias": Variable((d,), constant(0.0))})
    specs["softmax_w"] = Variable((d, v), glorot_uniform(d, v))
    specs["softmax_b"] = Variable((v,), constant(0.0))
    return specs


def update_rule(config):
    """The paper's Adam and schedule (5.3), d_model^-0.5 * min(t^-0.5, t * warmup^-1.5), t counted from 1."""
    def rate(step, epoch):
        t = tf.cast(step, tf.float32) + 1.0
        return config.d_model ** -0.5 * tf.minimum(tf.math.rsqrt(t), t * config.warmup_steps ** -1.5)
    return Rule(Adam(0.9, 0.98, 1e-9), rate, clip_norm=0.0)


def metrics(config, objective):
    """The loss per word (label-smoothed, so above the plain cross-entropy) and its perplexity."""
    loss = float(objective) / config.num_steps
    return {"loss": loss, "perplexity": math.exp(min(loss, 700.0))}


def positional_encoding(num_steps, d_model):
    """The sinusoids of 3.5: sin(pos / 10000^(2i/d_model)) at dimension 2i, cos at 2i + 1."""
    angles = np.arange(num_steps)[:, None] / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
    encoding = np.zeros([num_steps, d_model])
    encoding[:, 0::2], encoding[:, 1::2] = np.sin(angles), np.cos(angles)
    return tf.constant(encoding, tf.float32)


def layer_norm(x, gain, bias):
    """Ba et al.'s layer normalisation over the last axis: each position on its own, whatever the batch."""
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + 1e-6) * gain + bias


def attention(config, x, qkv, output):
    """Masked multi-head scaled dot-product attention (3.2) of x [rows, steps, d_model]."""
    c = config
    rows, width = x.shape[0], c.d_model // c.num_heads
    heads = tf.transpose(tf.reshape(tf.matmul(tf.reshape(x, [-1, c.d_model]), qkv),
                                    [rows, c.num_steps, 3, c.num_heads, width]), [2, 0, 3, 1, 4])
    queries, keys, values = tf.unstack(heads)  # each [rows, heads, steps, width]
    # A position attends to itself and earlier ones: later ones get a logit whose softmax weight is 0.
    future = np.triu(np.full([c.num_steps, c.num_steps], -1e9, np.float32), 1)
    logits = tf.matmul(queries, keys, transpose_b=True) * width ** -0.5 + future
    attended = tf.matmul(tf.nn.softmax(logits), values)
    concatenated = tf.reshape(tf.transpose(attended, [0, 2, 1, 3]), [-1, c.d_model])
    return tf.reshape(tf.matmul(concatenated, output), [rows, c.num_steps, c.d_model])


def feed_forward(config, x, w_in, b_in, w_out, b_out):
    """max(0, x W1 + b1) W2 + b2 (3.3), at every position alike."""
    hidden = tf.nn.relu(tf.matmul(tf.reshape(x, [-1, config.d_model]), w_in) + b_in)
    return tf.reshape(tf.matmul(hidden, w_out) + b_out, x.shape)


def position_losses(config, params, inputs, random):
    """The label-smoothed cross-entropy at every position of the rows, [rows, num_steps]."""
    c = config
    words, targets = inputs
    dropout = None
    if c.dropout:  # one mask per site: the input sum, and each layer's two sublayers
        dropout = tf.where(random.rows("dropout", [2 * c.num_layers + 1, c.num_steps, c.d_model]) < c.dropout,
                           0.0, 1.0 / (1.0 - c.dropout))

    def dropped(x, site):
        return x if dropout is None else x * dropout[:, site]

    x = params.gather("embedding", words) * math.sqrt(c.d_model) + positional_encoding(c.num_steps, c.d_model)
    x = dropped(x, 0)
    for layer in range(c.num_layers):
        # Each read once: from a parameter server every read is a transfer of its own.
        weights = {name: params[f"layer_{layer}/{name}"] for name in
                   ("attention/qkv", "attention/output", "norm_1/gain", "norm_1/bias", "ffn/in", "ffn/in_bias",
                    "ffn/out", "ffn/out_bias", "norm_2/gain", "norm_2/bias")}
        attended = attention(c, x, weights["attention/qkv"], weights["attention/output"])
        x = layer_norm(x + dropped(attended, 2 * layer + 1), weights["norm_1/gain"], weights["norm_1/bias"])
        transformed = feed_forward(c, x, *(weights[f"ffn/{name}"] for name in ("in", "in_bias", "out", "out_bias")))
        x = layer_norm(x + dropped(transformed, 2 * layer + 2), weights["norm_2/gain"], weights["norm_2/bias"])
    logits = tf.matmul(tf.reshape(x, [-1, c.d_model]), params["softmax_w"]) + params["softmax_b"]
    smoothing = c.label_smoothing / c.vocab_size
    smoothed = tf.one_hot(tf.reshape(targets, [-1]), c.vocab_size, 1.0 - c.label_smoothing + smoothing, smoothing)
    return tf.reshape(-tf.reduce_sum(smoothed * tf.nn.log_softmax(logits), axis=1), [-1, c.num_steps])


def loss(config, params, inputs, random):
    """The label-smoothed cross-entropy summed over each row's positions and averaged over the rows."""
    per_row = tf.reduce_sum(position_losses(config, params, inputs, random), axis=1)
    return tf.reduce_sum(per_row) / inputs[0].shape[0]
