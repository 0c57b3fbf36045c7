"""Read results/ (docs/outputs.md) into the report's view of it, with harness/results.py's names and readers.
Anything unreadable is a ResultsError naming the file and line: the report is never built from half a file."""
import dataclasses
import glob
import os

from harness import results
from harness.results import ResultsError
from launcher import machines
from reporting import palette


@dataclasses.dataclass
class Run:
    name: str          # run_name: results/<name>.json and .jsonl
    summary: dict
    steps: list        # the per-step records, in order
    hosts: list = None  # <name>.hosts.json's hosts (the launcher's): each host's tasks and environment


@dataclasses.dataclass
class BenchRow:
    """One line of bench.jsonl; every field the report uses from it is read in _bench_row and nowhere else."""
    name: str                     # the runner as the report names it (palette.key): tf, horovod-dense, ...
    config: str
    workers: int
    ps: int | None
    machines: int | None
    link: str | None              # the emulated link, as --net gives it: "100mbit", "1gbit delay 5ms"; the hosts'
                                  # measured ("node1, node2: measured 99.9 Mbit/s"); None: loopback
    links: str                    # "emulated", "real" (make bench HOSTS=: measured between hosts) or "loopback"
    repeat: int                   # which repeat of this combination (1, 2, ...)
    skipped: str | None           # why the bench did not run it; then every measurement below is None
    median: float | None          # words/sec: the timer's median of the measured steps, and its central 68%
    p16: float | None
    p84: float | None
    median_step_seconds: float | None
    busiest_measured: float | None   # bytes per step on the busiest machine link direction, counted
    busiest_predicted: float | None  # the same, from the traffic model
    compute_seconds: float | None    # the model's computation term
    network_seconds: float | None    # the model's network term (the pull, and the exchange left after the compute)
    point_seconds: float | None      # the model's point estimate of the step (None: a run it does not price)
    lower_seconds: float | None      # the model's interval of the step: everything overlapped ...
    upper_seconds: float | None      # ... and nothing
    one_device: float | None         # words/sec of one device alone (run.py, one worker's batch): scaling's base
    words_per_step: float | None     # the global batch's words: words/sec predicted = words_per_step / point
    tasks_peak_resident_bytes: float | None  # every task's peak resident memory, summed
    environment: dict | None
    repeats: int = 1              # repeats this row stands for (analysis.combine_repeats)

    @property
    def limit(self):
        """Which term of the point estimate is larger: what limits this run's step."""
        if self.network_seconds is None or self.compute_seconds is None:
            return None
        return "network" if self.network_seconds > self.compute_seconds else "compute"

    @property
    def explained(self):
        """Whether the measured step lies inside the model's interval (None: a run the model does not price)."""
        if None in (self.lower_seconds, self.upper_seconds, self.median_step_seconds):
            return None
        return self.lower_seconds <= self.median_step_seconds <= self.upper_seconds


@dataclasses.dataclass
class Prediction:
    """One point of bench.predict's extrapolation to a larger cluster."""
    name: str
    config: str
    workers: int
    words_per_sec: float


@dataclasses.dataclass
class ParallaxPoint:
    """One point of Parallax's published LM1B figure with the model's prediction (bench.predict --parallax)."""
    architecture: str             # ps, allreduce, hybrid
    machines: int
    predicted: float              # words/sec
    published: float
    bytes_only: float | None      # the bytes-only model's prediction


@dataclasses.dataclass
class Results:
    verify: dict | None
    runs: dict            # run_name -> Run
    bench: list | None    # [BenchRow]; None when bench.jsonl does not exist
    predictions: list | None
    parallax: list | None  # [ParallaxPoint]
    crossover: list | None  # [BenchRow] of bench-crossover.jsonl (bench.run --crossover)

    @property
    def empty(self):
        return not self.runs and all(found is None for found in (self.verify, self.bench, self.predictions,
                                                                   self.parallax, self.crossover))

    def verify_run(self, name):
        """The Run behind verify.json's run `name` (verify names its runs verify-<name>), or None."""
        return self.runs.get(f"verify-{name}")


def load_models(directory):
    """[(model, Results)]: `directory`'s results (model None), or else its subdirectories' (RESULTS/<model>/)."""
    own = load(directory)
    if not own.empty:
        return [(None, own)]
    found = [(name, load(os.path.join(directory, name))) for name in sorted(os.listdir(directory))
             if os.path.isdir(os.path.join(directory, name))]
    return [(name, results) for name, results in found if not results.empty] or [(None, own)]


def load(directory):
    if not os.path.isdir(directory):
        raise ResultsError(f"{directory}: no such results directory (run make verify, make bench)")
    verify_path = os.path.join(directory, results.VERIFY)
    verify = results.read_json(verify_path, "verify") if os.path.exists(verify_path) else None
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        if os.path.basename(path) in results.NOT_RUN_SUMMARIES:
            continue
        summary = results.read_json(path)
        if not (isinstance(summary, dict) and "runner" in summary and "throughput" in summary):
            continue  # some other tool's file
        results.checked(summary, "summary", path)
        name = os.path.basename(path)[:-len(".json")]
        steps_path = results.steps_path(directory, name)
        steps = results.read_lines(steps_path, "step") if os.path.exists(steps_path) else []
        hosts_path = results.hosts_path(directory, name)
        hosts = results.read_json(hosts_path, "hosts")["hosts"] if os.path.exists(hosts_path) else None
        runs[name] = Run(name, summary, [record for _, record in steps], hosts)
    return Results(verify, runs, _optional_lines(directory, results.BENCH, "bench", _bench_row),
                   _optional_lines(directory, results.PREDICTIONS, "prediction", _prediction),
                   _optional_lines(directory, results.PARALLAX, "parallax point", _parallax_point),
                   _optional_lines(directory, results.CROSSOVER, "bench", _bench_row))


def _optional_lines(directory, filename, kind, parse):
    path = os.path.join(directory, filename)
    if not os.path.exists(path):
        return None
    rows = []
    for number, record in results.read_lines(path, kind):
        try:
            rows.append(parse(record))
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise ResultsError(f"{path}:{number}: {_describe(error)}") from None
    return rows


def _bench_row(record):
    throughput = record.get("throughput") or {}  # absent when the run was skipped
    return BenchRow(
        name=palette.key(str(record["runner"])), config=str(record["config"]), workers=int(record["workers"]),
        ps=_int_or_none(record.get("ps")), machines=_int_or_none(record.get("machines")), link=record.get("link"),
        links=machines.kind_of(record).said,
        repeat=int(record.get("repeat", 1)), skipped=record.get("skipped"),
        median=_float_or_none(throughput.get("median")), p16=_float_or_none(throughput.get("p16")),
        p84=_float_or_none(throughput.get("p84")),
        median_step_seconds=_float_or_none(throughput.get("median_step_seconds")),
        busiest_measured=_busiest(record.get("measured_bytes_per_step")),
        busiest_predicted=_busiest(record.get("predicted_bytes_per_step")),
        compute_seconds=_float_or_none(record.get("compute_seconds")),
        network_seconds=_float_or_none(record.get("network_seconds")),
        point_seconds=_float_or_none(record.get("point_seconds")),
        lower_seconds=_float_or_none(record.get("lower_seconds")),
        upper_seconds=_float_or_none(record.get("upper_seconds")),
        one_device=_float_or_none(record.get("one_device_words_per_sec")),
        words_per_step=_float_or_none(record.get("words_per_step")),
        tasks_peak_resident_bytes=_float_or_none(record.get("tasks_peak_resident_bytes")),
        environment=record.get("environment"))


def _busiest(per_machine):
    """The most bytes any machine sent or received per step: the link that sets the network's share of the step."""
    if not per_machine:
        return None
    return max(float(value) for machine in per_machine for value in (machine["sent"], machine["received"]))


def _prediction(record):
    return Prediction(name=palette.key(str(record["runner"])), config=str(record["config"]),
                      workers=int(record["workers"]), words_per_sec=float(record["words_per_sec"]))


def _parallax_point(record):
    return ParallaxPoint(architecture=str(record["architecture"]), machines=int(record["machines"]),
                         predicted=float(record["predicted_words_per_sec"]),
                         published=float(record["published_words_per_sec"]),
                         bytes_only=_float_or_none(record.get("bytes_only_words_per_sec")))


def _int_or_none(value):
    return None if value is None else int(value)


def _float_or_none(value):
    return None if value is None else float(value)


def _describe(error):
    return f"missing field {error.args[0]!r}" if isinstance(error, KeyError) else f"bad value: {error}"
