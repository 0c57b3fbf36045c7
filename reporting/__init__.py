"""`make report`: the PDF report, built from the files in results/ alone.

    python -m reporting --results_dir=results --out_dir=report

load.py reads results/ (the only module that knows the files' field names), palette.py gives every run
its colour, plots.py draws the figures with matplotlib, text.py writes the sentences from the numbers,
typeset.py assembles the Typst source and compiles it, build.py runs them in order.
"""


class InputError(Exception):
    """A results file that cannot be read: one line naming the file (and line), exit status 2."""

import os

# model.py (read for the variables' sizes) loads TensorFlow, whose start-up notices are no part of a report.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
