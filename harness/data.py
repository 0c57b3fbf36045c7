"""The sharding contract every runner follows (shard), and a language model's data.
docs/architecture.md, "The sharding contract", states it."""
import collections
import os

import numpy as np

from harness import UsageError

SYNTHETIC_TOKENS = 1_000_000  # about PTB's training set (929k words)
ZIPF_EXPONENT = 1.0           # word frequencies of natural text fall roughly as 1/rank


def synthetic_tokens(vocab_size, seed):
    """I.i.d. Zipf word ids from the seed (id 0 the most frequent): an embedding gradient as sparse as text's.
    Nothing but word frequencies, so the loss falls towards their entropy, not lower."""
    probabilities = 1.0 / np.arange(1, vocab_size + 1) ** ZIPF_EXPONENT
    rng = np.random.default_rng([seed, 0x5EED])
    return rng.choice(vocab_size, SYNTHETIC_TOKENS, p=probabilities / probabilities.sum()).astype(np.int32)


def text_tokens(path, vocab_size):
    """Word ids of a PTB-format text (a file, or a directory with ptb.train.txt): the vocab_size most frequent
    words (ties by spelling), "<unk>" among them when more occur."""
    if os.path.isdir(path):
        path = os.path.join(path, "ptb.train.txt")
    try:
        with open(path, encoding="utf-8") as f:
            words = f.read().replace("\n", " <eos> ").split()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--data_path: cannot read {path}: {getattr(error, 'strerror', None) or error}")
    counts = collections.Counter(words)
    vocabulary = sorted(counts, key=lambda w: (-counts[w], w))
    if len(vocabulary) > vocab_size:
        vocabulary = vocabulary[:vocab_size]
        if "<unk>" not in vocabulary:
            vocabulary = vocabulary[:vocab_size - 1] + ["<unk>"]
    ids = {word: i for i, word in enumerate(vocabulary)}
    unknown = ids.get("<unk>")
    return np.array([ids.get(w, unknown) for w in words], dtype=np.int32)


class Batches:
    """The global batch of each step, as ptb_word_lm lays it out: the tokens cut into `batch_size` contiguous rows,
    step t reading `num_steps` + 1 tokens at (t mod epoch_size) * num_steps of every row."""

    def __init__(self, tokens, batch_size, num_steps):
        row_length = len(tokens) // batch_size
        self.epoch_size = (row_length - 1) // num_steps
        if self.epoch_size < 1:
            raise UsageError(f"the corpus has {len(tokens)} words, too few for one batch of {batch_size} rows "
                             f"x {num_steps + 1} words")
        self.rows = tokens[:batch_size * row_length].reshape(batch_size, row_length)
        self.num_steps = num_steps

    def __call__(self, step):
        """(inputs, targets) of the global batch at `step`: int32 arrays [batch_size, num_steps]."""
        start = (step % self.epoch_size) * self.num_steps
        window = self.rows[:, start:start + self.num_steps + 1]
        return window[:, :-1], window[:, 1:]


def language_model(vocab_size, batch_size, num_steps, data_path, seed):
    """The Batches of a language model: the text at `data_path` (--data_path), or the synthetic corpus of `seed`."""
    tokens = text_tokens(data_path, vocab_size) if data_path else synthetic_tokens(vocab_size, seed)
    return Batches(tokens, batch_size, num_steps)


def shard(batch_size, rank, num_workers):
    """The rows of the global batch that worker `rank` of `num_workers` trains."""
    if batch_size % num_workers:
        raise UsageError(f"{num_workers} workers do not divide the global batch of {batch_size} rows")
    rows = batch_size // num_workers
    return slice(rank * rows, (rank + 1) * rows)
