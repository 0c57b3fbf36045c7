"""make verify: do the four architectures train the same model?

    python verify.py --config=small --steps=60 --workers=2 --ps=1

Trains with one seed and config: the reference (run.py --emulate_workers=W), the parameter servers
synchronously (run_tf.py), Horovod with the sparse path and with --sparse_as_dense (run_horovod.py), the
hybrid (run_parallax.py) without and with --local_aggregation, and, as a row expected to differ, the
parameter servers asynchronously. Then it compares every checkpoint with the reference and every
synchronous one with every other (checkpoints_compare), prints a table, and writes
<results_dir>/verify.json:

    {"config": {...}, "runs": [{"name", "expected", "command", "checkpoint", "throughput"}],
     "pairs": [{"a", "b", "max_abs_diff", "max_rel_diff", "max_ulp", "identical", "within_tolerance",
                "differing_variables"}],
     "passed": bool}

Exit status 0 only when every synchronous run matches the reference within tolerance (--rtol, --atol);
1 when one differs or a run fails; 2 on bad input. --runner_args NAME=FLAGS adds flags to one run, for
negative controls: "parallax=--average_sparse=false" (sums instead of averaging) or "horovod=--seed=2" must
fail, naming the variables that differ.
"""
import json
import os
import shlex
import subprocess
import sys

import harness  # first: it fixes TensorFlow's kernels before TensorFlow loads
from harness import flags

import checkpoints_compare

REPO = os.path.dirname(os.path.abspath(__file__))

# name: (how to run it, extra runner flags, the expected relation to the reference)
RUNS = {
    "reference": ("run.py", [], "reference"),
    "tf": ("tf", [], "identical"),
    "horovod": ("horovod", [], "identical"),
    "horovod-dense": ("horovod", ["--sparse_as_dense"], "identical"),
    "parallax": ("parallax", [], "identical"),
    "parallax-local": ("parallax", ["--local_aggregation=true"], "identical"),
    "tf-async": ("tf", ["--sync=false"], "different"),
}


def parse_flags():
    parser = flags.parser("verify", __doc__)
    parser.add_argument("--workers", type=flags.positive_int, default=2)
    parser.add_argument("--ps", type=flags.positive_int, default=1)
    parser.add_argument("--hosts", help="host:slots,...: the distributed runs on these hosts over ssh "
                                        "(python -m harness.launch --help)")
    parser.add_argument("--rtol", type=float, default=checkpoints_compare.DEFAULT_RTOL)
    parser.add_argument("--atol", type=float, default=checkpoints_compare.DEFAULT_ATOL)
    parser.add_argument("--runs", default=",".join(RUNS), help="which runs, comma-separated (default: all)")
    parser.add_argument("--runner_args", action="append", default=[], metavar="NAME=FLAGS",
                        help="extra flags for one run, e.g. parallax=--average_sparse=false")
    parser.set_defaults(steps=60, ckpt_dir=os.path.join("checkpoints", "verify"))
    args = flags.parse(parser)
    args.runs = args.runs.split(",")
    if args.hosts:
        flags.host_slots(args.hosts)  # checked here, once
    unknown = [name for name in args.runs if name not in RUNS]
    if unknown or "reference" not in args.runs:
        raise harness.UsageError(f"--runs: must include reference and name only {', '.join(RUNS)}; got "
                                 f"{', '.join(unknown) or 'no reference'}")
    extra = {}
    for item in args.runner_args:
        name, _, value = item.partition("=")
        if name not in args.runs:
            raise harness.UsageError(f"--runner_args: {name!r} is not one of the runs ({', '.join(args.runs)})")
        extra[name] = extra.get(name, []) + shlex.split(value)
    args.runner_args = extra
    return args


def command(args, name):
    how, runner_flags, _ = RUNS[name]
    shared = [f"--config={args.config}", f"--steps={args.steps}", f"--warmup_steps={args.warmup_steps}",
              f"--seed={args.seed}", f"--results_dir={args.results_dir}", f"--run_name=verify-{name}",
              f"--ckpt_dir={os.path.join(args.ckpt_dir, name)}", f"--log_every={args.log_every}",
              f"--intra_op_threads={args.intra_op_threads}", f"--inter_op_threads={args.inter_op_threads}",
              *([f"--data_path={args.data_path}"] if args.data_path else []),
              *runner_flags, *args.runner_args.get(name, [])]
    if how == "run.py":
        return [sys.executable, os.path.join(REPO, "run.py"), f"--emulate_workers={args.workers}", *shared]
    return [sys.executable, "-m", "harness.launch", how, f"--workers={args.workers}", f"--ps={args.ps}",
            *([f"--hosts={args.hosts}"] if args.hosts else []), "--", *shared]


def main():
    args = parse_flags()
    runs = []
    for name in args.runs:
        argv = command(args, name)
        print(f"verify: {name}: {' '.join(shlex.quote(a) for a in argv)}", flush=True)
        if subprocess.run(argv, cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": REPO}).returncode:
            print(f"verify: run {name} failed", file=sys.stderr)
            return 1
        with open(os.path.join(args.results_dir, f"verify-{name}.json")) as f:
            summary = json.load(f)
        runs.append({"name": name, "expected": RUNS[name][2], "command": argv,
                     "checkpoint": summary["checkpoint"], "throughput": summary["throughput"]})

    checkpoint = {run["name"]: run["checkpoint"] for run in runs}
    synchronous = [run["name"] for run in runs if run["expected"] == "identical"]
    pairs = [("reference", name) for name in args.runs if name != "reference"]
    pairs += [(a, b) for i, a in enumerate(synchronous) for b in synchronous[i + 1:]]
    results = []
    for a, b in pairs:
        result = checkpoints_compare.compare(checkpoint[a], checkpoint[b], args.rtol, args.atol)
        results.append({"a": a, "b": b, **{key: result[key] for key in
                                           ("max_abs_diff", "max_rel_diff", "max_ulp", "identical",
                                            "within_tolerance")},
                        "differing_variables": [v["name"] for v in result["variables"] if not v["within_tolerance"]]
                        + result["missing"] + result["extra"] + [m["name"] for m in result["mismatched"]]})
    passed = all(r["within_tolerance"] for r in results if r["a"] in synchronous + ["reference"]
                 and r["b"] in synchronous)
    report(args, runs, results, passed)
    os.makedirs(args.results_dir, exist_ok=True)
    with open(os.path.join(args.results_dir, "verify.json"), "w") as f:
        json.dump({"config": {"config": args.config, "steps": args.steps, "seed": args.seed,
                              "workers": args.workers, "ps": args.ps, "data": args.data_path or "synthetic",
                              "rtol": args.rtol, "atol": args.atol},
                   "runs": runs, "pairs": results, "passed": passed}, f, indent=2)
    return 0 if passed else 1


def report(args, runs, pairs, passed):
    expected = {run["name"]: run["expected"] for run in runs}
    print(f"\nverify: {args.config} config, {args.steps} steps, seed {args.seed}, {args.workers} workers, "
          f"{args.ps} PS; tolerance rtol={args.rtol:g} atol={args.atol:g}")
    print(f"{'a':14s} {'b':14s} {'max |diff|':>11s} {'max rel':>10s} {'max ULP':>10s}  verdict")
    for p in pairs:
        if p["identical"]:
            verdict = "identical"
        elif p["within_tolerance"]:
            verdict = "within tolerance"
        elif "different" in (expected[p["a"]], expected[p["b"]]):
            verdict = "differs, as expected (asynchronous)"
        else:
            verdict = "DIFFERS: " + ", ".join(p["differing_variables"])
        print(f"{p['a']:14s} {p['b']:14s} {p['max_abs_diff']:11.3g} {p['max_rel_diff']:10.3g} "
              f"{p['max_ulp'] if p['max_ulp'] is not None else '-':>10}  {verdict}")
    print("\nthroughput (words/sec, median [central 68%], after the warm-up):")
    for run in runs:
        t = run["throughput"]
        print(f"  {run['name']:14s} {t['median']:10,.0f}  [{t['p16']:,.0f}, {t['p84']:,.0f}]")
    print(f"\nverify: {'PASSED' if passed else 'FAILED'}: every synchronous run "
          f"{'matches' if passed else 'must match'} the reference")


if __name__ == "__main__":
    harness.main(main)
