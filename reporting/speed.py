"""Section 6: throughput, from the verify runs (a smoke test) and from make bench (the comparison)."""
import os

from bench import crossover as crossing
from reporting import analysis, blocks, plots

BENCH_MISSING = "bench not run: make bench"
PREDICT_MISSING = "extrapolation not run: python -m bench.predict"
PARALLAX_MISSING = ("Parallax's figure not predicted: make bench as root (bench.costs measures this machine's "
                    "protocol costs on emulated links)")
REAL = ("Real hosts (make bench HOSTS=): the link is the slowest direction measured between them (bench.link_probe: "
        "TCP's payload rate, as frames), each host's bytes counted on its interface by one of its workers, and "
        "every message priced with half the measured round trip more.")
NOT_EMULATED = ("Links not emulated (make bench without root): every task ran on this machine's loopback, unshaped, "
                "so no byte crossed a network; no bytes were counted and no model applied (dashes).")
CROSSOVER_MISSING = "crossover sweep not run: make bench BENCH=crossover"


def throughput_section(results, figure_dir):
    parts = [blocks.paragraph(
        "Words per second leave out each run's warm-up steps; the median is given with the central 68% of the "
        "per-step rates, the mean with its nominal 95% interval, and the median step time. make bench leaves "
        "out 4 of 24 steps, not the 50-100 iterations the assignment discards: long runs of each architecture "
        "(python -m bench.warmup) put the median of steps 5-24 beside that of steps 50-150 (docs/bench.md, "
        "\"Warm-up\"); ARGS=\"--steps=150 --warmup_steps=50\" runs the assignment's window.")]
    verify = results.verify
    parts.append(blocks.subheading("The verify runs"))
    if verify is None:
        parts.append(blocks.missing("verify not run: make verify (no throughput of the verify runs)"))
    else:
        parts += verify_throughput(verify, os.path.join(figure_dir, "verify-throughput.svg"))
    kinds = {row.links for row in results.bench or []} or {"emulated"}
    parts.append(blocks.subheading("The benchmark: " + ", ".join(
        {"emulated": "emulated clusters", "real": "real hosts, links measured",
         "loopback": "one machine, links not emulated"}[kind] for kind in sorted(kinds))))
    parts += bench(results, figure_dir)
    parts += crossover(results, figure_dir)
    parts += parallax(results, figure_dir)
    return blocks.section("Throughput", *parts)


def verify_throughput(verify, figure_path):
    rows = []
    for run in verify["runs"]:
        t = run["throughput"]
        ci = t.get("ci95")
        mean = f"{blocks.rate(t['mean'])} ± {blocks.rate((ci[1] - ci[0]) / 2)}" if ci else blocks.rate(t["mean"])
        rows.append([run["name"], blocks.rate(t["median"]), blocks.interval(t["p16"], t["p84"]), mean,
                     blocks.seconds(t["median_step_seconds"]), t["measured_steps"]])
    plots.verify_throughput(verify["runs"], figure_path)
    unit = verify["runs"][0]["throughput"]["unit"]
    return [blocks.table(["run", f"median {unit}", "central 68%", "mean ± 95%", "median step", "steps"], rows,
                         f"Throughput of the verify runs ({verify['config']['workers']} workers, "
                         f"{verify['config']['steps']} steps each): a smoke test, not the comparison."),
            blocks.figure(figure_path, f"{unit} of the verify runs: median, and the central 68% of the steps.")]


def bench(results, figure_dir):
    if results.bench is None:
        return [blocks.missing(BENCH_MISSING)]
    rows = analysis.combine_repeats(results.bench)
    skipped = [r for r in results.bench if r.skipped]
    parts = [blocks.missing(f"skipped by make bench: {r.name}, {r.config}, {r.workers} workers, repeat {r.repeat}: "
                            f"{r.skipped}") for r in skipped]
    if not rows:
        return parts + [blocks.missing(f"{BENCH_MISSING} (bench.jsonl holds no measured run)")]
    parts.append(blocks.table(
        ["run", "config", "W", "PS", "mach.", "link", "runs", analysis.unit(rows), "central 68%", "step", "point",
         "compute", "network", "limit", "busiest MB meas.", "pred."],
        [[r.name, r.config, r.workers, _or_dash(r.ps), _or_dash(r.machines), r.link or "loopback", r.repeats,
          blocks.rate(r.median), blocks.interval(r.p16, r.p84) if r.p16 is not None else "-",
          _or_dash(r.median_step_seconds, blocks.seconds), _or_dash(r.point_seconds, blocks.seconds),
          _or_dash(r.compute_seconds, blocks.seconds), _or_dash(r.network_seconds, blocks.seconds), r.limit or "-",
          _or_dash(r.busiest_measured, _mb), _or_dash(r.busiest_predicted, _mb)] for r in rows],
        "make bench (bench.jsonl), each figure the median over the runs (repeats): W workers on that many "
        "machines joined by links of the given rate. The point is the performance model's estimate of "
        "the step: the longer of the W workers computing at once (compute: W run.py at once, per step the "
        "slowest; plus the update's work) and one worker's own path: its compute alone, slowed by the "
        "communication beside it, then what of the network it does not overlap (network: per phase the busiest "
        "link's bytes at the slower of the payload's share of the link and the protocol, with each message's "
        "cost; the pull overlapping the forward pass and the exchange the backward pass as the step trace "
        "allows); limit names the larger of compute and network. The busiest link "
        "direction's megabytes per step, counted on the machines' interfaces and predicted by the traffic model."
        + (" " + REAL if any(r.links == "real" for r in rows) else "")
        + (" " + NOT_EMULATED if any(r.links == "loopback" for r in rows) else "")))
    for index, ((config, link), group) in enumerate(analysis.bench_groups(rows).items()):
        path = os.path.join(figure_dir, f"bench-scaling-{index}.svg")
        title = f"{config}, {link or 'loopback'}"
        plots.scaling(group, title, analysis.unit(rows), path)
        parts.append(blocks.figure(path, f"Scaling, {title}: {analysis.unit(rows)} against workers (bars: central 68% "
                                         f"of the steps; square: one device alone; dotted: linear from it), and the "
                                         f"speed-up over one device per worker."))
    for index, link in enumerate(dict.fromkeys(r.link for r in rows if r.link)):  # (loopback: nothing modelled)
        path = os.path.join(figure_dir, f"bench-model-{index}.svg")
        plots.measured_against_model([r for r in rows if r.link == link], path)
        parts.append(blocks.figure(path, f"Step time against its point estimate, links of {link or 'loopback'}: "
                                         "bytes per step on the busiest link direction, measured against predicted, "
                                         "and the median step time against its point estimate. On the diagonal, the "
                                         "model explains the run; above it, something the model leaves out "
                                         "costs time."))
    parts.append(blocks.subheading("Extrapolation to larger clusters"))
    if results.predictions is None:
        parts.append(blocks.missing(PREDICT_MISSING))
    else:
        path = os.path.join(figure_dir, "bench-extrapolation.svg")
        plots.extrapolation(results.predictions, path)
        published = analysis.PUBLISHED_PARALLAX
        configs = ", ".join(dict.fromkeys(p.config for p in results.predictions))
        parts.append(blocks.figure(path, f"Extrapolation of {configs} to larger clusters (bench.predict: the traffic "
                                         "model with the compute time measured here, one worker a machine, the "
                                         "batch per worker fixed), with Parallax's published speedups on NLP models at "
                                         f"{published['gpus']} GPUs as stars (arXiv:1808.02621: "
                                         + ", ".join(f"{v}x over {k}" for k, v in published["over"].items()) + ")."))
    return parts


def parallax(results, figure_dir):
    parts = [blocks.subheading("Parallax's published figure")]
    if results.parallax is None:
        return parts + [blocks.missing(PARALLAX_MISSING)]
    parts.append(blocks.table(
        ["architecture", "machines", "predicted", "published", "pred./pub.", "bytes only / pub."],
        [[p.architecture, p.machines, blocks.rate(p.predicted), blocks.rate(p.published),
          f"{p.predicted / p.published:.2f}", _or_dash(p.bytes_only and p.bytes_only / p.published, "{:.2f}".format)]
         for p in results.parallax],
        "bench.predict --parallax: Parallax's LM1B words/sec as its README's figure shows them, against the model "
        "with the transports its experiments used and the costs measured here (compute calibrated on the hybrid "
        "at one machine), and the bytes-only model calibrated the same way."))
    path = os.path.join(figure_dir, "bench-parallax.svg")
    plots.parallax_points(results.parallax, path)
    parts.append(blocks.figure(path, "Parallax's twelve published points (stars), the model through them (solid) "
                                     "and the bytes-only model (dotted)."))
    return parts


def crossover(results, figure_dir):
    """Where the hybrid overtakes allgather: bench.run --crossover's runs, each run's point estimate the model."""
    parts = [blocks.subheading("Where the hybrid overtakes allgather")]
    rows = analysis.combine_repeats(results.crossover or [])
    points = crossing.points((r.name, r.workers, r.median, r.words_per_step / r.point_seconds) for r in rows
                             if r.words_per_step and r.point_seconds)
    ratios = crossing.ratios(points.get(crossing.HYBRID, {}), points.get(crossing.ALLGATHER, {}))
    if not ratios:
        return parts + [blocks.missing(CROSSOVER_MISSING)]
    memory = {(r.name, r.workers): r.tasks_peak_resident_bytes for r in rows}
    config, link = rows[0].config, rows[0].link
    parts.append(blocks.table(
        ["W", "allgather", "its model", "hybrid", "its model", "hybrid / allgather", "by the model",
         "GiB, allgather", "GiB, hybrid"],
        [[w, blocks.rate(points[crossing.ALLGATHER][w][0]), blocks.rate(points[crossing.ALLGATHER][w][1]),
          blocks.rate(points[crossing.HYBRID][w][0]), blocks.rate(points[crossing.HYBRID][w][1]),
          f"{measured:.2f}", f"{predicted:.2f}",
          *[_or_dash(memory.get((name, w)), _gib) for name in (crossing.ALLGATHER, crossing.HYBRID)]]
         for w, measured, predicted in ratios],
        f"bench.run --crossover ({config}, links of {link}): words/sec of Horovod's allgather and of the hybrid, "
        "measured (the median step) and by the model (the run's words per step over its point estimate), and the "
        "sum of every task's peak resident memory."))
    parts.append(blocks.paragraph(
        f"Measured, the hybrid is faster than allgather from {crossing.said(ratios, 1)}; by the model, from "
        f"{crossing.said(ratios, 2)}. With one parameter server a machine, each link carries about "
        "2(W-1)/W of a worker's rows under the hybrid and W-1 of them under allgather: by bytes they tie at W = 2 "
        "and the hybrid's lead grows as W/2.", lead="Crossover."))
    path = os.path.join(figure_dir, "bench-crossover.svg")
    plots.crossover(*[(name, points[name]) for name in (crossing.ALLGATHER, crossing.HYBRID)], f"{config}, {link}",
                    path)
    parts.append(blocks.figure(path, "Words/sec against workers, measured (markers) and by the model (lines), "
                                     "and the hybrid's ratio to allgather: above 1, the hybrid is faster."))
    return parts


def _gib(n):
    return f"{n / 2**30:.1f}"


def _mb(n):
    return f"{n / 1e6:.3g}"


def _or_dash(value, formatter=str):
    return "-" if value is None else formatter(value)
