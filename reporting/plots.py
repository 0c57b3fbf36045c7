"""The figures, drawn with matplotlib as SVG (sharp at any zoom in the PDF) from numbers already read from results/;
colours come from palette.colour only."""
import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

from reporting import analysis, palette  # noqa: E402

plt.rcParams.update({"font.size": 9, "axes.grid": True, "grid.alpha": 0.3, "legend.fontsize": 8,
                     "svg.fonttype": "path", "figure.dpi": 100})
WIDE = (7.0, 3.0)


def _save(figure, path):
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def loss_curves(runs, reference, path):
    """Left: every run's loss per step, each later line thinner and dashed so that runs lying on the reference stay
    visible. Right: |loss - reference's| per step, exactly 0 for identical runs."""
    figure, (curves, gaps) = plt.subplots(1, 2, figsize=(7.0, 3.6))
    for order, run in enumerate(runs):
        steps = [r["step"] for r in run.steps]
        losses = [r["loss"] for r in run.steps]
        curves.plot(steps, losses, color=palette.colour(run.name), label=palette.key(run.name),
                    linewidth=max(3.0 - 0.4 * order, 1.2), linestyle="-" if order == 0 else (0, (4, 1 + order)))
    curves.set(xlabel="step", ylabel="loss (nats per word)", title="training loss")
    floor = 1e-9
    gap_by_run = analysis.loss_gaps([r for r in runs if r is not reference], reference)
    for order, (run_name, gap) in enumerate(gap_by_run.items()):  # thinner over thicker: zeros stay visible
        gaps.plot([s for s, _ in gap], [max(g, floor) for _, g in gap], color=palette.colour(run_name),
                  label=palette.key(run_name), linewidth=max(3.0 - 0.7 * order, 0.8))
    gaps.set_yscale("log")
    gaps.set_ylim(bottom=floor / 2)
    gaps.axhline(floor, color="grey", linewidth=0.8, linestyle=":")
    gaps.set(xlabel="step", ylabel="|loss - reference loss| (nats)",
             title=f"gap to the reference (0 drawn at {floor:g})")
    # One legend for both panels, below them: inside, it would hide the curves.
    figure.legend(*curves.get_legend_handles_labels(), loc="lower center", ncols=min(len(runs), 4))
    figure.tight_layout(rect=(0, 0.06 * ((len(runs) + 3) // 4), 1, 1))
    figure.savefig(path)
    plt.close(figure)


def verify_throughput(runs, path):
    """Throughput of every verify run: the median, with the central 68% of the steps as the bar."""
    figure, axes = plt.subplots(figsize=(7.0, 0.45 * len(runs) + 1.0))
    names = [r["name"] for r in runs]
    for y, run in enumerate(runs):
        t = run["throughput"]
        axes.barh(y, t["median"], color=palette.colour(run["name"]),
                  xerr=[[t["median"] - t["p16"]], [t["p84"] - t["median"]]], capsize=3)
    axes.set_yticks(range(len(names)), names)
    axes.invert_yaxis()
    axes.set(xlabel=f"{runs[0]['throughput']['unit']} (median; bar: central 68% of steps)",
             title="throughput of the verify runs")
    _save(figure, path)


def scaling(group, title, unit, path):
    """Left: throughput (`unit`) against workers, central-68% bars, one device's at W = 1 and linear scaling from
    it. Right: scaling efficiency against one device, 1 = linear."""
    figure, (rates, efficiency) = plt.subplots(1, 2, figsize=WIDE)
    most = max(p.workers for points in group.points.values() for p in points)
    if group.one_device:
        rates.plot([1], [group.one_device], color="black", marker="s", linestyle="", label="one device")
        rates.plot([1, most], [group.one_device, group.one_device * most], color="grey", linestyle=":",
                   linewidth=1, label="linear")
    for name, points in group.points.items():
        colour, workers = palette.colour(name), [p.workers for p in points]
        low = [p.words_per_sec - p.low if p.low is not None else 0 for p in points]
        high = [p.high - p.words_per_sec if p.high is not None else 0 for p in points]
        rates.errorbar(workers, [p.words_per_sec for p in points], yerr=[low, high], color=colour, marker="o",
                       capsize=3, label=palette.key(name))
        if group.one_device:
            efficiency.plot(workers, [p.efficiency for p in points], color=colour, marker="o",
                            label=palette.key(name))
    efficiency.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="linear")
    rates.set(xlabel="workers", ylabel=unit, title=title, xlim=(0.5, most + 0.5))
    efficiency.set(xlabel="workers", ylabel="speed-up over one device / workers", title="scaling efficiency",
                   xlim=(0.5, most + 0.5))
    efficiency.set_ylim(bottom=0)
    rates.set_ylim(bottom=0)
    rates.legend()
    efficiency.legend()
    _save(figure, path)


def measured_against_model(rows, path):
    """Left: bytes per step on the busiest link direction, measured against predicted. Right: the median step
    time against the model's point estimate. On the diagonal, the model explains the run."""
    figure, (traffic, time) = plt.subplots(1, 2, figsize=WIDE)
    _diagonal_scatter(traffic, [(r, r.busiest_predicted / 1e6, r.busiest_measured / 1e6) for r in rows
                                if r.busiest_predicted and r.busiest_measured is not None],
                      "predicted MB per step, busiest link", "measured MB per step, busiest link", "traffic")
    _diagonal_scatter(time, [(r, r.point_seconds, r.median_step_seconds) for r in rows
                             if r.point_seconds and r.median_step_seconds],
                      "point estimate of the step time (s)", "measured median step time (s)", "step time")
    _save(figure, path)


def _diagonal_scatter(axes, points, xlabel, ylabel, title):
    if not points:
        axes.text(0.5, 0.5, "not in bench.jsonl", ha="center", va="center", transform=axes.transAxes)
    seen = set()
    for row, x, y in points:
        axes.scatter(x, y, color=palette.colour(row.name), s=18, zorder=3,
                     label=None if row.name in seen else palette.key(row.name))
        seen.add(row.name)
    if points:
        top = max(max(x, y) for _, x, y in points) * 1.1
        axes.plot([0, top], [0, top], color="grey", linestyle="--", linewidth=1, label="measured = predicted")
        axes.legend()
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)


def extrapolation(predictions, path):
    """Left: predicted words/sec against workers per run. Right: Parallax's predicted speedup over the other
    architectures, with the paper's published ratios at its cluster size as markers."""
    figure, (rates, speedups) = plt.subplots(1, 2, figsize=WIDE)
    by_name = {}
    for p in sorted(predictions, key=lambda p: p.workers):
        by_name.setdefault(p.name, []).append(p)
    for name, points in by_name.items():
        rates.plot([p.workers for p in points], [p.words_per_sec for p in points], color=palette.colour(name),
                   marker="o", markersize=3, label=palette.key(name))
    rates.set(xlabel="workers", ylabel="predicted words/sec", title="extrapolation (bench.predict)")
    rates.legend()
    parallax = {p.workers: p.words_per_sec for p in by_name.get("parallax", [])}
    for other, published in analysis.PUBLISHED_PARALLAX["over"].items():
        mine = {p.workers: p.words_per_sec for p in by_name.get(other, [])}
        workers = sorted(set(parallax) & set(mine))
        if workers:
            speedups.plot(workers, [parallax[w] / mine[w] for w in workers], color=palette.colour(other),
                          marker="o", markersize=3, label=f"parallax / {other} (predicted)")
        speedups.scatter([analysis.PUBLISHED_PARALLAX["gpus"]], [published], color=palette.colour(other),
                         marker="*", s=90, edgecolor="black", zorder=3, label=f"parallax / {other}, paper (48 GPUs)")
    speedups.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    speedups.set_xlim(0, 1.1 * max([analysis.PUBLISHED_PARALLAX["gpus"], *parallax]))  # the stars inside the frame
    speedups.set(xlabel="workers", ylabel="speedup of parallax (x)", title="Parallax against the others")
    speedups.legend()
    _save(figure, path)


# The runner whose colour draws each of Parallax's architectures.
PARALLAX_COLOURS = {"ps": "tf", "allreduce": "horovod", "hybrid": "parallax"}


def parallax_points(points, path):
    """Parallax's published LM1B words/sec against machines (markers), the model's prediction through them
    (solid) and the bytes-only model's (dotted), one colour per architecture."""
    figure, axes = plt.subplots(figsize=WIDE)
    by_architecture = {}
    for p in sorted(points, key=lambda p: p.machines):
        by_architecture.setdefault(p.architecture, []).append(p)
    for architecture, line in by_architecture.items():
        colour = palette.colour(PARALLAX_COLOURS.get(architecture, architecture))
        machines = [p.machines for p in line]
        axes.scatter(machines, [p.published for p in line], color=colour, marker="*", s=90, edgecolor="black",
                     zorder=3, label=f"{architecture}, published")
        axes.plot(machines, [p.predicted for p in line], color=colour, marker="o", markersize=3,
                  label=f"{architecture}, model")
        if all(p.bytes_only is not None for p in line):
            axes.plot(machines, [p.bytes_only for p in line], color=colour, linestyle=":", linewidth=1,
                      label=f"{architecture}, bytes only")
    axes.set(xlabel="machines (6 GPUs each)", ylabel="words/sec", yscale="log",
             title="Parallax's LM1B figure against the model (bench.predict --parallax)")
    axes.legend(fontsize="small", ncol=3)
    _save(figure, path)


def crossover(allgather, hybrid, title, path):
    """`allgather`, `hybrid`: (runner name, {W: (measured, model's words/sec)}). Left: words/sec against workers,
    measured (markers) and the model's (line). Right: the hybrid's over allgather's; above 1 the hybrid is faster."""
    figure, (rates, ratio) = plt.subplots(1, 2, figsize=WIDE)
    for name, points in (allgather, hybrid):
        workers, colour = sorted(points), palette.colour(name)
        rates.scatter(workers, [points[w][0] for w in workers], color=colour, zorder=3,
                      label=f"{palette.key(name)}, measured")
        rates.plot(workers, [points[w][1] for w in workers], color=colour, label=f"{palette.key(name)}, model")
    workers = sorted(set(allgather[1]) & set(hybrid[1]))
    for which, style, label in ((0, "o", "measured"), (1, "-", "model")):
        ratio.plot(workers, [hybrid[1][w][which] / allgather[1][w][which] for w in workers], style,
                   color=palette.colour(hybrid[0]), label=label)
    ratio.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    rates.set(xlabel="workers", ylabel="words/sec", title=title)
    ratio.set(xlabel="workers", ylabel="hybrid / allgather (words/sec)", title="above 1: the hybrid is faster")
    rates.legend()
    ratio.legend()
    _save(figure, path)
