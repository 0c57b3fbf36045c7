"""`make report`: the PDF report, built from the files in results/ alone.

    python -m reporting --results_dir=results --out_dir=report

load.py reads results/ (harness/results.py names the files and their fields); analysis.py combines repeats and
groups runs; overview.py, correctness.py, speed.py and discussion.py write the sections from the numbers, with
the figures of plots.py and diagram.py, every run in its colour (palette.py); blocks.py holds the Typst
building blocks, typeset.py compiles the source, and build.py runs them in order.
"""
