"""make bench BENCH=validate: run the performance model's fixed grid of cells, keep a line per cell in
docs/validation.jsonl, and print each cell's measured step against the point and interval, and per set how many
fell inside and the median |log(measured / point)|. docs/bench.md ("Validation") explains the sets.

    python -m bench.validate [--sets=held-out]   # both sets, or one
    python -m bench.validate --score             # only score the kept records"""
import datetime
import math
import os
import statistics
import shutil
import signal
import subprocess
import sys

import harness
from harness import REPO, flags, results

from bench import costs

KEPT = os.path.join(REPO, "docs", "validation.jsonl")
RUNNERS = "tf,horovod,horovod-dense,parallax"
# (model, config, runners, worker counts, links) of each group of cells; each group is one bench.run sweep.
SETS = {
    "developed": [("lstm", "small", RUNNERS, "2,4", "1gbit,10gbit"), ("lstm", "small", RUNNERS, "2", "100mbit"),
                  ("transformer", "small", RUNNERS, "2,4", "100mbit,1gbit"),
                  ("lstm", "medium", RUNNERS, "2,4", "1gbit,10gbit"),
                  ("lstm", "small", RUNNERS, "3", "100mbit,1gbit,10gbit"),
                  ("transformer", "small", RUNNERS, "2,4", "10gbit")],
    "held-out": [("transformer", "small", RUNNERS, "2,3", "300mbit"), ("lstm", "small", RUNNERS, "2", "300mbit")],
}
STEPS, WARMUP = 24, 4  # the bench's default


def sweep(out, bench_flags, who):
    """Run one bench.run sweep with its results in `out` and return its records; its bad input stays exit 2."""
    command = [sys.executable, "-m", "bench.run", *bench_flags, f"--results_dir={out}"]
    print(f"{who}: " + " ".join(command[1:]), flush=True)
    status = run_child(command)
    if status:
        raise SystemExit(2 if status == 2 else f"{who}: the sweep failed (its output above)")
    return [record for _, record in results.read_lines(os.path.join(out, results.BENCH), "bench")]


def run_child(command):
    """Run `command` and return its exit status; if this process is stopped, SIGTERM the command and wait, so
    that it removes its emulated machines."""
    child = subprocess.Popen(command, cwd=REPO)
    try:
        return child.wait()
    finally:
        if child.poll() is None:
            child.terminate()
            child.wait()


def measure_costs(results_dir):
    """bench.costs into results_dir/validate, before any cell runs."""
    command = [sys.executable, "-m", "bench.costs", f"--results_dir={os.path.join(results_dir, 'validate')}"]
    print("bench.validate: " + " ".join(command[1:]), flush=True)
    if run_child(command):
        raise SystemExit("bench.validate: bench.costs failed (its output above)")


def run_group(model, config, runners, workers, links, results_dir):
    """One bench.run sweep of a group of cells; returns its records."""
    out = os.path.join(results_dir, "validate", model)
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(results_dir, "validate", costs.COSTS), out)  # every cell priced by the same costs
    return sweep(out,
                 [f"--model={model}", f"--configs={config}", f"--runners={runners}", f"--workers={workers}",
                  f"--net={links}", f"--steps={STEPS}", f"--warmup_steps={WARMUP}"], "bench.validate")


def cell(set_name, model, record, commit, date):
    """The kept line of one run: what it measured against the model's interval and point."""
    return {"set": set_name, "model": model, "config": record["config"], "runner": record["runner"],
            "workers": record["workers"], "link": record["link"], "date": date, "commit": commit,
            "step_seconds": record["throughput"]["median_step_seconds"],
            **{term: record.get(term) for term in (
                "compute_seconds", "compute_seconds_one_device", "lower_compute_seconds", "compute_beside_seconds",
                "interference_seconds", "own_compute_seconds", "path_seconds", "update_seconds",
                "background_seconds", "network_seconds", "lower_network_seconds", "upper_network_seconds",
                "lower_seconds", "upper_seconds")},
            "point_seconds": record["point_seconds"],
            "bytes_measured_over_predicted": record["bytes_measured_over_predicted"]}


def score(cells):
    """Lines: each cell's measured / point and whether it is inside, then each set's count and median error."""
    lines = [f"{'set':9s} {'model':18s} {'runner':14s} {'W':>2s} {'link':8s} {'step s':>7s} {'m/point':>7s} "
             f"{'interval':>15s}  inside"]
    for c in cells:
        inside = c["lower_seconds"] <= c["step_seconds"] <= c["upper_seconds"]
        model = f"{c['model']} {c['config']}"
        lines.append(f"{c['set']:9s} {model:18s} {c['runner']:14s} {c['workers']:2d} {c['link']:8s} "
                     f"{c['step_seconds']:7.3f} {c['step_seconds'] / c['point_seconds']:7.2f} "
                     f"{c['lower_seconds']:7.3f}-{c['upper_seconds']:<7.3f}  {'yes' if inside else 'NO'}")
    for set_name in dict.fromkeys(c["set"] for c in cells):  # the spent rounds' too
        chosen = [c for c in cells if c["set"] == set_name]
        if chosen:
            inside = sum(c["lower_seconds"] <= c["step_seconds"] <= c["upper_seconds"] for c in chosen)
            error = statistics.median(abs(math.log(c["step_seconds"] / c["point_seconds"])) for c in chosen)
            lines.append(f"{set_name}: {inside} of {len(chosen)} inside their interval; median |log(measured / "
                         f"point)| {error:.3f}")
    return lines


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through run_child's stop of the sweep
    parser = flags.parser("bench.validate", __doc__)
    flags.DEFINE_names("sets", list(SETS), "which sets of cells to run", parser, known=list(SETS))
    flags.DEFINE_boolean("score", False, "only score the kept records (docs/validation.jsonl)", flag_values=parser)
    args = flags.parse(parser)
    kept = [record for _, record in results.read_lines(KEPT, "validation cell")] if os.path.exists(KEPT) else []
    if not args.score:
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                                cwd=REPO).stdout.strip()  # "-dirty": the code that ran is not a commit's
        date = datetime.date.today().isoformat()
        measure_costs(args.results_dir)
        fresh = [cell(name, model, record, commit, date) for name in args.sets
                 for model, *group in SETS[name] for record in run_group(model, *group, args.results_dir)
                 if "skipped" not in record]
        kept = [c for c in kept if c["set"] not in args.sets] + fresh
        results.write_lines(KEPT, kept, "validation cell")
    print("\n".join(score(kept)))
    return 0


if __name__ == "__main__":
    harness.main(main)
