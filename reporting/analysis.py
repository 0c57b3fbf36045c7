"""Numbers derived from the results, shared by the plots and the sentences so that both say the same."""
import collections
import dataclasses
import statistics

# Parallax's published speedups on NLP models with 48 GPUs (arXiv:1808.02621, abstract): the report's only numbers
# not measured here, drawn as markers labelled as the paper's.
PUBLISHED_PARALLAX = {"gpus": 48, "over": {"tf": 2.8, "horovod": 6.02}}


@dataclasses.dataclass
class ScalingPoint:
    workers: int
    words_per_sec: float
    low: float | None
    high: float | None
    efficiency: float | None  # speed-up over one device, divided by the workers (None: one device not measured)


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
                   "compute_seconds", "network_seconds", "point_seconds", "lower_seconds", "upper_seconds",
                   "one_device", "tasks_peak_resident_bytes"]


def _median(values):
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


@dataclasses.dataclass
class Group:
    """The runs of one config over one link: one plot and one paragraph of the report."""
    one_device: float | None   # words/sec of one device alone, the base of every run's scaling
    points: dict               # {run name: [ScalingPoint by workers]}


def bench_groups(rows):
    """{(config, link): Group} of combined rows."""
    grouped = collections.defaultdict(lambda: collections.defaultdict(list))
    for row in rows:
        grouped[(row.config, row.link)][row.name].append(row)
    groups = {}
    for key, runs in sorted(grouped.items(), key=lambda item: (item[0][0], str(item[0][1]))):
        one = _median([row.one_device for runs_rows in runs.values() for row in runs_rows])
        groups[key] = Group(one, {name: scaling(runs_rows, one) for name, runs_rows in sorted(runs.items())})
    return groups


def scaling(rows, one_device):
    """Each row's point; efficiency is the speed-up over `one_device` (words/sec) per worker."""
    return [ScalingPoint(row.workers, row.median, row.p16, row.p84,
                         row.median / one_device / row.workers if one_device else None)
            for row in sorted(rows, key=lambda row: row.workers)]


def loss_gaps(runs, reference):
    """{run name: [|loss - reference loss| per step]} over the steps both recorded."""
    reference_loss = {record["step"]: record["loss"] for record in reference.steps}
    return {run.name: [(r["step"], abs(r["loss"] - reference_loss[r["step"]]))
                       for r in run.steps if r["step"] in reference_loss]
            for run in runs}


def unit(rows):
    """The throughput unit of bench rows ("words/sec"), as their runs' environment records it."""
    unit = next((r.environment.get("unit") for r in rows if r.environment and r.environment.get("unit")), "words")
    return f"{unit}/sec"
