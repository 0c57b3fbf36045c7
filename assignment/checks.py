"""A submission checked against itself, nothing rerun: its files against the manifest's digests, the manifest's
settings against the configs verify and the bench recorded, verify's pairs against its runs, and every throughput
verify or the bench recorded against the run's own summary and steps. Each check returns its findings, a line
each; none trusts a file the others do not confirm."""
import os
import statistics

from harness import results
from harness.results import ResultsError
from assignment import manifest, rubric


def digests(submission, record):
    """Each file of results/ and report/ changed, missing or added since the manifest recorded it."""
    found = []
    for folder in ("results", "report"):
        then, now = record.get(folder) or {}, manifest.files_under(submission, folder)
        changed = [path for path in then if path in now and now[path] != then[path]]
        missing = [path for path in then if path not in now]
        added = [path for path in now if path not in then]
        found += [f"{path}: {what} since the submission was made"
                  for paths, what in ((changed, "changed"), (missing, "deleted"), (added, "added")) for path in paths]
    return found if any(record.get(folder) for folder in ("results", "report")) else [
        "the manifest has no digest of results/ or report/ (made before they were recorded): make submission again"]


def settings(record, verify, bench):
    """The manifest's settings and model digest against the configs verify and the bench recorded."""
    s, found = record["settings"], []
    said = {"model_sha256": record["model"]["sha256"], "config": s["config"], "steps": s["verify_steps"],
            "seed": s["seed"], "workers": s["workers"], "ps": s["ps"], "data": s["data"]}
    found += [f"verify.json's {key} is {verify['config'].get(key)!r}, the manifest's settings say {value!r}"
              for key, value in said.items() if value is not None and verify["config"].get(key) != value]
    said = {"config": s["config"] or verify["config"]["config"], "workers": s["workers"], "steps": s["bench_steps"],
            "warmup_steps": s["warmup_steps"]}
    for r in bench:
        found += [f"bench.jsonl: {r.get('run_name', r['runner'])}'s {key} is {r.get(key)!r}, the manifest's settings "
                  f"say {value!r}" for key, value in said.items() if r.get(key) != value]
        if r["runner"] not in s["bench_runs"]:
            found.append(f"bench.jsonl: {r['runner']} was not among the bench's runs ({', '.join(s['bench_runs'])})")
    return found


def pairs(verify, results_dir):
    """Every run verify lists, and every run summary verify left, paired with the reference; passed as its pairs."""
    runs = [run["name"] for run in verify["runs"]]
    paired = {pair["b"] for pair in verify["pairs"] if pair["a"] == "reference"}
    left = sorted(name[len("verify-"):-len(".json")] for name in os.listdir(results_dir)
                  if name.startswith("verify-") and name.endswith(".json") and not name.endswith(".hosts.json"))
    found = [f"verify.json: {name} ran but has no pair with the reference" for name in runs
             if name != "reference" and name not in paired]
    found += [f"verify.json: {name}'s run is in results/ but not in verify.json" for name in left if name not in runs]
    if verify["passed"] != all(pair.get("passed") is not False for pair in verify["pairs"]):  # verify.py's rule
        found.append(f"verify.json: passed is {verify['passed']}, its pairs say otherwise")
    return found


def measured_median(summary, steps_path):
    """The median words/sec of a run's steps after its warm-up, from its steps file."""
    rates = {record["step"]: record["words_per_sec"] for _, record in results.read_lines(steps_path, "step")
             if "words_per_sec" in record}
    warmup = summary["throughput"].get("warmup_steps", 0)
    measured = [rate for step, rate in rates.items() if step >= warmup]
    return statistics.median(measured) if measured else None


def throughputs(verify, bench, results_dir):
    """Each throughput verify and the bench recorded, against its run's summary and the steps it logged."""
    records = [(f"verify.json: {run['name']}", run, results_dir, f"verify-{run['name']}") for run in verify["runs"]]
    records += [(f"bench.jsonl: {r['run_name']}", r, os.path.join(results_dir, "bench"), r["run_name"])
                for r in bench if "run_name" in r and "skipped" not in r]
    found = []
    for where, record, folder, name in records:
        try:
            summary = results.read_json(results.summary_path(folder, name), "summary")
            median = measured_median(summary, results.steps_path(folder, name))
        except ResultsError as error:
            found.append(f"{where}: its run's own files cannot be read: {error}")
            continue
        if record["throughput"]["median"] != summary["throughput"]["median"]:
            found.append(f"{where}: throughput {record['throughput']['median']:,.1f}, its run's summary says "
                         f"{summary['throughput']['median']:,.1f}")
        if median is None or abs(median / summary["throughput"]["median"] - 1) > 1e-9:
            found.append(f"{where}: its summary's throughput {summary['throughput']['median']:,.1f} is not the median "
                         f"of the steps it logged ({median or 0:,.1f})")
    return found


def submission(path, record, results_dir):
    """Every check of this module, findings first to last; one line when verify's or the bench's file is unreadable."""
    try:
        verify = results.read_json(os.path.join(results_dir, results.VERIFY), "verify")
        bench = rubric.bench_records(results_dir)
        return (digests(path, record) + settings(record, verify, bench) + pairs(verify, results_dir)
                + throughputs(verify, bench, results_dir))
    except (ResultsError, KeyError, TypeError) as error:
        return digests(path, record) + [f"the results cannot be read: {error!r}"]
