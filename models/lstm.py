"""The word-level LSTM language model of Zaremba, Sutskever & Vinyals 2014, "Recurrent Neural Network
Regularization" (arXiv:1409.2329), configs small and medium, as tensorflow/models' ptb_word_lm.py builds it; plus
`lm1b`, a scaled-down version of the sampled-softmax model of Parallax's LM1B benchmark. docs/architecture.md
describes both."""
import dataclasses
import math

import numpy as np
import tensorflow as tf

from harness.data import language_model
from harness.update import SGD, Adagrad, Rule
from harness.variables import Variable, uniform


@dataclasses.dataclass(frozen=True)
class Config:
    """Hyperparameters, with the names of ptb_word_lm.py (and of Parallax's lm1b for the last ones)."""
    name: str
    vocab_size: int
    hidden_size: int      # LSTM units (the size of the cell state)
    num_layers: int
    num_steps: int        # unrolled time steps per training step (truncated backpropagation)
    batch_size: int       # rows of the GLOBAL batch
    init_scale: float     # initial values are uniform in [-init_scale, init_scale]
    learning_rate: float
    max_grad_norm: float  # clip the global gradient norm to this; 0 disables clipping
    keep_prob: float      # dropout keep probability; 1.0 disables dropout
    max_epoch: int        # epochs at the initial learning rate ...
    lr_decay: float       # ... after which it is multiplied by lr_decay every epoch
    projection_size: int = 0  # each LSTM layer's output projected to this size (LSTMCell's num_proj); 0: none
    num_sampled: int = 0      # a sampled softmax over this many distinct candidates per step; 0: the full softmax
    forget_bias: float = 0.0  # added to the forget gate before its sigmoid (BasicLSTMCell's forget_bias)
    update: str = "ptb_word_lm"  # the update rule: "ptb_word_lm" or "parallax_lm1b" (update_rule)

    @property
    def output_size(self):
        """The size of an embedding row, of every LSTM layer's output and of a softmax_w row."""
        return self.projection_size or self.hidden_size


CONFIGS = {
    # The paper's "small" (non-regularised) model: ~4.6M parameters, 2 x 200 units.
    "small": Config("small", vocab_size=10000, hidden_size=200, num_layers=2, num_steps=20, batch_size=20,
                    init_scale=0.1, learning_rate=1.0, max_grad_norm=5.0, keep_prob=1.0, max_epoch=4, lr_decay=0.5),
    # For tests: tiny, yet with dropout, clipping and every code path of the larger ones.
    "tiny": Config("tiny", vocab_size=200, hidden_size=16, num_layers=2, num_steps=5, batch_size=4,
                   init_scale=0.1, learning_rate=1.0, max_grad_norm=5.0, keep_prob=0.9, max_epoch=4, lr_decay=0.5),
    # The paper's "medium" model: 2 x 650 units, 50% dropout.
    "medium": Config("medium", vocab_size=10000, hidden_size=650, num_layers=2, num_steps=35, batch_size=20,
                     init_scale=0.05, learning_rate=1.0, max_grad_norm=5.0, keep_prob=0.5, max_epoch=6,
                     lr_decay=0.8),
    # Parallax's LM1B benchmark with rows 32 wide instead of 512 (docs/architecture.md): its vocabulary,
    # LSTM, candidates and batch, so a step touches the paper's fraction of the tables.
    "lm1b": Config("lm1b", vocab_size=793_470, hidden_size=2048, num_layers=1, num_steps=20, batch_size=128,
                   init_scale=0.05, learning_rate=0.2, max_grad_norm=10.0, keep_prob=0.9, max_epoch=4, lr_decay=0.5,
                   projection_size=32, num_sampled=8192, forget_bias=1.0, update="parallax_lm1b"),
    # lm1b's tables and candidates, a 64-unit LSTM, a quarter of its batch: sparse rows dominate (BENCH=crossover).
    "lm1b-sparse": Config("lm1b-sparse", vocab_size=793_470, hidden_size=64, num_layers=1, num_steps=20,
                          batch_size=32, init_scale=0.05, learning_rate=0.2, max_grad_norm=10.0, keep_prob=0.9,
                          max_epoch=4, lr_decay=0.5, projection_size=32, num_sampled=8192, forget_bias=1.0,
                          update="parallax_lm1b"),
    # lm1b's code paths at test size; a projection of 6 makes partitions start inside a Philox block of 4.
    "lm1b-tiny": Config("lm1b-tiny", vocab_size=500, hidden_size=16, num_layers=1, num_steps=5, batch_size=4,
                        init_scale=0.1, learning_rate=0.2, max_grad_norm=10.0, keep_prob=0.9, max_epoch=4,
                        lr_decay=0.5, projection_size=6, num_sampled=32, forget_bias=1.0, update="parallax_lm1b"),
}

UNIT = "words"
BENCH_CONFIGS = ("small", "lm1b")  # a dense-heavy and a sparse-heavy step


def units_per_row(config):
    return config.num_steps


def data(config, data_path, seed):
    return language_model(config.vocab_size, config.batch_size, config.num_steps, data_path, seed)


def variables(config):
    h, d, v = config.hidden_size, config.output_size, config.vocab_size
    init = uniform(config.init_scale)
    shapes = {"embedding": (v, d)}
    for layer in range(config.num_layers):
        shapes[f"lstm_{layer}/kernel"] = (2 * d, 4 * h)
        shapes[f"lstm_{layer}/bias"] = (4 * h,)
        if config.projection_size:
            shapes[f"lstm_{layer}/projection"] = (h, d)
    shapes["softmax_w"] = (v, d)
    shapes["softmax_b"] = (v,)
    return {name: Variable(shape, init) for name, shape in shapes.items()}


def state_shape(config):
    """Per layer, the cell state (hidden_size) followed by the output (output_size)."""
    return [config.num_layers, config.hidden_size + config.output_size]


def update_rule(config):
    """ptb_word_lm's SGD with every gradient clipped by one global norm; or Parallax's LM1B rule: Adagrad from 1.0,
    only the LSTM clipped, the embedding's gradient times the batch size."""
    def rate(step, epoch):  # constant for max_epoch epochs, then decayed by lr_decay per epoch
        decays = tf.cast(tf.maximum(epoch + 1 - config.max_epoch, 0), tf.float32)
        return config.learning_rate * tf.pow(tf.constant(config.lr_decay, tf.float32), decays)
    if config.update == "parallax_lm1b":
        return Rule(Adagrad(1.0), rate, config.max_grad_norm, clipped=lambda name: name.startswith("lstm_"),
                    scale={"embedding": config.batch_size})
    return Rule(SGD(), rate, config.max_grad_norm)


def metrics(config, objective):
    """The loss per word and its perplexity."""
    loss = float(objective) / config.num_steps
    return {"loss": loss, "perplexity": math.exp(min(loss, 700.0))}


def loss(config, params, inputs, random, state):
    """ptb_word_lm's objective: the cross-entropy (of the full or of the sampled softmax) summed over the
    unrolled steps and averaged over the rows; and the rows' final state."""
    c = config
    words, targets = inputs
    masks = None
    if c.keep_prob < 1.0:  # one mask per dropout site: the embedding's output and each layer's
        masks = tf.where(random.rows("dropout", [c.num_layers + 1, c.num_steps, c.output_size]) < c.keep_prob,
                         1.0 / c.keep_prob, 0.0)
    x = params.gather("embedding", words)  # [rows, steps, output_size]
    if masks is not None:
        x = x * masks[:, 0]
    steps = tf.unstack(x, num=c.num_steps, axis=1)
    final_state = []
    for layer in range(c.num_layers):
        # Read once per step: from a parameter server every read is a transfer of its own.
        kernel, bias = params[f"lstm_{layer}/kernel"], params[f"lstm_{layer}/bias"]
        projection = params[f"lstm_{layer}/projection"] if c.projection_size else None
        cell, output = tf.split(state[:, layer], [c.hidden_size, c.output_size], axis=1)
        outputs = []
        for x_t in steps:
            gates = tf.matmul(tf.concat([x_t, output], axis=1), kernel) + bias
            i, j, f, o = tf.split(gates, 4, axis=1)  # ptb_word_lm's BasicLSTMCell
            if c.forget_bias:
                f = f + c.forget_bias
            cell = tf.sigmoid(f) * cell + tf.sigmoid(i) * tf.tanh(j)
            output = tf.sigmoid(o) * tf.tanh(cell)
            if projection is not None:
                output = tf.matmul(output, projection)
            outputs.append(output)
        final_state.append(tf.concat([cell, output], axis=1))
        if masks is not None:
            outputs = tf.unstack(tf.stack(outputs, axis=1) * masks[:, layer + 1], axis=1)
        steps = outputs
    output = tf.reshape(tf.stack(steps, axis=1), [-1, c.output_size])  # row-major: (row, step)
    labels = tf.reshape(targets, [-1])
    if c.num_sampled:
        cross_entropy = _sampled_softmax_cross_entropy(c, params, output, labels, _candidates(c, random))
    else:
        logits = tf.matmul(output, params["softmax_w"], transpose_b=True) + params["softmax_b"]
        cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return tf.reduce_sum(cross_entropy) / words.shape[0], tf.stack(final_state, axis=1)


def draws_for_distinct(config):
    """How many log-uniform draws _candidates makes: twice the number at which the expected count of distinct
    words reaches num_sampled, so that falling short is negligibly likely (the graph checks)."""
    vocab, wanted = config.vocab_size, config.num_sampled
    if wanted > vocab:
        raise ValueError(f"{config.name}: {wanted} distinct candidates from a vocabulary of {vocab}")
    log_miss = np.log1p(-np.log1p(1.0 / np.arange(1, vocab + 1)) / math.log(vocab + 1))  # log(1 - p) per word
    low, high = wanted, wanted
    while -np.expm1(high * log_miss).sum() < wanted:
        low, high = high, 2 * high
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if -np.expm1(middle * log_miss).sum() < wanted else (low, middle)
    return 2 * high


def _candidates(config, random):
    """The step's num_sampled DISTINCT candidates and the draws it took, as log_uniform_candidate_sampler
    (unique=True) draws them but from randomness every worker shares (TF's samplers keep state). A fixed number
    of draws, not a tf.while_loop, which changes the parameter-server runners' last bits."""
    c = config
    uniform_ = random.shared("candidates", [draws_for_distinct(c)], tf.float64)
    draws = tf.cast(tf.floor(tf.exp(uniform_ * math.log(c.vocab_size + 1))), tf.int32) - 1
    draws = tf.math.floormod(draws, c.vocab_size)  # as TF's sampler; exp may round up to vocab_size + 1
    distinct, position = tf.unique(draws)  # in order of first appearance
    enough = tf.debugging.assert_greater_equal(tf.size(distinct), c.num_sampled,
                                               message="too few distinct candidates drawn")
    with tf.control_dependencies([enough]):
        tries = tf.cast(tf.where(tf.equal(position, c.num_sampled - 1))[0, 0], tf.int32) + 1
    return distinct[:c.num_sampled], tries


def _log_expected_count(config, words, tries):
    """TensorFlow's ExpectedCountHelper (range_sampler.cc): 1 - (1 - p)^tries, or p * num_sampled when no draw
    repeated."""
    c = config
    p = tf.math.log1p(1.0 / tf.cast(words + 1, tf.float64)) / math.log(c.vocab_size + 1)
    count = tf.where(tries == c.num_sampled, p * c.num_sampled,
                     -tf.math.expm1(tf.cast(tries, tf.float64) * tf.math.log1p(-p)))
    return tf.cast(tf.math.log(count), tf.float32)


def _sampled_softmax_cross_entropy(config, params, output, labels, candidates):
    """What tf.nn.sampled_softmax_loss computes with its defaults (remove_accidental_hits), written out because
    TF's version draws a seed for an op that needs none, which op determinism refuses."""
    candidates, tries = candidates
    words = tf.concat([labels, candidates], 0)
    weights = params.gather("softmax_w", words)  # [positions + num_sampled, output_size]
    biases = params.gather("softmax_b", words)
    positions = tf.shape(labels)[0]
    true_logits = (tf.reduce_sum(output * weights[:positions], axis=1) + biases[:positions]
                   - _log_expected_count(config, labels, tries))
    sampled_logits = (tf.matmul(output, weights[positions:], transpose_b=True) + biases[positions:]
                      - _log_expected_count(config, candidates, tries))
    sampled_logits = tf.where(labels[:, None] == candidates[None, :], tf.float32.min, sampled_logits)
    logits = tf.concat([true_logits[:, None], sampled_logits], axis=1)  # the label is class 0
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.zeros_like(labels), logits=logits)
