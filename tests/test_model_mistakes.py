"""A model file's own mistakes, as a first attempt makes them: one line naming the file, the line and what went
wrong, exit 2, no traceback, nothing written (issue 48; harness/models.py mistake)."""
import os

import pytest

from conftest import REPO, run_script

BAG_OF_WORDS = os.path.join(REPO, "tests", "models", "bag_of_words.py")


@pytest.mark.parametrize("change, named", [
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
])
def test_a_mistake_in_the_model_s_own_code_is_one_line_naming_its_line(tmp_path, assert_usage_error, change,
                                                                       named):
    mistaken = tmp_path / "mistaken.py"
    source = open(BAG_OF_WORDS).read()
    mistaken.write_text(source.replace(*change))
    assert mistaken.read_text() != source
    result = run_script("run.py", f"--model={mistaken}", "--steps=2", "--warmup_steps=1", cwd=tmp_path)
    assert_usage_error(result, f"--model={mistaken}: {mistaken}:", named)
    assert sorted(os.listdir(tmp_path)) == ["mistaken.py"]  # nothing written
