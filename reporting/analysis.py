"""Numbers derived from the results, shared by the plots and the sentences so that both say the same."""
import collections
import dataclasses
import statistics

# Parallax's published speedups on NLP models with 48 GPUs (Kim et al., EuroSys 2019, arXiv:1808.02621,
# abstract): the only numbers in the report that are not measured here, drawn as markers and labelled as the
# paper's.
PUBLISHED_PARALLAX = {"gpus": 48, "over": {"tf": 2.8, "horovod": 6.02}}


@dataclasses.dataclass
class ScalingPoint:
    workers: int
    words_per_sec: float
    low: float | None
    high: float | None
    efficiency: float     # speedup over the run's fewest-worker point, divided by the ratio of workers


def combine_repeats(rows):
    """One row per (config, link, run, workers) that was measured: each figure the median over the repeats."""
    repeats = collections.defaultdict(list)
    for row in rows:
        if row.skipped is None:
            repeats[(row.config, str(row.link), row.name, row.workers)].append(row)
    combined = []
    for key in sorted(repeats):
        group = repeats[key]
        medians = {field: _median([getattr(row, field) for row in group]) for field in MEASURED_FIELDS}
        combined.append(dataclasses.replace(group[0], **medians, repeats=len(group)))
    return combined


MEASURED_FIELDS = ["median", "p16", "p84", "median_step_seconds", "busiest_measured", "busiest_predicted",
                   "compute_seconds", "network_seconds", "bound_seconds", "tasks_peak_resident_bytes"]


def _median(values):
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def bench_groups(rows):
    """{(config, link): {run name: [ScalingPoint by workers]}} of combined rows: one plot and one paragraph per
    group."""
    grouped = collections.defaultdict(lambda: collections.defaultdict(list))
    for row in rows:
        grouped[(row.config, row.link)][row.name].append(row)
    return {group: {name: scaling(points) for name, points in sorted(runs.items())}
            for group, runs in sorted(grouped.items(), key=lambda item: (item[0][0], str(item[0][1])))}


def scaling(rows):
    rows = sorted(rows, key=lambda row: row.workers)
    base = rows[0]
    return [ScalingPoint(row.workers, row.median, row.p16, row.p84,
                         (row.median / base.median) / (row.workers / base.workers)) for row in rows]


def loss_gaps(runs, reference):
    """{run name: [|loss - reference loss| per step]} over the steps both recorded."""
    reference_loss = {record["step"]: record["loss"] for record in reference.steps}
    return {run.name: [(r["step"], abs(r["loss"] - reference_loss[r["step"]]))
                       for r in run.steps if r["step"] in reference_loss]
            for run in runs}


def unit(rows):
    """The throughput unit of bench rows ("words/sec"), as their runs' environment records it."""
    return f"{next((r.environment.get('unit') for r in rows if r.environment and r.environment.get('unit')), 'words')}/sec"
