"""make grade SUBMISSION=path: a TA reproduces a submission on their own machine (docs/submission.md).

    python -m assignment.grade --submission=submission            (make grade SUBMISSION=submission)
    python -m assignment.grade --submission=submission --bench    (make grade SUBMISSION=submission BENCH=1)

Checks the manifest against this tree (the commit, every file that differed from it, the model file's digest, the
student's section the PDF was made from), reruns verify with the submission's settings (with --bench, a short
bench too), compares the rerun with the submission and prints the rubric item by item. Exit 0 when everything
reproduces, 1 naming what does not, 2 when the submission cannot be read."""
import math
import os
import shutil
import subprocess
import sys

import harness
from harness import REPO, flags, results
from harness.results import ResultsError
from assignment import manifest, rubric, submit

# Another machine moves each architecture's throughput relative to the others' (cores, memory, network); beyond
# this factor the ranking the student explains is not the one the TA sees.
BAND = 1.5
GRADE_BENCH_STEPS, GRADE_WARMUP_STEPS = 40, 10  # a short bench: the ranking, not the figures


def parse_flags(argv=None):
    parser = flags.FlagSet("python -m assignment.grade", __doc__)
    flags.DEFINE_string("submission", "submission", "the submission's directory (make submission's)",
                        flag_values=parser)
    flags.DEFINE_boolean("bench", False, "also a short bench, each architecture's throughput relative to the "
                         f"others' compared within a factor {BAND}", flag_values=parser)
    flags.DEFINE_string("out", "grade", "where the rerun's results and checkpoints go", flag_values=parser)
    args = flags.parse(parser, argv)
    manifest.head()  # the tree the submission is checked against
    path = os.path.join(args.submission, manifest.FILE)
    if not os.path.exists(path):
        raise harness.UsageError(f"--submission: no {path} (make submission writes it)")
    try:
        args.manifest = results.read_json(path)
        args.settings = args.manifest["settings"]
        args.results_dir = os.path.join(args.submission, "results",
                                        os.path.splitext(os.path.basename(args.settings["model"]))[0])
        args.verify = results.read_json(os.path.join(args.results_dir, results.VERIFY), "verify")
    except (ResultsError, KeyError, TypeError) as error:
        raise harness.UsageError(f"--submission: {path} or its results cannot be read: {error}")
    if args.bench and args.settings["hosts"]:
        raise harness.UsageError(f"--bench: the submission's bench ran on its hosts "
                                 f"({', '.join(args.settings['hosts'])}): grade without BENCH=1")
    if args.bench and args.settings["net"] != "loopback" and os.geteuid() != 0:  # not comparable on loopback
        raise harness.UsageError(f"--bench: the submission's bench emulated links of {args.settings['net']}, which "
                                 f"needs root here: grade without BENCH=1, or as root")
    return args


def code_problems(args):
    """What in this tree differs from the code the submission was made from, a line each."""
    record = args.manifest
    commit = record["commit"]
    if subprocess.run(["git", "-C", REPO, "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True).returncode:
        return [f"commit {commit[:12]}, which the submission was made from, is not in this repository"]
    found = []
    model_file = record["model"]["file"]
    model_path = os.path.join(REPO, model_file)
    if manifest.digest(model_path) != record["model"]["sha256"]:
        found.append(f"model file {model_file}: not the one the submission was made from (its SHA-256 differs)")
    now = manifest.changed_files(commit, manifest.in_repository(args.submission))
    then = record["changed"]
    differing = [path for path in sorted(set(now) | set(then)) if path != model_file
                 and now.get(path, "as committed") != then.get(path, "as committed")]
    if differing:
        head = manifest.head()
        found.append(f"{len(differing)} file(s) differ from the code the submission was made from (commit "
                     f"{commit[:12]}{' with changes' if then else ''}; this tree: {head[:12]}): "
                     f"{', '.join(differing[:5])}{' ...' if len(differing) > 5 else ''}")
    student_path = os.path.join(args.submission, record["student"]["file"])
    if manifest.digest(student_path) != record["student"]["sha256"]:
        found.append(f"{student_path}: edited after its report was made: make submission-report")
    if not record.get("complete"):
        found.append(f"the submission's own run failed ({record.get('failed', 'a step')}): its results are partial")
    return found


def rerun(args, what, argv):
    print(f"grade: {what}: {' '.join(argv)}", flush=True)
    return subprocess.run(argv, env={**os.environ, "PYTHONPATH": REPO}).returncode


def verify_problems(args):
    """Rerun verify with the submission's settings here; each verdict that does not reproduce, a line each."""
    results_dir = os.path.join(args.out, "results")
    argv = submit.verify_command({**args.settings, "hosts": []}, results_dir, os.path.join(args.out, "checkpoints"))
    if rerun(args, "verify", argv) not in (0, 1):  # here, not on the student's hosts
        return ["verify could not run here (above, why)"]
    path = os.path.join(results_dir, results.VERIFY)
    if not os.path.exists(path):
        return ["verify's rerun wrote no verdict (above, why)"]
    again = {(p["a"], p["b"]): p["verdict"] for p in results.read_json(path, "verify")["pairs"]}
    submitted = {(p["a"], p["b"]): p["verdict"] for p in args.verify["pairs"]}
    found = [f"verify: {a} vs {b}: the submission says {verdict!r}, the rerun {again.get((a, b), 'nothing')!r}"
             for (a, b), verdict in submitted.items() if again.get((a, b)) != verdict]
    print(f"grade: verify: {len(submitted) - len(found)} of {len(submitted)} verdicts reproduce", flush=True)
    return found


def relative_throughputs(records, workers):
    """{architecture: its median throughput over the geometric mean of tf's, horovod's and parallax's}."""
    medians = {r["runner"]: r["throughput"]["median"] for r in records
               if r["runner"] in rubric.ARCHITECTURES and r["workers"] == workers and "skipped" not in r}
    if len(medians) < len(rubric.ARCHITECTURES):
        return None
    mean = math.exp(sum(math.log(m) for m in medians.values()) / len(medians))
    return {runner: median / mean for runner, median in medians.items()}


def bench_records(results_dir):
    path = os.path.join(results_dir, results.BENCH)
    return [record for _, record in results.read_lines(path, "bench")] if os.path.exists(path) else []


def compare_throughputs(submitted, again, workers):
    """(a line per architecture, problems): each one's share of the three's throughput in the submission's bench
    records and in the rerun's, a problem where it moved by more than BAND."""
    before, after = relative_throughputs(submitted, workers), relative_throughputs(again, workers)
    if before is None or after is None:
        return [], [f"{'the submission' if before is None else 'the rerun'}'s bench has no throughput of each of "
                    f"{', '.join(rubric.ARCHITECTURES)} at W = {workers}"]
    lines = [f"{runner}: {share:.2f} of the three's mean in the submission, {after[runner]:.2f} here"
             for runner, share in before.items()]
    return lines, [f"bench: {runner}'s throughput relative to the others' moved by more than {BAND}x ({share:.2f} "
                   f"submitted, {after[runner]:.2f} here)" for runner, share in before.items()
                   if not 1 / BAND <= after[runner] / share <= BAND]


def bench_problems(args):
    """A short bench here of tf, horovod and parallax, compared with the submission's (compare_throughputs)."""
    s, results_dir = args.settings, os.path.join(args.out, "results")
    if relative_throughputs(bench_records(args.results_dir), s["workers"]) is None:
        return compare_throughputs(bench_records(args.results_dir), [], s["workers"])[1]
    argv = submit.bench_command(s, results_dir, os.path.join(args.out, "checkpoints", "bench"), GRADE_BENCH_STEPS,
                                GRADE_WARMUP_STEPS, rubric.ARCHITECTURES)
    if rerun(args, "bench", argv):
        return ["the bench could not run here (above, why)"]
    lines, found = compare_throughputs(bench_records(args.results_dir), bench_records(results_dir), s["workers"])
    for line in lines:
        print(f"grade: bench: {line}", flush=True)
    return found


def main():
    args = parse_flags(sys.argv[1:])
    for made in ("results", "checkpoints"):  # an earlier grade's rerun must not stand for this one
        shutil.rmtree(os.path.join(args.out, made), ignore_errors=True)
    record = args.manifest
    print(f"grade: {args.submission}: {args.settings['model']} ({args.settings['config']}), W = "
          f"{args.settings['workers']}, made {record['made']} at commit {record['commit'][:12]}"
          f"{' with uncommitted changes' if record['dirty'] else ''}", flush=True)
    found = code_problems(args)
    if found:  # a rerun of other code says nothing about the submission
        print("grade: code: DIFFERS from the submission's; nothing rerun", flush=True)
    else:
        print("grade: code: as the submission was made", flush=True)
        found += verify_problems(args)
        if args.bench:
            found += bench_problems(args)
    student_path = os.path.join(args.submission, record["student"]["file"])
    text = open(student_path).read() if os.path.exists(student_path) else None
    print("grade: the assignment's items, from the submission's results and student.md:")
    for item in rubric.check(args.results_dir, text):
        print(f"  {'yes' if item.met else 'MISSING':8s} {item.name}: {item.found}")
    print("grade: the hosts it was made on: " + "; ".join(
        f"{h['host']} ({h['environment'].get('cpu_model')}, {h['environment'].get('cpu_cores')} cores, "
        f"{len(h['environment'].get('gpus') or [])} GPUs, {len(h['runs'])} runs)" for h in record["hosts"]))
    if found:
        for line in found:
            print(f"grade: NOT REPRODUCED: {line}", file=sys.stderr)
        return 1
    print("grade: REPRODUCED: the code is the submission's and every verdict comes out the same here")
    return 0


if __name__ == "__main__":
    harness.main(main)
