"""The model's configurations and the facts about its variables that need no TensorFlow: the paper's
configurations as named objects (as ptb_word_lm.py defines them), each variable's shape, which gradients are
sparse, how a table is split into parts, the learning-rate schedule.

model.py builds the graph from these; the launcher, the traffic model and the report read them without
loading TensorFlow.
"""
import dataclasses


@dataclasses.dataclass(frozen=True)
class UpdateRule:
    """How the gradient of the global batch updates the variables (`update` applies it)."""
    optimizer: str                     # "sgd": var -= lr * g; "adagrad": acc += g * g, var -= lr * g / sqrt(acc)
    clipped: str = "all"               # the gradients whose global norm is clipped: "all", or "lstm" (lstm_*)
    initial_accumulator: float = 0.0   # Adagrad's accumulators start here
    embedding_scale: str = ""          # "batch": the embedding's gradient times the global batch size


# ptb_word_lm.py's rule: plain SGD after clipping every gradient by one global norm.
PTB_WORD_LM = UpdateRule("sgd")
# Parallax's LM1B rule (examples/lm1b/language_model_graph.py): Adagrad (initial accumulator 1.0), only the
# LSTM's gradients clipped, the embedding's gradient multiplied by the batch size. Parallax multiplies each
# GPU's gradient by that GPU's batch and then sums the GPUs' sparse gradients; times the global batch here,
# after averaging, that is the same sum over every row of the step.
PARALLAX_LM1B = UpdateRule("adagrad", clipped="lstm", initial_accumulator=1.0, embedding_scale="batch")


@dataclasses.dataclass(frozen=True)
class Config:
    """Hyperparameters, with the names of ptb_word_lm.py (and of Parallax's lm1b for the last two)."""
    name: str
    vocab_size: int
    hidden_size: int      # LSTM units (the size of the cell state)
    num_layers: int
    num_steps: int        # unrolled time steps per training step (truncated backpropagation)
    batch_size: int       # rows of the GLOBAL batch; each of W workers trains batch_size / W of them
    init_scale: float     # initial values are uniform in [-init_scale, init_scale]
    learning_rate: float
    max_grad_norm: float  # clip the global gradient norm to this; 0 disables clipping
    keep_prob: float      # dropout keep probability; 1.0 disables dropout
    max_epoch: int        # epochs at the initial learning rate ...
    lr_decay: float       # ... after which it is multiplied by lr_decay every epoch
    projection_size: int = 0  # each LSTM layer's output projected to this size (LSTMCell's num_proj); 0: none
    num_sampled: int = 0      # a sampled softmax over this many distinct candidates per step; 0: the full softmax
    forget_bias: float = 0.0  # added to the forget gate before its sigmoid (BasicLSTMCell's forget_bias)
    update_rule: UpdateRule = PTB_WORD_LM

    @property
    def output_size(self):
        """The size of an embedding row, of every LSTM layer's output and of a softmax_w row."""
        return self.projection_size or self.hidden_size

    @property
    def words_per_batch(self):
        return self.batch_size * self.num_steps


# Parallax's LM1B example (snuspl/parallax, examples/lm1b; arXiv:1808.02621) against `lm1b` here. Only the
# width of the rows shrinks: the vocabulary is the paper's, so a step touches the same few of its rows, and
# the LSTM, the candidates and the batch are the paper's, so a step computes what one GPU's step does.
#
#                     Parallax           lm1b               why
#   vocabulary        793,470            793,470            kept: the rows a step touches are the paper's fraction
#   embedding         512                32                 793,470 x 32 x 4 bytes = 101.6 MB per table (paper:
#   projection        512                32                 1.6 GB each, which 2 cores cannot train)
#   LSTM              1 layer, 2048      1 layer, 2048      kept: 2.4 MB of dense variables (paper 37.8 MB)
#   sampled softmax   8,192 candidates   8,192              kept
#   unrolled steps    20                 20                 kept
#   batch             128 per GPU        128 global         one worker's step (W = 1) about 0.9 s on one core
#                                                           here; W workers train 128/W rows each
#   shards            32, round robin    --partitions=N,    placement is the runner's (--partitions=32 is theirs);
#                     ("mod": TF 1's     "mod" by default   TF 2's tf.nn.embedding_lookup only splits by
#                     default)                              contiguous ranges ("div", --partition_strategy=div)
#   candidates        8,192 distinct     8,192 distinct     TF's log_uniform_candidate_sampler(unique=True)
#   optimiser         Adagrad, lr 0.2,   the same           PARALLAX_LM1B (the other configs: ptb_word_lm's SGD)
#                     accumulators at 1
#   gradient clipping LSTM only, 10      the same
#   embedding grad.   x batch (128)      x global batch     Parallax then sums the GPUs' sparse gradients
#   dropout           keep 0.9           keep 0.9
#   forget-gate bias  +1                 +1
#   moving average    0.999 of the LSTM  none               read only by evaluation; training never reads it
#   objective         loss x num_steps   the same           the loss summed over the unrolled steps, as ptb_word_lm's
#   initial values    tables +-0.0019    uniform +-0.05     one initialiser for every config here; Parallax's
#                     (unit scaling),                       bounds do not remove the early jumps of the loss
#                     LSTM Glorot                           (measured: docs/architecture.md)
# (Parallax's numbers are those of its example as the paper ran it; a later revision of its
# language_model.py has a 128-unit state and batch x steps candidates.)

CONFIGS = {
    # For tests: seconds on a laptop, yet with dropout, clipping and every code path of the larger ones.
    "tiny": Config("tiny", vocab_size=200, hidden_size=16, num_layers=2, num_steps=5, batch_size=4,
                   init_scale=0.1, learning_rate=1.0, max_grad_norm=5.0, keep_prob=0.9,
                   max_epoch=4, lr_decay=0.5),
    # The paper's "small" (non-regularised) model: ~4.6M parameters, 2 x 200 units.
    "small": Config("small", vocab_size=10000, hidden_size=200, num_layers=2, num_steps=20, batch_size=20,
                    init_scale=0.1, learning_rate=1.0, max_grad_norm=5.0, keep_prob=1.0,
                    max_epoch=4, lr_decay=0.5),
    # The paper's "medium" model: 2 x 650 units, 50% dropout.
    "medium": Config("medium", vocab_size=10000, hidden_size=650, num_layers=2, num_steps=35, batch_size=20,
                     init_scale=0.05, learning_rate=1.0, max_grad_norm=5.0, keep_prob=0.5,
                     max_epoch=6, lr_decay=0.8),
    # Parallax's LM1B benchmark, scaled down (the table above): both big tables get sparse gradients.
    "lm1b": Config("lm1b", vocab_size=793_470, hidden_size=2048, num_layers=1, num_steps=20, batch_size=128,
                   init_scale=0.05, learning_rate=0.2, max_grad_norm=10.0, keep_prob=0.9,
                   max_epoch=4, lr_decay=0.5, projection_size=32, num_sampled=8192, forget_bias=1.0,
                   update_rule=PARALLAX_LM1B),
    # lm1b's tables, candidates and rows with a 64-unit LSTM and a quarter of its batch, so that the sparse rows
    # dominate a step: 8,192 candidates and about 460 distinct words of 640 (synthetic corpus), 1.2 MB of rows
    # a worker, against 75 kB of dense LSTM; a step computes in about 0.13 s on one core here. make bench BENCH=crossover sweeps
    # it to find where the hybrid overtakes allgather (docs/bench.md).
    "lm1b-sparse": Config("lm1b-sparse", vocab_size=793_470, hidden_size=64, num_layers=1, num_steps=20,
                          batch_size=32, init_scale=0.05, learning_rate=0.2, max_grad_norm=10.0, keep_prob=0.9,
                          max_epoch=4, lr_decay=0.5, projection_size=32, num_sampled=8192, forget_bias=1.0,
                          update_rule=PARALLAX_LM1B),
    # lm1b's code paths at test size; a projection of 6 puts partitions at rows that do not start a Philox
    # block of 4 numbers.
    "lm1b-tiny": Config("lm1b-tiny", vocab_size=500, hidden_size=16, num_layers=1, num_steps=5, batch_size=4,
                        init_scale=0.1, learning_rate=0.2, max_grad_norm=10.0, keep_prob=0.9,
                        max_epoch=4, lr_decay=0.5, projection_size=6, num_sampled=32, forget_bias=1.0,
                        update_rule=PARALLAX_LM1B),
}


def variable_shapes(config):
    """{name: shape} of every trainable variable, in the canonical order used everywhere."""
    h, d, v = config.hidden_size, config.output_size, config.vocab_size
    shapes = {"embedding": (v, d)}
    for layer in range(config.num_layers):
        shapes[f"lstm_{layer}/kernel"] = (2 * d, 4 * h)
        shapes[f"lstm_{layer}/bias"] = (4 * h,)
        if config.projection_size:
            shapes[f"lstm_{layer}/projection"] = (h, d)
    shapes["softmax_w"] = (v, d)
    shapes["softmax_b"] = (v,)
    return shapes


def sparse_variables(config):
    """The variables whose gradient is tf.IndexedSlices: the embedding, and the softmax when it is sampled."""
    return ("embedding", "softmax_w", "softmax_b") if config.num_sampled else ("embedding",)


PARTITION_STRATEGIES = ("mod", "div")


def part_rows(num_rows, partitions, strategy):
    """The rows of the whole variable that each of its parts holds, in the part's own order, as ranges.

    "mod" (TensorFlow 1's default for a list of shards, which Parallax ran): row i is row i // P of part i % P,
    so a frequency-sorted vocabulary's frequent words are spread over every part. "div" (the only strategy of
    TensorFlow 2's tf.nn.embedding_lookup): contiguous ranges, the first num_rows % P parts one row longer, as
    tf.fixed_size_partitioner cuts them. Both give the parts the same sizes."""
    if strategy == "mod":
        return [range(p, num_rows, partitions) for p in range(partitions)]
    sizes = [num_rows // partitions + (1 if p < num_rows % partitions else 0) for p in range(partitions)]
    starts = [sum(sizes[:p]) for p in range(partitions + 1)]
    return [range(starts[p], starts[p + 1]) for p in range(partitions)]


def state_shape(config, rows):
    """The LSTM state that `rows` rows carry from step to step: per layer and row, the cell state (hidden_size)
    followed by the output (output_size)."""
    return [config.num_layers, rows, config.hidden_size + config.output_size]


def clipped(config, name):
    """Whether the update rule clips the gradient of variable `name`."""
    return config.update_rule.clipped == "all" or name.startswith("lstm_")


def learning_rate(config, epoch):
    """The paper's schedule: constant for max_epoch epochs, then decayed by lr_decay per epoch."""
    return config.learning_rate * config.lr_decay ** max(epoch + 1 - config.max_epoch, 0)
