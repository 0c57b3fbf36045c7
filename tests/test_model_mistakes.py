"""A model file's own mistakes, as a first attempt makes them: one line naming the file, the line and what went
wrong, exit 2, no traceback, nothing written (issue 48; harness/models.py mistake)."""
import os

import pytest

from conftest import REPO, run_script

BAG_OF_WORDS = os.path.join(REPO, "tests", "models", "bag_of_words.py")
LSTM = os.path.join(REPO, "models", "lstm.py")  # a model with state


# A mistake Python or TensorFlow finds in the file's own code: its line is named too.
CODE = [
    (("def loss(config, params, inputs, random):", "def loss(config, params, inputs, random)"),
     "in <module>: SyntaxError: expected ':' (the line: def loss(config, params, inputs, random))"),
    (("    words, labels = inputs", "  words, labels = inputs"), "in <module>: IndentationError: unexpected indent"),
    (("import numpy as np", "import numpy as np\nimport a_package_not_installed"),
     "in <module>: ModuleNotFoundError: No module named 'a_package_not_installed'"),
    (("    words, labels = inputs", "    words, labels = input_s"),
     "in loss: NameError: name 'input_s' is not defined (the line: words, labels = input_s)"),
    (('logits = tf.matmul(features, params["output/kernel"])', 'logits = tf.matmul(params["output/kernel"], features)'),
     "in loss: ValueError: Dimensions must be equal"),
    (("    return Examples(config, seed)", "    return Examples(config)"),
     "in data: TypeError: Examples.__init__() missing 1 required positional argument: 'seed'"),
    (("        return self.words[step % self.epoch_size], self.labels",
      "        return self.words[step + 100], self.labels"),
     "in __call__: IndexError: index 100 is out of bounds for axis 0 with size 10"),
]

CONFIG = 'Config("tiny", vocab_size=60, classes=3, width=4, words=6, batch_size=4, keep_prob=0.8)'
PER_ROW_MEAN = "    return tf.reduce_sum(per_row) / words.shape[0]"

# A part of the contract that returns the wrong thing: the part is named.
CONTRACT = [
    ((CONFIG, CONFIG.replace("Config(", "dict(name=")), "CONFIGS['tiny'] must be a dataclass with name and "
                                                          "batch_size (rows, an int), not dict"),
    (("batch_size=4", "batch_size=4.0"), "CONFIGS['tiny'] must be a dataclass with name and batch_size"),
    (("def loss(config, params, inputs, random):", "def loss(config, params, inputs):"),
     "loss must take (config, params, inputs, random), not (config, params, inputs)"),
    (("def data(config, data_path, seed):\n    return Examples(config, seed)",
      "def data(config, data_path, seed):\n    return [Examples(config, seed)(0)]"),
     "data must return an object called with a step, with epoch_size (an int), not list"),
    (("        return self.words[step % self.epoch_size], self.labels[step % self.epoch_size]",
      "        return self.words[step % self.epoch_size][:2], self.labels[step % self.epoch_size][:2]"),
     "data's batch of a step must be a tuple of numpy arrays of batch_size=4 rows"),
    (('"output/bias": Variable([config.classes], constant(0.0))}', '"output/bias": [config.classes]}'),
     "variables must return {name: Variable(shape, initializer)} (harness.variables), not dict"),
    ((PER_ROW_MEAN, "    return per_row"),
     "loss must return a scalar tensor (the mean over rows) or (sum, count), not a tensor of shape (4,)"),
    ((PER_ROW_MEAN, "    return 1.0"), "loss must return a scalar tensor (the mean over rows) or (sum, count), "
                                      "not float"),
    ((PER_ROW_MEAN, "    return tf.reduce_sum(per_row), words.shape[0], 0"), "not a tuple of 3"),
    ((PER_ROW_MEAN, "    return tf.reduce_sum(per_row), tf.ones([words.shape[0]])"),
     "not a tuple of 2: a tensor of shape (), a tensor of shape (4,)"),
    (("        return self.words[step % self.epoch_size], self.labels[step % self.epoch_size]",
      "        return [self.words[step % self.epoch_size], self.labels[step % self.epoch_size]]"),
     "data's batch of a step must be a tuple of numpy arrays of batch_size=4 rows, not list"),
    (("CONFIGS = {\"tiny\": " + CONFIG + "}", "CONFIGS = {}"),
     "CONFIGS must be a non-empty dict of named configurations"),
    (("def update_rule(config):", "def update_rules(config):"), "lacks update_rule of the model contract"),
    (("def data(", "TOLERANCE = 1e-3\n\n\ndef data("), "TOLERANCE must be (rtol, atol), two numbers of 0 or more, "
                                                     "not float 0.001"),
    (("def data(", "TOLERANCE = (1e-3, -1)\n\n\ndef data("), "TOLERANCE must be (rtol, atol)"),
    (('"output/bias": Variable([config.classes],', '"output/bias": Variable([config.classes - 7],'),
     "variables: output/bias's shape [-4] must be of sizes 1 or more"),
    (("    return Rule(Adagrad(0.1), lambda step, epoch: tf.constant(0.5), clip_norm=1.0)", "    return Adagrad(0.1)"),
     "update_rule must return a harness.update.Rule(optimizer, schedule), not Adagrad"),
]


# A loss with state that does not return (objective, new state) of the state's shape (on lstm's tiny: 4 rows of
# [2 layers, 32]).
STATE_RETURN = "    return tf.reduce_sum(cross_entropy) / words.shape[0], tf.stack(final_state, axis=1)"
STATEFUL = [
    ((STATE_RETURN, "    return tf.reduce_sum(cross_entropy) / words.shape[0]"),
     "loss must return (objective, new state) with state_shape, the new state a tensor of shape (4, 2, 32) "
     "(these rows'), not a tensor of shape ()"),
    ((STATE_RETURN, STATE_RETURN + ", 0"), "not a tuple of 3"),
    ((STATE_RETURN, "    return tf.reduce_sum(cross_entropy) / words.shape[0], tf.stack(final_state, axis=0)"),
     "the new state a tensor of shape (4, 2, 32) (these rows'), not a tuple of 2: a tensor of shape (), a tensor "
     "of shape (2, 4, 32)"),
]


@pytest.mark.parametrize("change, named", CODE + CONTRACT + STATEFUL)
def test_a_mistaken_model_file_gets_one_line_naming_what_is_wrong(tmp_path, assert_usage_error, change, named):
    mistaken = tmp_path / "mistaken.py"
    words = [f"{mistaken}:", named] if (change, named) in CODE else [named]
    original = LSTM if (change, named) in STATEFUL else BAG_OF_WORDS
    assert_usage_error(run_mistaken(mistaken, change, original), f"--model={mistaken}: ", *words)
    assert sorted(os.listdir(tmp_path)) == ["mistaken.py"]  # nothing written


def run_mistaken(mistaken, change, original=BAG_OF_WORDS):
    """run.py on `original` with `change` (old, new) made, written to the file `mistaken`."""
    source = open(original).read()
    mistaken.write_text(source.replace(*change))
    assert mistaken.read_text() != source
    config = ["--config=tiny"] if original == LSTM else []
    return run_script("run.py", f"--model={mistaken}", *config, "--steps=2", "--warmup_steps=1", cwd=mistaken.parent)
