"""make verify: do the four architectures train the same model?

    python verify.py --config=small --steps=60 --workers=2 --ps=1

Trains the reference (run.py --emulate_workers=W) and every distributed run with one seed, compares their
checkpoints, prints a table and writes <results_dir>/verify.json. With up to 2 workers every synchronous run must
be identical to the reference, bit for bit; with more, so must every run that adds in rank order, and the others
(Horovod's own allreduce) be within tolerance after their first step. Exit status 0 passed, 1 failed, 2 bad
input. docs/architecture.md, "What make verify shows, and why", explains it.
"""
import harness.determinism  # first: checkpoints_compare imports TensorFlow
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time

import numpy as np

import harness
from harness import REPO, experiments, flags, models, results, runner_flags
from harness.experiments import RUNS
from launcher import launch, machines, preflight, sandbox
from launcher.starters import docker

import checkpoints_compare

# With more than 2 workers, the step whose checkpoints judge the runs that may differ by rounding.
FIRST_STEP = 1


def parse_flags(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = flags.parser("verify", __doc__)
    parser.set_default("steps", 60)
    parser.set_default("ckpt_dir", os.path.join("checkpoints", "verify"))
    flags.DEFINE_integer("workers", 2, "workers of every distributed run", lower_bound=1, flag_values=parser)
    flags.DEFINE_integer("ps", 1, "parameter-server tasks", lower_bound=1, flag_values=parser)
    machines.define_flags(parser)  # the distributed runs' machines, as the launcher takes them
    flags.DEFINE_boolean("slurm", False, "the distributed runs as Slurm job steps in the allocation this runs in "
                         "(slurm/verify.sbatch; python -m launcher --help)", flag_values=parser)
    flags.DEFINE_string("docker", None, "IMAGE: every task of every run, the reference's too, in a container of its "
                        "own from this image (make docker-verify)", flag_values=parser)
    flags.DEFINE_finite_float("rtol", None, "relative tolerance (when the verdict allows one; default: the "
                              "model's TOLERANCE, or 1e-5)", parser)
    flags.DEFINE_finite_float("atol", None, "absolute tolerance (when the verdict allows one; default: the "
                              "model's TOLERANCE, or 1e-7)", parser)
    flags.DEFINE_enum("match", "auto", ["auto", "identical", "tolerance"], "what a synchronous run must achieve: "
                      "auto is identical with up to 2 workers, and with more where both runs add in rank order "
                      "(no rounding cause in harness/experiments.py), else within tolerance after step 1 (the last "
                      "step with identical or tolerance)", flag_values=parser)
    flags.DEFINE_list("runs", experiments.VERIFIED, "which runs, comma-separated (default: all)", flag_values=parser)
    flags.DEFINE_multi_string("runner_args", [], "NAME=FLAGS: extra flags for one run, e.g. "
                              "parallax=--average_sparse=false", flag_values=parser)
    flags.DEFINE_boolean("faults", False, "also run tf, horovod and parallax once more each (of those in --runs), "
                         "killing a task at a step drawn from the seed (a parameter server, a worker, the chief) "
                         "and resuming from the periodic checkpoints: each must match the reference as the "
                         "uninterrupted runs do", flag_values=parser)
    flags.DEFINE_boolean("sandbox", False, "run the model's code (the check of the runs' flags, every run) only in "
                         "sandboxes, each run writing only its own folders (launcher/sandbox.py; make grade)",
                         flag_values=parser)
    flags.DEFINE_list("sandbox_readable", [], "with --sandbox: folders the runs may read besides the toolkit, the "
                      "model's and the data's (the student's tree)", flag_values=parser)
    flags.DEFINE_integer("sandbox_memory", 16, "with --sandbox: GiB of address space a process", lower_bound=1,
                         flag_values=parser)
    flags.DEFINE_integer("sandbox_seconds", 3600, "with --sandbox: seconds a run may take", lower_bound=1,
                         flag_values=parser)
    flags.DEFINE_boolean("check_runs", False, "check every run's flags, print what verify needs of the model as "
                         "JSON and exit: the one process of verify that loads the model, which verify starts itself",
                         flag_values=parser)
    args = flags.parse(parser, argv, load_model=False)  # the judge never runs the model's code
    args.runs, args.runner_args = checked_runs(args.runs, args.runner_args)
    args.machines = machines.of(args)  # the distributed runs'
    if args.faults and args.steps < 4:
        raise harness.UsageError(f"--faults: --steps={args.steps} leaves no step between two checkpoints to kill at")
    # (a new list: the flag's default is the registry's own)
    args.runs = args.runs + [name for name in experiments.FAULTED
                             if args.faults and name.removesuffix("-fault") in args.runs]
    if args.docker and (args.hosts or args.slurm):
        raise harness.UsageError("--docker: not with --hosts or --slurm (each task is a machine of its own)")
    if args.docker:
        docker.check(args.docker)
    if args.sandbox and (args.hosts or args.slurm or args.docker or args.net):
        raise harness.UsageError("--sandbox: every run on this machine (not with --hosts, --slurm, --docker or --net)")
    if args.sandbox:  # paths as the sandbox, which starts in a folder of its own, finds them
        if not args.check_runs:  # (the check runs in one already)
            sandbox.check()
        args.model = os.path.abspath(args.model) if args.model.endswith(".py") else args.model
        args.data_path, args.ckpt_dir, args.results_dir = (os.path.abspath(path) if path else path for path in (
            args.data_path, args.ckpt_dir, args.results_dir))
    args.identical = args.match == "identical" or (args.match == "auto" and args.workers <= 2)
    if args.check_runs:
        return args
    facts = model_facts(args, argv)
    args.config = facts["config"]
    rtol, atol = facts["tolerance"]
    args.rtol, args.atol = (rtol if args.rtol is None else args.rtol), (atol if args.atol is None else args.atol)
    if args.hosts:  # every host ready (a private working directory too: the launcher copies the chief's outputs back)
        preflight.check(args.machines.starter, model=models.path_of(args.model))
    return args


def check_runs(args):
    """In the child model_facts starts: the model loaded, every run's flags checked as its runner will check them
    (rather than minutes in, when the run starts); the facts verify needs, printed as the last line."""
    model = models.load(args.model)
    args.config = models.config(model, args.config, args.batch_size).name
    for name in args.runs:
        check_run_flags(args, name)
    print(json.dumps({"config": args.config, "tolerance": list(models.tolerance(model))}))
    return 0


def model_facts(args, argv):
    """{config, tolerance} of the model, from a process of its own (sandboxed with --sandbox) that loads it and
    checks every run's flags: verify never runs the model's code. Its one-line errors are verify's; what it prints
    is checked as data."""
    # In a sandbox it writes nothing of verify's: it checks the runs' flags against folders of its own /tmp.
    inside = [f"--model={args.model}", f"--data_path={args.data_path}", "--ckpt_dir=/tmp/check/checkpoints",
              "--results_dir=/tmp/check/results"] if args.sandbox else []
    argv = [sys.executable, os.path.abspath(__file__), *argv, *inside, "--check_runs"]
    done = (sandboxed(args).run(argv, capture_output=True, text=True) if args.sandbox else
            subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO}))
    if args.sandbox and done.returncode == sandbox.TIMED_OUT:
        raise harness.UsageError(f"--model={args.model}: loading it to check the runs stopped at the sandbox's time "
                                 f"limit ({args.sandbox_seconds} s)")
    errors = [line.split(": error: ", 1)[1] for line in done.stderr.splitlines() if ": error: " in line]
    if done.returncode == 2 and errors:
        raise harness.UsageError("\n".join(errors))
    try:
        facts = json.loads(done.stdout.strip().splitlines()[-1])
        config, tolerance = facts["config"], tuple(facts["tolerance"])
        if not (isinstance(config, str) and len(tolerance) == 2 and
                all(isinstance(t, (int, float)) and math.isfinite(t) and t >= 0 for t in tolerance)):
            raise ValueError(facts)
    except (IndexError, KeyError, TypeError, ValueError):
        lines = (done.stderr.strip() or done.stdout.strip() or "nothing").splitlines()
        raise harness.UsageError(f"--model={args.model}: loading it to check the runs failed (exit "
                                 f"{done.returncode}): {lines[-1]}") from None
    return {"config": config, "tolerance": tolerance}


def sandboxed(args, name=None):
    """The sandbox of run `name` (None: the flags' check): the toolkit, the model's folder, the data and
    --sandbox_readable read-only; the run's own checkpoint and results folders writable (run_folders)."""
    readable = [REPO, os.path.dirname(models.path_of(args.model)), *args.sandbox_readable,
                *([os.path.abspath(args.data_path)] if args.data_path else [])]
    return sandbox.Sandbox(readable, run_folders(args, name) if name else [], args.sandbox_memory,
                           args.sandbox_seconds, {"PYTHONPATH": REPO})


def run_folders(args, name):
    """Where run `name` writes: its checkpoints, and, with --sandbox, a results folder of its own whose files
    verify moves into --results_dir once it ends (a run cannot touch another's)."""
    own = [os.path.abspath(os.path.join(args.ckpt_dir, name))]
    return own + [os.path.abspath(os.path.join(args.results_dir, f".{name}"))] if args.sandbox else own


def checked_runs(runs, runner_args):
    """--runs, checked, and --runner_args as {run: [flags]}; raises UsageError naming what is wrong."""
    unknown = [name for name in runs if name not in experiments.VERIFIED]
    repeated = sorted({name for name in runs if runs.count(name) > 1})
    if unknown or repeated or "reference" not in runs:
        why = (f"unknown {', '.join(unknown)}" if unknown else f"{', '.join(repeated)} named twice" if repeated
               else "no reference")
        raise harness.UsageError(f"--runs: {why}; name each of {', '.join(experiments.VERIFIED)} at most once, "
                                 f"reference included")
    if not set(runs) & set(experiments.SYNCHRONOUS):
        raise harness.UsageError(f"--runs: no synchronous run to verify (of {', '.join(runs)}); name at least "
                                 f"one of {', '.join(experiments.SYNCHRONOUS)}")
    extra = {}
    for item in runner_args:
        name, _, value = item.partition("=")
        if name not in runs:
            raise harness.UsageError(f"--runner_args: {name!r} is not one of the runs ({', '.join(runs)})")
        extra[name] = extra.get(name, []) + shlex.split(value)
    return runs, extra


def first_step_judged(args):
    """Whether the runs that may differ by rounding are judged at their first step: with more than 2 workers (under
    --match=auto) training grows a rounding difference past any tolerance by the last step, a wrong sum not."""
    return args.match == "auto" and args.workers > 2 and args.steps > FIRST_STEP and \
        any(RUNS[name].rounding for name in args.runs)


def fault_plan(args, name):
    """(checkpoint interval, kill step): a step drawn from the seed, after the first checkpoint and not at one."""
    save_every = max(2, args.steps // 3)
    step = int(np.random.default_rng([args.seed, experiments.FAULTED.index(name)]).integers(save_every + 1,
                                                                                           args.steps))
    return save_every, step - 1 if step % save_every == 0 else step


def command(args, name, resume=False, checked=True):
    """The command of run `name`; for a fault run, the one that kills its task (with `resume`, resumes it).
    `checked`: its flags were checked in verify's child (check_runs), so the launcher need not load the model."""
    run = RUNS[name]
    results_dir = run_folders(args, name)[1] if args.sandbox else args.results_dir
    shared = [*flags.passed_on(args, flags.RUN_FLAGS + ("log_every",)), f"--results_dir={results_dir}",
              f"--run_name=verify-{name}", f"--ckpt_dir={os.path.join(args.ckpt_dir, name)}", *run.flags,
              *args.runner_args.get(name, [])]
    if first_step_judged(args):
        shared.append(f"--save_step={FIRST_STEP}")
    fault = []
    if run.fault:
        save_every, step = fault_plan(args, name)
        shared += [f"--save_every={save_every}", "--log_every=1"] + (["--resume"] if resume else [])
        fault = [] if resume else [f"--fault={run.fault}:{step}"]
    if not run.architecture:
        argv = [sys.executable, os.path.join(REPO, "run.py"), f"--emulate_workers={args.workers}", *shared]
        # In a container too: the reference runs on the TensorFlow of the runs it is compared with.
        return [sys.executable, "-m", "launcher.starters.docker", f"--image={args.docker}", "--name=reference", "--",
                *argv] if args.docker else argv
    slurm = ["--slurm", "--require_shared_workdir"] if args.slurm else []
    containers = [f"--docker={args.docker}"] if args.docker else []
    return [sys.executable, "-m", "launcher", run.architecture, f"--workers={args.workers}",
            f"--ps={args.ps}", *args.machines.launcher_flags(), *slurm, *containers, *fault,
            *(["--runner_flags_checked"] if checked else []), "--", *shared]


def check_run_flags(args, name):
    """Parse the flags `name`'s command will get, as its runner will: bad input is a UsageError now."""
    argv = command(args, name, checked=False)
    try:
        if not RUNS[name].architecture:
            runner_flags.parse("run", "", argv[argv.index(os.path.join(REPO, "run.py")) + 1:])
        else:
            launch.parse_flags(argv[3:])
    except harness.UsageError as error:
        raise harness.UsageError(f"run {name}: {error}")


class RunFailed(Exception):
    """A run that failed or left results that cannot be trusted; the message says which and why."""


def train(args, name):
    """Run `name` and return what verify records of it, checked to be this run's and finite."""
    argv = command(args, name)
    summary_path = results.summary_path(args.results_dir, f"verify-{name}")
    if os.path.exists(summary_path):  # the chief removes it too, unless --runner_args sent its outputs elsewhere
        os.remove(summary_path)
    started = time.time()
    if args.sandbox:  # nothing in the run's own folders but what it writes
        for folder in run_folders(args, name):
            shutil.rmtree(folder, ignore_errors=True)
    if RUNS[name].fault:
        status = start(args, name, argv)
        if status != 1:
            raise RunFailed(f"run {name}: the run with {RUNS[name].fault} killed exited {status}, not 1")
        argv = command(args, name, resume=True)
    status = start(args, name, argv)
    if args.sandbox:
        move_results(run_folders(args, name)[1], args.results_dir)
    if status == sandbox.TIMED_OUT and args.sandbox:
        raise RunFailed(f"run {name} stopped at the sandbox's time limit ({args.sandbox_seconds} s)")
    if status:
        raise RunFailed(f"run {name} failed" + (f" (in its sandbox: {args.sandbox_memory} GiB of address space a "
                                                f"process)" if args.sandbox else ""))
    if not os.path.exists(summary_path):
        raise RunFailed(f"run {name} finished but wrote no {summary_path}")
    try:
        summary = results.read_json(summary_path, "summary")
    except results.ResultsError as error:
        raise RunFailed(f"run {name}: {error}")
    # The summary is new (removed above); the checkpoint it names must be too: written since the run started.
    checkpoint = summary["checkpoint"]
    if args.sandbox and os.path.dirname(os.path.abspath(checkpoint)) != run_folders(args, name)[0]:
        raise RunFailed(f"run {name}: the checkpoint {checkpoint} named by {summary_path} is not in the run's own "
                        f"folder {run_folders(args, name)[0]}")
    if not os.path.exists(checkpoint + ".index") or os.path.getmtime(checkpoint + ".index") < started - 1:
        raise RunFailed(f"run {name}: the checkpoint {checkpoint} named by {summary_path} is not from this run")
    non_finite = checkpoints_compare.non_finite(checkpoint)
    if non_finite or not math.isfinite(summary["final_loss"]):
        raise RunFailed(f"run {name} diverged: final loss {summary['final_loss']}, non-finite parameters in "
                        f"{', '.join(non_finite) or 'none'}")
    first = None
    if first_step_judged(args):
        first = os.path.join(os.path.dirname(checkpoint), f"model.ckpt-{FIRST_STEP}")
        if not os.path.exists(first + ".index") or os.path.getmtime(first + ".index") < started - 1:
            raise RunFailed(f"run {name}: no checkpoint after step {FIRST_STEP} from this run ({first})")
    return {"name": name, "expected": RUNS[name].verify, "command": argv, "checkpoint": checkpoint,
            **({"first_step_checkpoint": first} if first else {}),
            "final_loss": summary["final_loss"], "throughput": summary["throughput"],
            **({"fault": {"task": RUNS[name].fault, "killed_after_step": fault_plan(args, name)[1],
                          "resumed_at_step": summary["resumed_at_step"]}} if RUNS[name].fault else {})}


def start(args, name, argv):
    """Run one command of run `name` (in its sandbox with --sandbox) and return its exit status."""
    print(f"verify: {name}: {' '.join(shlex.quote(a) for a in argv)}", flush=True)
    if args.sandbox:
        return sandboxed(args, name).run(argv).returncode
    return subprocess.run(argv, cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": REPO}).returncode


def move_results(staged, results_dir):
    """Move every file a sandboxed run wrote in its own results folder to the same place under `results_dir`."""
    for root, _, names in os.walk(staged):
        for file_name in names:
            path = os.path.join(root, file_name)
            os.renames(path, os.path.join(results_dir, os.path.relpath(path, staged)))
    shutil.rmtree(staged, ignore_errors=True)


def judge(args, a, b, result):
    """(passed, verdict, cause) of one pair; `passed` is None for a pair that is not part of the verdict."""
    expected = {a: RUNS[a].verify, b: RUNS[b].verify}
    differing = result["differing_variables"]
    if "different" in expected.values():
        return None, "differs, as expected (asynchronous)" if not result["identical"] else "identical", \
            "asynchronous updates are applied to whatever the variables hold: stale gradients" \
            if not result["identical"] else None
    if result["identical"]:
        return True, "identical", None
    causes = [RUNS[name].rounding for name in (a, b) if RUNS[name].rounding]
    first = result.get("first_step")
    if causes and first:  # judged where rounding has not grown; the last step's difference is shown
        if not first["within_tolerance"]:
            return False, f"DIFFERS at step {FIRST_STEP}: " + named(first["outside_tolerance"]), None
        return True, f"within tolerance at step {FIRST_STEP}", \
            f"{causes[0]}; training grows that rounding step by step"
    if not result["within_tolerance"]:
        return False, "DIFFERS: " + named(result["outside_tolerance"]), None
    if args.identical or (not causes and args.match == "auto"):  # runs that add in one order agree at any W
        return False, f"NOT IDENTICAL (required with {args.workers} workers): {named(differing)}", None
    return True, "within tolerance", causes[0]


def compare(args, a, b):
    """What verify.json records of two checkpoints' difference (checkpoints_compare's, with the variables named)."""
    result = checkpoints_compare.compare(a, b, args.rtol, args.atol)
    unmatched = result["missing"] + result["extra"] + [m["name"] for m in result["mismatched"]]
    return {**{key: result[key] for key in ("max_abs_diff", "max_scaled_diff", "max_ulp", "identical",
                                            "within_tolerance")},
            "differing_variables": [v["name"] for v in result["variables"] if not v["identical"]] + unmatched,
            "outside_tolerance": [v["name"] for v in result["variables"] if not v["within_tolerance"]] + unmatched}


def named(variables, most=4):
    """The first few of `variables`, and how many more."""
    more = f" and {len(variables) - most} more" if len(variables) > most else ""
    return ", ".join(variables[:most]) + more


def main():
    args = parse_flags()
    if args.check_runs:
        return check_runs(args)
    os.makedirs(args.results_dir, exist_ok=True)
    verdict_path = os.path.join(args.results_dir, results.VERIFY)
    if os.path.exists(verdict_path):
        os.remove(verdict_path)  # an earlier verdict must not stand for this run
    if args.match != "auto":
        print(f"verify: --match={args.match} overrides the default (identical with up to 2 workers; with more, "
              f"identical where both runs add in rank order, else within tolerance after step 1)", flush=True)
    runs = []
    for name in args.runs:
        try:
            runs.append(train(args, name))
        except RunFailed as error:
            print(f"verify: FAILED: {error}", file=sys.stderr)
            return 1

    checkpoint = {r["name"]: r["checkpoint"] for r in runs}
    first_step = {r["name"]: r["first_step_checkpoint"] for r in runs if "first_step_checkpoint" in r}
    synchronous = [r["name"] for r in runs if r["expected"] == "identical"]
    pairs = [("reference", name) for name in args.runs if name != "reference"]
    pairs += [(a, b) for i, a in enumerate(synchronous) for b in synchronous[i + 1:]]
    compared = []
    for a, b in pairs:
        pair = {"a": a, "b": b, **compare(args, checkpoint[a], checkpoint[b])}
        if a in first_step and b in first_step and (RUNS[a].rounding or RUNS[b].rounding):
            pair["first_step"] = compare(args, first_step[a], first_step[b])
        pair["passed"], pair["verdict"], pair["cause"] = judge(args, a, b, pair)
        compared.append(pair)
    passed = all(p["passed"] is not False for p in compared)
    report(args, runs, compared, passed)
    results.write_json(verdict_path, {
        "config": {"model": args.model, "model_sha256": models.digest(args.model), "config": args.config,
                   "steps": args.steps, "seed": args.seed, "workers": args.workers,
                   "ps": args.ps, "data": args.data_path or "synthetic", "rtol": args.rtol, "atol": args.atol},
        "match": "identical" if args.identical else "tolerance", "runs": runs, "pairs": compared,
        "passed": passed}, "verify")
    return 0 if passed else 1


def report(args, runs, pairs, passed):
    tolerance = f"within tolerance rtol={args.rtol:g} atol={args.atol:g}"
    rule = "identical, bit for bit" if args.identical else (
        f"identical where both add in rank order, else {tolerance} after step {FIRST_STEP}"
        if first_step_judged(args) else tolerance)
    print(f"\nverify: model {args.model}, {args.config} config, {args.steps} steps, seed {args.seed}, "
          f"{args.workers} workers, {args.ps} PS; every synchronous run must be {rule}")
    print(f"{'a':14s} {'b':14s} {'max |diff|':>11s} {'of scale':>10s} {'max ULP':>10s}  verdict")
    for p in pairs:
        print(f"{p['a']:14s} {p['b']:14s} {p['max_abs_diff']:11.3g} {p['max_scaled_diff']:10.3g} "
              f"{p['max_ulp'] if p['max_ulp'] is not None else '-':>10}  {p['verdict']}")
    for p in (p for p in pairs if "first_step" in p and (p["a"] == "reference" or p["passed"] is False)):
        print(f"  {p['a']} and {p['b']} after step {FIRST_STEP}: max |diff| {p['first_step']['max_abs_diff']:.3g}, "
              f"of scale {p['first_step']['max_scaled_diff']:.3g}")
    causes = sorted({p["cause"] for p in pairs if p["cause"]})
    for cause in causes:
        print(f"  why not identical: {cause}")
    print(f"\nthroughput ({runs[0]['throughput']['unit']}, median [central 68%], after the warm-up):")
    for r in runs:
        t = r["throughput"]
        print(f"  {r['name']:14s} {t['median']:10,.0f}  [{t['p16']:,.0f}, {t['p84']:,.0f}]")
    for r in runs:
        if "fault" in r:
            print(f"  {r['name']}: {r['fault']['task']} killed after step {r['fault']['killed_after_step']}, "
                  f"the run resumed from its checkpoint after step {r['fault']['resumed_at_step']}")
    print(f"\nverify: {'PASSED' if passed else 'FAILED'}: every synchronous run "
          f"{'matches' if passed else 'must match'} the reference ({rule})")


if __name__ == "__main__":
    harness.main(main)
