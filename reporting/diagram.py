"""The figure of where each architecture keeps the variables and what crosses which link in one step. Sizes
come from the variables a run's summary records, so any model is drawn as the runners built it."""
import dataclasses
import math

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

from reporting import blocks, palette
from reporting.plots import _save

BYTES_PER_FLOAT = 4


@dataclasses.dataclass
class Sizes:
    config: str
    dense_bytes: int        # all dense variables: what an allreduce or a PS round trip moves per worker
    sparse_bytes: int       # all sparse variables
    row_bytes: int          # one row of a sparse variable: what a looked-up word costs
    sparse_names: tuple


def sizes(summary):
    """Sizes of the variables a run's summary records, or None when it records none."""
    variables = summary.get("variables")
    if not variables:
        return None
    count = {name: math.prod(v["shape"]) for name, v in variables.items()}
    sparse = tuple(name for name, v in variables.items() if v["kind"] == "sparse")
    return Sizes(summary["config"]["name"], BYTES_PER_FLOAT * sum(n for name, n in count.items() if name not in sparse),
                 BYTES_PER_FLOAT * sum(count[name] for name in sparse),
                 BYTES_PER_FLOAT * math.prod(variables[sparse[0]]["shape"][1:]) if sparse else 0, sparse)


def architectures(s, workers, ps, rows_per_step, path):
    """Draw three panels (parameter servers, allreduce, hybrid): boxes are tasks, arrows links, labels what a step
    moves; `rows_per_step`: the sparse rows run_parallax.py's servers received per step, or None."""
    figure, panels = plt.subplots(1, 3, figsize=(7.2, 3.4))
    dense, sparse = blocks.byte_count(s.dense_bytes), "+".join(s.sparse_names)
    rows = (f"{rows_per_step:.0f} rows x {blocks.byte_count(s.row_bytes)}" if rows_per_step
            else f"touched rows x {blocks.byte_count(s.row_bytes)}")
    ring = blocks.byte_count(2 * (workers - 1) / workers * s.dense_bytes)

    panel = panels[0]
    _tasks(panel, workers, ps, worker_holds="no variables", ps_holds="all variables", colour=palette.colour("tf"))
    _link(panel, f"up: dense grads {dense}\n+ {sparse} grads: {rows}\ndown: dense vars {dense} + rows" if sparse
          else f"up: grads {dense}\ndown: vars {dense}")
    panel.set_title("parameter servers\n(run_tf.py, sync and async)")

    panel = panels[1]
    _tasks(panel, workers, 0, worker_holds="all variables", ps_holds=None, colour=palette.colour("horovod"))
    _ring(panel, f"ring allreduce, per worker:\ndense {ring} out and in\n{sparse}: allgather of rows\n"
                 f"(sparse_as_dense: {blocks.byte_count(2 * (workers - 1) / workers * s.sparse_bytes)})" if sparse
          else f"ring allreduce, per worker:\n{ring} out and in\n(no sparse gradient)")
    panel.set_title("allreduce\n(run_horovod.py)")

    panel = panels[2]
    _tasks(panel, workers, ps, worker_holds="dense variables" if sparse else "all variables",
           ps_holds=sparse or "nothing", colour=palette.colour("parallax"))
    if sparse:
        _link(panel, f"up: {sparse} grads: {rows}\ndown: looked-up rows")
    _ring(panel, f"dense: ring allreduce\n{ring} per worker")
    panel.set_title("hybrid\n(run_parallax.py)")
    figure.suptitle(f"{s.config} config, {workers} workers, {ps} PS: where the variables live, what one step moves",
                    fontsize=9)
    _save(figure, path)


def _tasks(axes, workers, ps, worker_holds, ps_holds, colour):
    """Workers in a row at the bottom, parameter servers at the top, each box saying what it holds."""
    axes.set(xlim=(0, 1), ylim=(0, 1))
    axes.axis("off")
    for i in range(workers):
        _box(axes, (i + 0.5) / workers, 0.2, min(0.3, 0.9 / workers), f"worker {i}\n{worker_holds}", colour)
    for i in range(ps):
        _box(axes, (i + 0.5) / ps, 0.85, min(0.3, 0.9 / ps), f"PS {i}\n{ps_holds}", colour)


def _box(axes, x, y, width, text, colour):
    axes.add_patch(FancyBboxPatch((x - width / 2, y - 0.08), width, 0.16, boxstyle="round,pad=0.01",
                                  facecolor=colour, alpha=0.25, edgecolor=colour))
    axes.text(x, y, text, ha="center", va="center", fontsize=6.5)


def _link(axes, label):
    axes.annotate("", xy=(0.5, 0.76), xytext=(0.5, 0.29), arrowprops=dict(arrowstyle="<->", color="black"))
    axes.text(0.52, 0.52, label, ha="center", va="center", fontsize=6,
              bbox=dict(facecolor="white", edgecolor="none", alpha=0.85))


def _ring(axes, label):
    axes.annotate("", xy=(0.9, 0.08), xytext=(0.1, 0.08),
                  arrowprops=dict(arrowstyle="<->", color="black", connectionstyle="arc3,rad=0.25"))
    axes.text(0.5, -0.08, label, ha="center", va="top", fontsize=6)
