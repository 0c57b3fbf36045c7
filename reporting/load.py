"""Reads results/: the only module that knows the files' names and fields (docs/outputs.md).

    verify.json            make verify's verdict                       -> Results.verify (None: not run)
    <run>.json, .jsonl     every run's summary and its steps            -> Results.runs
    bench.jsonl            make bench, one line per benchmarked run     -> Results.bench (None: not run)
    bench-predict.jsonl    python -m bench.predict's extrapolation      -> Results.predictions (None: not run)

Anything that cannot be read is an InputError naming the file (and line): the report is never built from
half of a file.
"""
import dataclasses
import glob
import json
import os

from reporting import InputError, palette

# Files in results/ that are not one run's summary.
NOT_RUN_SUMMARIES = {"verify.json", "bench-overhead.json", "partition-search.json"}


@dataclasses.dataclass
class Run:
    name: str          # run_name: results/<name>.json and .jsonl
    summary: dict
    steps: list        # the per-step records, in order


@dataclasses.dataclass
class BenchRow:
    """One benchmarked run. Every field the report uses from bench.jsonl is named here and nowhere else."""
    name: str                     # the run's label and colour (_label)
    runner: str
    config: str
    workers: int
    ps: int | None
    machines: int | None
    link_rate: str | None         # as given to --net (100mbit, 1gbit); None: loopback, unshaped
    delay: str | None             # added latency per link direction (--delay), None: none
    median: float                 # words/sec, median of the measured steps
    p16: float | None
    p84: float | None
    median_step_seconds: float | None
    bytes_measured: float | None  # bytes per step per machine, counted on its link
    bytes_predicted: float | None
    compute_seconds: float | None  # the step's computation alone
    bound_seconds: float | None    # the step time the link and the computation allow
    bound: str | None              # which limits the step: "network" or "compute"


@dataclasses.dataclass
class Prediction:
    """One point of bench.predict's extrapolation to a larger cluster."""
    name: str
    config: str
    workers: int
    machines: int | None
    link_rate: str | None
    words_per_sec: float


@dataclasses.dataclass
class Results:
    directory: str
    verify: dict | None
    runs: dict            # run_name -> Run
    bench: list | None    # [BenchRow]; None when bench.jsonl does not exist
    predictions: list | None

    def verify_run(self, name):
        """The Run behind verify.json's run `name` (verify names its runs verify-<name>), or None."""
        return self.runs.get(f"verify-{name}")


# The fields the report reads from verify.json and the summaries (docs/outputs.md): checked when read, so that
# a file of another shape is one line naming it, not a failure halfway through the report.
THROUGHPUT_FIELDS = ["median", "p16", "p84", "mean", "median_step_seconds", "measured_steps"]
VERIFY_FIELDS = {
    "": ["config", "match", "runs", "pairs", "passed"],
    "config": ["config", "steps", "seed", "workers", "ps", "data", "rtol", "atol"],
    "runs[]": ["name", "expected", "command", "final_loss", "throughput"],
    "runs[].throughput": THROUGHPUT_FIELDS,
    "pairs[]": ["a", "b", "max_abs_diff", "max_rel_diff", "max_ulp", "identical", "differing_variables", "verdict",
                "cause"],
}
SUMMARY_FIELDS = {"": ["runner", "config", "steps", "final_loss", "throughput"], "config": ["name"]}
STEP_FIELDS = ["step", "loss"]


def load(directory):
    if not os.path.isdir(directory):
        raise InputError(f"{directory}: no such results directory (run make verify, make bench)")
    verify_path = os.path.join(directory, "verify.json")
    verify = _checked(_read_json(verify_path), VERIFY_FIELDS, verify_path) if os.path.exists(verify_path) else None
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        if os.path.basename(path) in NOT_RUN_SUMMARIES:
            continue
        summary = _read_json(path)
        if not (isinstance(summary, dict) and "runner" in summary and "throughput" in summary):
            continue  # some other tool's file
        _checked(summary, SUMMARY_FIELDS, path)
        name = os.path.basename(path)[:-len(".json")]
        steps_path = os.path.join(directory, name + ".jsonl")
        steps = list(_read_lines(steps_path)) if os.path.exists(steps_path) else []
        for number, record in steps:
            _checked(record, {"": STEP_FIELDS}, f"{steps_path}:{number}")
        runs[name] = Run(name, summary, [record for _, record in steps])
    return Results(directory, verify, runs, _optional_lines(directory, "bench.jsonl", _bench_row),
                   _optional_lines(directory, "bench-predict.jsonl", _prediction))


def _optional_lines(directory, filename, parse):
    path = os.path.join(directory, filename)
    if not os.path.exists(path):
        return None
    rows = []
    for number, record in _read_lines(path):
        try:
            rows.append(parse(record))
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise InputError(f"{path}:{number}: {_describe(error)}") from None
    return rows


def _bench_row(record):
    # The throughput fields are the timer's (harness/timer.py), nested under "throughput" as in a summary or
    # at the top level of the line: both are accepted.
    throughput = record.get("throughput") or record
    bytes_per_step = record.get("bytes_per_step_per_machine") or {}
    return BenchRow(
        name=_label(record), runner=str(record["runner"]),
        config=_config_name(record["config"]), workers=int(record["workers"]),
        ps=_int_or_none(record.get("ps")), machines=_int_or_none(record.get("machines")),
        link_rate=record.get("link_rate"), delay=record.get("delay"), median=float(throughput["median"]),
        p16=_float_or_none(throughput.get("p16")), p84=_float_or_none(throughput.get("p84")),
        median_step_seconds=_float_or_none(throughput.get("median_step_seconds")),
        bytes_measured=_float_or_none(bytes_per_step.get("measured", record.get("bytes_per_step_measured"))),
        bytes_predicted=_float_or_none(bytes_per_step.get("predicted", record.get("bytes_per_step_predicted"))),
        compute_seconds=_float_or_none(record.get("compute_seconds")),
        bound_seconds=_float_or_none(record.get("bound_seconds")), bound=record.get("bound"))


def _prediction(record):
    return Prediction(name=_label(record), config=_config_name(record["config"]), workers=int(record["workers"]),
                      machines=_int_or_none(record.get("machines")),
                      link_rate=record.get("link_rate"), words_per_sec=float(record["words_per_sec"]))


def _checked(record, fields, where):
    """`record`, after checking it has `fields`: {path: [field]}, where a path names nested objects and [] every
    element of a list ("runs[].throughput"). Raises InputError naming `where`, the path and the field."""
    for path, names in fields.items():
        for label, value in _at(record, path.split(".") if path else [], path):
            if not isinstance(value, dict):
                raise InputError(f"{where}: {label or 'the file'} is not a JSON object")
            for name in names:
                if name not in value:
                    raise InputError(f"{where}: missing field {name!r}" + (f" in {label}" if label else ""))
    return record


def _at(value, steps, label):
    """(label, value) of every object a path reaches: runs[] reaches each element of runs."""
    if not steps:
        return [(label, value)]
    step, rest = steps[0], steps[1:]
    key = step.removesuffix("[]")
    if not isinstance(value, dict) or key not in value:
        return [(label, None)]
    if step.endswith("[]"):
        if not isinstance(value[key], list):
            return [(key, None)]
        return [item for i, element in enumerate(value[key]) for item in _at(element, rest, f"{key}[{i}]")]
    return _at(value[key], rest, key)


def _label(record):
    """The run's name in the report (and its colour): its run_name, else its architecture, else its runner."""
    return palette.key(str(record.get("run_name") or record.get("architecture") or record["runner"]))


def _config_name(config):
    return config["name"] if isinstance(config, dict) else str(config)


def _int_or_none(value):
    return None if value is None else int(value)


def _float_or_none(value):
    return None if value is None else float(value)


def _describe(error):
    return f"missing field {error.args[0]!r}" if isinstance(error, KeyError) else f"bad value: {error}"


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    except json.JSONDecodeError as error:
        raise InputError(f"{path}:{error.lineno}: not valid JSON: {error.msg}") from None


def _read_lines(path):
    """(line number, record) of every non-empty line of a JSON-lines file; each must be a JSON object."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{path}:{number}: not valid JSON: {error.msg}") from None
        if not isinstance(record, dict):
            raise InputError(f"{path}:{number}: not a JSON object")
        yield number, record
