"""The files under results/: their names, their records' required fields, and the one way to write and read them.
Records are checked against FIELDS and files written whole, so a crash never leaves half a file (docs/outputs.md)."""
import json
import os

VERIFY, BENCH, PREDICTIONS, PARALLAX = "verify.json", "bench.jsonl", "bench-predict.jsonl", "bench-parallax.jsonl"
CROSSOVER = "bench-crossover.jsonl"
OVERHEAD, PARTITION_SEARCH, SOAK = "bench-overhead.json", "partition-search.json", "soak.json"
NOT_RUN_SUMMARIES = {VERIFY, OVERHEAD, PARTITION_SEARCH, SOAK}


def summary_path(results_dir, run_name):
    return os.path.join(results_dir, run_name + ".json")


def steps_path(results_dir, run_name):
    return os.path.join(results_dir, run_name + ".jsonl")


def tensorboard_path(results_dir, run_name):
    return os.path.join(results_dir, "tensorboard", run_name)


def network_path(results_dir, run_name):
    return os.path.join(results_dir, run_name + ".network.json")


def hosts_path(results_dir, run_name):
    return os.path.join(results_dir, run_name + ".hosts.json")


# The fields the report and bench read, by kind, as {path: [field]}; "runs[].throughput": that of every run.
THROUGHPUT = ["median", "p16", "p84", "mean", "median_step_seconds", "measured_steps"]
FIELDS = {
    "summary": {"": ["runner", "config", "steps", "final_loss", "throughput", "checkpoint"], "config": ["name"],
                "throughput": THROUGHPUT},
    "step": {"": ["step", "loss"]},
    "hosts": {"": ["run", "hosts"], "hosts[]": ["host", "tasks", "environment"]},
    "verify": {
        "": ["config", "match", "runs", "pairs", "passed"],
        "config": ["config", "steps", "seed", "workers", "ps", "data", "rtol", "atol"],
        "runs[]": ["name", "expected", "command", "final_loss", "throughput"],
        "runs[].throughput": THROUGHPUT,
        "pairs[]": ["a", "b", "max_abs_diff", "max_scaled_diff", "max_ulp", "identical", "differing_variables",
                    "outside_tolerance", "verdict", "cause"],
    },
    "bench": {"": ["runner", "config", "workers", "ps", "machines", "link", "repeat", "compute_seconds_one_device",
                   "predicted_bytes_per_step"]},
    "measured bench": {"": ["throughput", "measured_bytes_per_step", "compute_seconds", "network_seconds",
                            "point_seconds"], "throughput": THROUGHPUT},
    "prediction": {"": ["runner", "config", "workers", "machines", "link", "words_per_sec"]},
    "parallax point": {"": ["architecture", "machines", "predicted_words_per_sec", "published_words_per_sec"]},
    "soak": {"": ["config", "runners", "passed"], "runners[]": ["runner", "survived", "steps_lost", "seconds_lost",
                                                                "identical", "problems"]},
    "validation cell": {"": ["set", "model", "config", "runner", "workers", "link", "date", "commit", "step_seconds",
                             "lower_seconds", "point_seconds", "upper_seconds"]},
}


class ResultsError(Exception):
    """A results file that cannot be read, or a record without a field its kind needs."""


def checked(record, kind, where):
    """Return `record` if it has `kind`'s fields ("measured bench" too if not skipped), else raise ResultsError."""
    kinds = [kind] + (["measured bench"] if kind == "bench" and isinstance(record, dict)
                      and "skipped" not in record else [])
    for fields in (FIELDS[k] for k in kinds):
        for path, names in fields.items():
            for label, value in _at(record, path.split(".") if path else [], path):
                if not isinstance(value, dict):
                    raise ResultsError(f"{where}: {label or 'the file'} is not a JSON object")
                for name in names:
                    if name not in value:
                        raise ResultsError(f"{where}: missing field {name!r}" + (f" in {label}" if label else ""))
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


def write_json(path, record, kind=None):
    """Write `record` to `path` whole, checked to be of `kind` when given."""
    if kind:
        checked(record, kind, path)
    _write_whole(path, json.dumps(record, indent=2))


def write_lines(path, records, kind=None):
    """Write `records` to `path` whole, a JSON line each, checked to be of `kind` when given."""
    for number, record in enumerate(records, 1):
        if kind:
            checked(record, kind, f"{path}:{number}")
    _write_whole(path, "".join(json.dumps(record) + "\n" for record in records))


def append_line(path, record, kind):
    """Append `record`, checked, in one write: a sweep stopped halfway keeps the lines of the runs it finished."""
    checked(record, kind, path)
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def _write_whole(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".partial", "w") as f:
        f.write(text)
    os.replace(path + ".partial", path)


def read_json(path, kind=None):
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, UnicodeDecodeError) as error:
        raise ResultsError(f"{path}: cannot read: {error}") from None
    except json.JSONDecodeError as error:
        raise ResultsError(f"{path}:{error.lineno}: not valid JSON: {error.msg}") from None
    return checked(record, kind, path) if kind else record


def read_lines(path, kind=None):
    """(line number, record) of every non-empty line of a JSON-lines file, each a JSON object (of `kind`)."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ResultsError(f"{path}: cannot read: {error}") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ResultsError(f"{path}:{number}: not valid JSON: {error.msg}") from None
        if not isinstance(record, dict):
            raise ResultsError(f"{path}:{number}: not a JSON object")
        records.append((number, checked(record, kind, f"{path}:{number}") if kind else record))
    return records
