"""make submission: what a student hands in, made in one go and meant to be committed (docs/submission.md).

    python -m assignment.submit --model=models/mine.py --workers=2          (make submission MODEL=models/mine.py)
    python -m assignment.submit --report_only                               (make submission-report)

Runs make verify, the bench in the assignment's window (--warmup_steps left out of --bench_steps) and the report,
then writes <out>/: results/<model>/, report/report.pdf, manifest.json (assignment/manifest.py) and, when there
is none yet, student.md, the student's own section, from its template. A verify that fails goes on to the bench
and the report: the student explains each difference. --report_only typesets the report again (after editing
student.md) with the settings the manifest records; the commit and the results' digests stay as they were made.
Exit 0 when every step ran and verify passed, 1 when one failed (named; the manifest then says so), 2 on bad
input."""
import datetime
import os
import shutil
import subprocess
import sys
import time

import harness
from harness import REPO, flags, models, results
from assignment import manifest, rubric, student
from bench import costs
from launcher import machines

# The assignment's window: "the first 50~100 iterations ... can be unstable, so just discard them". 100 steps
# measured after them give the median a standard error of about an eighth of the step times' spread.
BENCH_STEPS, WARMUP_STEPS = 150, 50
# What is fixed when the results are made: make submission-report keeps these and adds the report's own.
MADE = ("made", "settings", "submitted_by", "commit", "dirty", "changed", "model", "results", "hosts")


def parse_flags(argv=None):
    parser = flags.FlagSet("python -m assignment.submit", __doc__)
    flags.DEFINE_string("model", "lstm", "the model: a built-in one or a path to a model file", flag_values=parser)
    flags.DEFINE_string("config", None, "the model's configuration (default: its first)", flag_values=parser)
    flags.DEFINE_integer("workers", 2, "workers of every distributed run", lower_bound=1, flag_values=parser)
    flags.DEFINE_integer("ps", 1, "parameter-server tasks", lower_bound=1, flag_values=parser)
    flags.DEFINE_integer("seed", 1, "the seed of every run", lower_bound=0, flag_values=parser)
    flags.DEFINE_string("data_path", "", "a text in PTB's format; default: the synthetic corpus", flag_values=parser)
    machines.define_flags(parser, net=None)  # verify's distributed runs and the bench on --hosts
    flags.DEFINE_integer("verify_steps", 60, "steps of verify's runs", lower_bound=4, flag_values=parser)
    flags.DEFINE_integer("bench_steps", BENCH_STEPS, "steps of each bench run", lower_bound=2, flag_values=parser)
    flags.DEFINE_integer("warmup_steps", WARMUP_STEPS, "first steps of each bench run left out of its throughput "
                         f"(the assignment: {rubric.LEAST_WARMUP} at least)", lower_bound=0, flag_values=parser)
    flags.DEFINE_list("runs", [], "verify's distributed runs (default: every one it knows)", flag_values=parser)
    flags.DEFINE_list("bench_runs", list(rubric.ARCHITECTURES), "the bench's runs: the three the assignment "
                      "compares; their variants (horovod-dense, parallax-local, ...) cost as long again each",
                      flag_values=parser)
    flags.DEFINE_string("net", "100mbit" if os.geteuid() == 0 else "loopback", "the bench's emulated link rate per "
                        "machine; loopback: not emulated (the default without root)", flag_values=parser)
    flags.DEFINE_string("out", "submission", "where the submission goes", flag_values=parser)
    flags.DEFINE_string("student", None, "who hands it in, as the gradebook should name them (default: git's "
                        "user)", flag_values=parser)
    flags.DEFINE_boolean("report_only", False, "typeset the report again from <out>/results and student.md",
                         flag_values=parser)
    args = flags.parse(parser, argv)
    manifest.head()  # the commit the submission will be tied to
    args.earlier = {}
    if args.report_only:  # the settings the submission was made with
        path = os.path.join(args.out, manifest.FILE)
        if not os.path.exists(path):
            raise harness.UsageError(f"--report_only: no {path}: make submission first")
        args.earlier = results.read_json(path)
        args.settings = args.earlier["settings"]
    else:
        args.settings = {"model": args.model, "config": args.config, "workers": args.workers, "ps": args.ps,
                         "seed": args.seed, "data": args.data_path or "synthetic", "verify_steps": args.verify_steps,
                         "bench_steps": args.bench_steps, "warmup_steps": args.warmup_steps, "net": args.net,
                         "hosts": [f"{h}:{n}" for h, n in args.hosts or []], "runs": args.runs,
                         "bench_runs": args.bench_runs}
        model_file(args.model)
    if args.warmup_steps >= args.bench_steps:
        raise harness.UsageError(f"--warmup_steps={args.warmup_steps}: leaves none of --bench_steps="
                                 f"{args.bench_steps} measured")
    args.name = os.path.splitext(os.path.basename(args.settings["model"]))[0]
    args.results_dir = os.path.join(args.out, "results", args.name)
    return args


def model_file(model):
    """The model's file relative to the repository; a UsageError unless git tracks it (the TA's clone has only what
    is committed, and make grade takes the model from it)."""
    relative = manifest.in_repository(models.path_of(model))
    if relative is None:
        raise harness.UsageError(f"--model={model}: outside the repository: copy it into models/ and git add it "
                                 f"(the TA grades the file the repository holds)")
    if not manifest.tracked(relative):
        raise harness.UsageError(f"--model={model}: git does not track {relative}: git add {relative} first (the "
                                 f"TA grades the file the repository holds)")
    return relative


def run_flags(settings, config="config"):
    """The flags that decide what a submission's runs compute; `config`: the flag that names the config."""
    return [f"--model={settings['model']}", f"--{config}={settings['config']}", f"--seed={settings['seed']}",
            *([f"--data_path={settings['data']}"] if settings["data"] != "synthetic" else [])]


def verify_command(settings, results_dir, ckpt_dir):
    """make verify with a submission's settings (make grade's rerun: the same, on the TA's machine)."""
    steps = settings["verify_steps"]
    return [sys.executable, os.path.join(REPO, "verify.py"), *run_flags(settings), f"--steps={steps}",
            f"--warmup_steps={min(settings['warmup_steps'], steps // 4)}", f"--workers={settings['workers']}",
            f"--ps={settings['ps']}", f"--results_dir={results_dir}", f"--ckpt_dir={ckpt_dir}",
            *([f"--hosts={','.join(settings['hosts'])}"] if settings["hosts"] else []),
            *([f"--runs=reference,{','.join(settings['runs'])}"] if settings["runs"] else [])]


def bench_command(settings, results_dir, ckpt_dir, steps, warmup_steps, runs):
    """The bench of a submission's config at its workers and link rate: `runs` for `steps` steps each."""
    machines = [f"--hosts={','.join(settings['hosts'])}"] if settings["hosts"] else [f"--net={settings['net']}"]
    return [sys.executable, "-m", "bench.run", *run_flags(settings, "configs"), f"--workers={settings['workers']}",
            *machines, f"--steps={steps}", f"--warmup_steps={warmup_steps}",
            f"--runners={','.join(runs)}", f"--results_dir={results_dir}", f"--ckpt_dir={ckpt_dir}"]


def commands(args):
    """[(what, argv)] of the steps, in order: verify, the bench and its Parallax prediction, the report."""
    s = args.settings
    report = [sys.executable, "-m", "reporting", f"--results_dir={os.path.join(args.out, 'results')}",
              f"--out_dir={os.path.join(args.out, 'report')}", f"--student={os.path.join(args.out, 'student.md')}"]
    if args.report_only:
        return [("report", report)]
    reach = [f"--ssh_config={args.ssh_config}"] if args.ssh_config else []  # how, not what: no setting
    return [("verify", verify_command(s, args.results_dir, "checkpoints/submission") + reach),
            ("bench", bench_command(s, args.results_dir, "checkpoints/submission-bench", s["bench_steps"],
                                    s["warmup_steps"], s["bench_runs"]) + reach),
            ("predict", [sys.executable, "-m", "bench.predict", "--parallax", f"--results_dir={args.results_dir}"]),
            ("report", report)]


def run(what, argv):
    """Run one step, its output shown as it comes; return what the manifest records of it."""
    print(f"submission: {what}: {' '.join(argv)}", flush=True)
    started = time.monotonic()
    status = subprocess.run(argv, env={**os.environ, "PYTHONPATH": REPO}).returncode
    return {"step": what, "argv": argv, "status": status, "seconds": round(time.monotonic() - started, 1)}


def write_template(args):
    """student.md from its template, unless the student has one: never overwritten."""
    path = os.path.join(args.out, "student.md")
    if not os.path.exists(path):
        verify_path = os.path.join(args.results_dir, results.VERIFY)
        verify = results.read_json(verify_path, "verify") if os.path.exists(verify_path) else None
        with open(path, "w") as f:
            f.write(student.template(args.name, rubric.differing(verify)))
        print(f"submission: wrote {path}, the student's own section: fill it in, then make submission-report")


def stopped(step, verify_path):
    """Whether a step failed; a verify that ran and found differences did not: they are the student's to explain."""
    return bool(step["status"]) and not (step["step"] == "verify" and step["status"] == 1
                                         and os.path.exists(verify_path))


def failed(args, done, verify_path):
    """The step that failed, or None: a measuring step's failure stays, whatever make submission-report does
    after it (make submission again); the report's failure is the report's own."""
    if args.report_only:
        measuring = args.earlier.get("failed") if args.earlier.get("failed") != "report" else None
    else:
        measuring = next((step["step"] for step in done if step["step"] != "report" and stopped(step, verify_path)),
                         None)
    return measuring or ("report" if done[-1]["step"] == "report" and done[-1]["status"] else None)


def main():
    args = parse_flags(sys.argv[1:])
    os.makedirs(args.out, exist_ok=True)
    path, earlier = os.path.join(args.out, manifest.FILE), args.earlier
    if not args.report_only:  # nothing of an earlier attempt stands for this one; the costs measured are a cache
        for stale in (path, os.path.join(args.out, "report", "report.pdf")):
            if os.path.exists(stale):
                os.remove(stale)
        for name in os.listdir(args.results_dir) if os.path.isdir(args.results_dir) else []:
            stale = os.path.join(args.results_dir, name)
            if name != costs.COSTS:
                shutil.rmtree(stale) if os.path.isdir(stale) else os.remove(stale)
    verify_path = os.path.join(args.results_dir, results.VERIFY)
    done = []
    for what, argv in commands(args):
        if what == "report":
            write_template(args)
        done.append(run(what, argv))
        if stopped(done[-1], verify_path):
            break
    student_path = os.path.join(args.out, "student.md")
    made = {key: earlier.get(key) for key in MADE} if args.report_only else {
        "made": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "settings": args.settings, "submitted_by": manifest.submitter(args.student),
        **manifest.code(models.path_of(args.settings["model"]), args.out),
        "results": manifest.files_under(args.out, "results"), "hosts": manifest.hosts(args.results_dir)}
    failed_step = failed(args, done, verify_path)
    record = {
        **made,
        "report": manifest.files_under(args.out, "report"),
        "commands": earlier.get("commands", []) + done,
        "student": {"file": "student.md", "sha256": manifest.digest(student_path)},
        "complete": failed_step is None,
        **({"failed": failed_step} if failed_step else {}),
    }
    results.write_json(path, record)
    if failed_step:
        print(f"submission: FAILED: {failed_step} did not run to its end; {path} records it: make submission"
              f"{'-report' if failed_step == 'report' else ''} again", file=sys.stderr)
        return 1
    missing = [item for item in rubric.check(args.results_dir, open(student_path).read()) if not item.met]
    passed = os.path.exists(verify_path) and results.read_json(verify_path, "verify")["passed"]
    print(f"submission: {args.out}/ written: commit it (git add {args.out}). "
          + ("verify FAILED: explain each difference under its heading in student.md, then make submission-report. "
             if not passed else "")
          + (f"Still missing: {'; '.join(item.name for item in missing)}" if missing
             else "Every item the assignment asks for is there."))
    return 0 if passed else 1


if __name__ == "__main__":
    harness.main(main)
