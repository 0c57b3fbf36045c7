"""make grade SUBMISSION=...: a TA grades a submission with this checkout's code, the course's (docs/submission.md).

    python -m assignment.grade --submission=<the student's repository, a git URL, an archive or a folder>
    python -m assignment.grade --submission=submission      (the student's own clone: a self-check with its code)
    python -m assignment.grade ... --bench                  (make grade BENCH=1: a short bench too)

From the student it takes the model file, student.md and submission/; every other file of theirs is compared with
this checkout's commit, and one that differs fails the grade unless --allow names it. The submission is checked
against itself (assignment/checks.py), verify is rerun here with this checkout's code and every pair compared,
and the rubric printed item by item. Exit 0 when everything reproduces, 1 naming what does not, 2 when the
submission cannot be graded."""
import dataclasses
import fcntl
import fnmatch
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys

import harness
from harness import REPO, flags, results
from harness.results import ResultsError
from assignment import checks, manifest, points, received, rubric, submit
from launcher import sandbox

# Another machine moves each architecture's throughput relative to the others' (cores, memory, network); beyond
# this factor the ranking the student explains is not the one the TA sees.
BAND = 1.5
GRADE_BENCH_STEPS, GRADE_WARMUP_STEPS = 40, 10  # a short bench: the ranking, not the figures
# The reference's loss at its first LOSS_STEPS steps must be the rerun's within LOSS_RTOL: another CPU's rounding
# (or another thread count's) stays below it there, then grows step by step as training amplifies it
# (docs/measurements.md, "The loss tie"); another seed, config or model is far outside it from step 0.
LOSS_STEPS, LOSS_RTOL = 10, 1e-5


def parse_flags(argv=None):
    parser = flags.FlagSet("python -m assignment.grade", __doc__)
    flags.DEFINE_string("submission", "submission", "the student's repository (a path or a git URL), an archive "
                        "of it, a folder holding it, or a submission directory", flag_values=parser)
    flags.DEFINE_boolean("bench", False, "also a short bench, each architecture's throughput relative to the "
                         f"others' compared within a factor {BAND}", flag_values=parser)
    flags.DEFINE_list("allow", [], "toolkit files (glob patterns) the student may have changed", flag_values=parser)
    flags.DEFINE_string("out", "grade", "where the submission received and the rerun go", flag_values=parser)
    flags.DEFINE_boolean("trust", False, "run the student's code without a sandbox, with your rights (where none "
                         "can start: make grade TRUST=1)", flag_values=parser)
    flags.DEFINE_string("points", points.DEFAULT, "the rubric's points: each section's items and their points "
                        "(make grade POINTS=)", flag_values=parser)
    flags.DEFINE_string("reruns", None, "where verify's reruns go, shared by the grades of a class (default: "
                        "<out>/rerun, emptied first)", flag_values=parser)
    args = flags.parse(parser, argv)
    args.points = points.read(args.points, rubric.names())
    manifest.head()  # the toolkit the submission is graded with
    if not args.trust:
        sandbox.check()
    return args


def read_manifest(got):
    """The manifest of a received submission; a UsageError when it cannot be read."""
    path = os.path.join(got.submission, manifest.FILE)
    try:
        record = results.read_json(path)
        for key in ("made", "commit", "dirty", "hosts"):
            record[key]
        record["settings"]["model"], record["model"]["sha256"], record["student"]["file"]
    except (ResultsError, KeyError, TypeError) as error:
        raise harness.UsageError(f"SUBMISSION={got.source}: {path} cannot be read: {error}")
    return record


def in_tree(got, path):
    """A path the student's settings name (relative to their repository's top) as it is in the received tree."""
    return path if os.path.isabs(path) else os.path.join(got.tree, path)


def code_problems(got, record, allow):
    """What in the code differs: for the TA, the student's files against this checkout's and every release of
    the course's (an allowed one, one of an earlier release, one that cannot change results: listed, not counted);
    for the self-check, this tree against the commit the manifest records. The model file against its digest
    either way."""
    model_file, found = record["model"]["file"], []
    if manifest.digest(in_tree(got, model_file)) != record["model"]["sha256"]:
        found.append(f"model file {model_file}: not the one the submission was made from (its SHA-256 differs)")
    if got.own:
        commit = record["commit"]
        if subprocess.run(["git", "-C", REPO, "cat-file", "-e", f"{commit}^{{commit}}"],
                          capture_output=True).returncode:
            return found + [f"commit {commit[:12]}, which the submission was made from, is not in this repository"]
        now = manifest.changed_files(commit, manifest.in_repository(got.submission))
        then = record["changed"]
        differing = [path for path in sorted(set(now) | set(then)) if path != model_file and received.counted(path)
                     and now.get(path, "as committed") != then.get(path, "as committed")]
        return found + ([f"{len(differing)} file(s) differ from the code the submission was made from (commit "
                         f"{commit[:12]}; this tree: {manifest.head()[:12]}): {', '.join(differing[:5])}"
                         f"{' ...' if len(differing) > 5 else ''}"] if differing else [])
    found_in = received.differences(got.tree, [os.path.relpath(got.submission, got.tree), model_file])
    allowed = [path for path in found_in.changed if any(fnmatch.fnmatch(path, pattern) for pattern in allow)]
    head = manifest.head()[:12]
    for path in allowed:
        print(f"grade: toolkit: {path} differs from this checkout's ({head}), allowed", flush=True)
    for date in sorted(set(found_in.released.values())):
        paths = [path for path, made in found_in.released.items() if made == date]
        print(f"grade: toolkit: {len(paths)} file(s) from the course's release of {date}, not this checkout's "
              f"({head}): {shown(paths)}", flush=True)
    if found_in.uncounted:
        print(f"grade: toolkit: {len(found_in.uncounted)} file(s) edited that cannot change results: "
              f"{shown(found_in.uncounted)}", flush=True)
    if found_in.missing or found_in.added:
        print(f"grade: toolkit: the student's tree lacks {len(found_in.missing)} of this checkout's files and adds "
              f"{len(found_in.added)} ({shown(found_in.added)}): neither is used", flush=True)
    return found + [f"toolkit file {path} differs from this checkout's ({head}) and from every release of the "
                    f"course's" for path in found_in.changed if path not in allowed]


def shown(paths, most=5):
    """The first few of `paths`, and an ellipsis when there are more."""
    return ", ".join(paths[:most]) + (" ..." if len(paths) > most else "")


def data_path(got, settings):
    """The data the submission trained on, here: the student's tree's, else this checkout's (make data)."""
    data = settings["data"]
    if data == "synthetic":
        return data
    for candidate in (in_tree(got, data), os.path.join(REPO, data)):
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    raise harness.UsageError(f"the submission trained on {data}, which neither it nor this checkout holds: make "
                             f"data first (the Penn Treebank into data/ptb), or put it at {os.path.join(REPO, data)}")


def rerun_settings(got, record):
    """The submission's settings as this checkout reruns them: its model file and data found here, no hosts."""
    s = record["settings"]
    model = in_tree(got, s["model"]) if s["model"].endswith(".py") else s["model"]
    return {**s, "model": model, "data": data_path(got, s), "hosts": []}


def rerun(what, argv, box=None):
    """Run `argv` (in sandbox `box` when given) and return its exit status."""
    print(f"grade: {what}: {' '.join(argv)}", flush=True)
    if box:
        status = box.run(argv).returncode
        if status == sandbox.TIMED_OUT:
            print(f"grade: {what}: stopped at the sandbox's time limit ({box.seconds} s)", flush=True)
        return status
    return subprocess.run(argv, env={**os.environ, "PYTHONPATH": REPO}).returncode


def verify_problems(settings, model_sha256, submitted, submitted_dir, reruns, tree, trust=False):
    """verify rerun here (once for every submission of the same model and settings, under `reruns`), every process
    that runs the student's code in a sandbox unless `trust`, the student's `tree` readable: a line for the
    reference's losses unless they are the submission's (loss_problems), and for each pair either side has whose
    verdict the other does not share."""
    same = {**settings, "model": model_sha256}  # one file, wherever each student's tree holds it
    key = hashlib.sha256(json.dumps(same, sort_keys=True).encode()).hexdigest()[:16]
    results_dir = os.path.join(reruns, key, "results")
    path = os.path.join(results_dir, results.VERIFY)
    os.makedirs(reruns, exist_ok=True)
    with open(os.path.join(reruns, f"{key}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a class graded in parallel: one grade reruns, the others wait and read it
        if not os.path.exists(path):
            argv = submit.verify_command(settings, results_dir, os.path.join(reruns, key, "checkpoints"))
            argv += [] if trust else ["--sandbox", f"--sandbox_readable={os.path.abspath(tree)}"]
            if rerun("verify", argv) not in (0, 1) or not os.path.exists(path):
                return ["verify could not run here (above, why)"]
        else:
            print(f"grade: verify: the rerun of these settings and model, {results_dir}", flush=True)
    again = {(p["a"], p["b"]): p["verdict"] for p in results.read_json(path, "verify")["pairs"]}
    given = {(p["a"], p["b"]): p["verdict"] for p in submitted["pairs"]}
    differing = [f"verify: {a} vs {b}: the submission says {given.get((a, b), 'nothing')!r}, the rerun "
                 f"{again.get((a, b), 'nothing')!r}" for a, b in sorted(set(again) | set(given))
                 if given.get((a, b)) != again.get((a, b))]
    print(f"grade: verify: {len(again) - len(differing)} of {len(again)} pairs of the rerun as the submission has "
          f"them", flush=True)
    return loss_problems(submitted_dir, results_dir) + differing


def logged_losses(results_dir):
    """{step: loss} of the steps verify's reference run logged in `results_dir` ({} when it logged none)."""
    path = results.steps_path(results_dir, "verify-reference")
    if not os.path.exists(path):
        return {}
    return {r["step"]: r["loss"] for _, r in results.read_lines(path, "step") if "loss" in r}


def loss_problems(submitted_dir, rerun_dir):
    """The rerun's reference against the submission's, step by step: each loss the submission logged in its first
    LOSS_STEPS steps must be the rerun's within LOSS_RTOL, which ties its results to the model and settings it
    names; a line when not."""
    given, again = logged_losses(submitted_dir), logged_losses(rerun_dir)
    judged = {step: loss for step, loss in given.items() if step < LOSS_STEPS}
    if not judged:
        return [f"verify: the submission's reference run logged no loss in its first {LOSS_STEPS} steps"]
    far = [step for step, loss in sorted(judged.items())
           if step not in again or not abs(loss - again[step]) <= LOSS_RTOL * abs(again[step])]
    if far:
        step = far[0]
        return [f"verify: the reference's loss is not the rerun's (within {LOSS_RTOL:g}) at {len(far)} of its first "
                f"{len(judged)} steps; step {step}: {given[step]!r} submitted, {again.get(step, 'not logged')!r} here"]
    print(f"grade: verify: the reference's loss at its first {len(judged)} steps as the submission's (within "
          f"{LOSS_RTOL:g})", flush=True)
    return []


def relative_throughputs(records, workers):
    """{architecture: its median throughput over the geometric mean of tf's, horovod's and parallax's}."""
    medians = {r["runner"]: r["throughput"]["median"] for r in records
               if r["runner"] in rubric.ARCHITECTURES and r["workers"] == workers and "skipped" not in r}
    if len(medians) < len(rubric.ARCHITECTURES):
        return None
    mean = math.exp(sum(math.log(m) for m in medians.values()) / len(medians))
    return {runner: median / mean for runner, median in medians.items()}


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


def bench_problems(settings, submitted_dir, out, tree, trust=False):
    """A short bench here of tf, horovod and parallax (in a sandbox unless `trust`), compared with the
    submission's (compare_throughputs)."""
    submitted = rubric.bench_records(submitted_dir)
    if relative_throughputs(submitted, settings["workers"]) is None:
        return compare_throughputs(submitted, [], settings["workers"])[1]
    bench = os.path.abspath(os.path.join(out, "bench"))
    results_dir = os.path.join(bench, "results")
    argv = submit.bench_command(settings, results_dir, os.path.join(bench, "checkpoints"), GRADE_BENCH_STEPS,
                                GRADE_WARMUP_STEPS, rubric.ARCHITECTURES)
    box = None if trust else sandbox.Sandbox([REPO, os.path.abspath(tree)], [bench], setenv={"PYTHONPATH": REPO})
    if rerun("bench", argv, box):
        return ["the bench could not run here (above, why)"]
    lines, found = compare_throughputs(submitted, rubric.bench_records(results_dir), settings["workers"])
    for line in lines:
        print(f"grade: bench: {line}", flush=True)
    return found


def student_of(got, record):
    """Who handed it in: the name make submission was given, else the author of the commit that holds the
    submission, else git's user where it was made; both named when who made it is not who committed it."""
    said = record.get("submitted_by") or {}
    author = subprocess.run(["git", "-C", got.tree, "log", "-1", "--format=%an <%ae>", "--",
                             os.path.relpath(got.submission, got.tree)], capture_output=True, text=True).stdout.strip()
    name = said.get("student") or author or said.get("git_user") or "unknown"
    made_by = said.get("git_user")
    return f"{name} (made by {made_by}, committed by {author})" if author and made_by and author != made_by else name


def not_rebenched(settings, trust):
    """Why the submission's bench cannot be rerun here, or None: its machines are not this one's kind, or its
    emulated links need root and no sandbox (namespaces made by the bench itself)."""
    if settings["hosts"]:
        return f"its bench ran on the student's hosts ({', '.join(settings['hosts'])})"
    if settings["net"] != "loopback" and not (trust and os.geteuid() == 0):
        return (f"its bench ran on emulated links of {settings['net']}, which need root and no sandbox (as root, "
                f"TRUST=1 reruns it)")
    return None


def grade(source, out, allow=(), bench=False, reruns=None, trust=False, table=None):
    """Grade one submission; return what the gradebook records of it (findings: [(what, line)]; its points by
    `table`, points.read's, default the course's); every run of the student's code in a sandbox unless `trust`."""
    got = received.receive(source, os.path.join(out, "received"))
    record = read_manifest(got)
    s = record["settings"]
    results_dir = os.path.join(got.submission, "results", os.path.splitext(os.path.basename(s["model"]))[0])
    student = student_of(got, record)
    student_path = os.path.join(got.submission, record["student"]["file"])
    print(f"grade: {source}: {s['model']} ({s['config']}), W = {s['workers']}, by {student}, made {record['made']} "
          f"at commit {record['commit'][:12]}{' with changes' if record['dirty'] else ''}", flush=True)
    unbenched = not_rebenched(s, trust) if bench else None
    if unbenched:
        print(f"grade: bench: not rerun: {unbenched}", flush=True)
    code = code_problems(got, record, allow)
    for line in code or ["the model file as made, " + ("this tree the submission's" if got.own else
                                                       "the toolkit this checkout's")]:
        print(f"grade: code: {line}", flush=True)
    found = [("code", line) for line in code] + own_findings(got, record, results_dir)
    try:
        submitted = results.read_json(os.path.join(results_dir, results.VERIFY), "verify")
        benched = [r for r in rubric.bench_records(results_dir) if "skipped" not in r]
        medians = sorted(r["throughput"]["median"] for r in benched)
        throughput = {r["runner"]: r["throughput"]["median"] for r in benched
                      if r["runner"] in rubric.ARCHITECTURES and r["workers"] == s["workers"]}
        items = rubric.check(results_dir, open(student_path).read() if os.path.exists(student_path) else None)
    except (ResultsError, KeyError, TypeError):  # checks.submission named it
        submitted, medians, throughput, items = None, [], {}, []
    if code and got.own:  # a rerun of other code says nothing about the submission
        print("grade: code: this tree is not the code the submission was made from; nothing rerun", flush=True)
    elif any(line.startswith("model file") for line in code):
        print("grade: model: not the file the submission was made from; nothing rerun", flush=True)
    elif not record.get("complete") or submitted is None:
        print("grade: its results are partial or unreadable; nothing rerun", flush=True)
    else:
        settings = rerun_settings(got, record)
        found += [("rerun", line) for line in verify_problems(settings, record["model"]["sha256"], submitted,
                                                            results_dir, reruns or os.path.join(out, "rerun"),
                                                            got.tree, trust)]
        if bench and not unbenched:
            found += [("rerun", line) for line in bench_problems(settings, results_dir, out, got.tree, trust)]
    scored = points.score(table or points.read(points.DEFAULT, rubric.names()),
                          {item.name: item.met for item in items}, bool(items) and not found)
    return {"submission": source, "student": student, "model": s["model"], "config": s["config"],
            "points": [dataclasses.asdict(item) for item in scored], "points_line": points.line(scored),
            "workers": s["workers"], "throughput": throughput,
            "model_sha256": record["model"]["sha256"],
            "model_in_toolkit": record["model"]["file"] in received.toolkit(),
            "verdict": "NOT REPRODUCED" if found else "REPRODUCED", "findings": found,
            "rubric": [{"item": item.name, "met": item.met, "found": item.found} for item in items],
            "results": manifest.files_under(got.submission, "results"), "medians": medians, "hosts": record["hosts"],
            "sandbox": not trust, **({"not_rebenched": unbenched} if unbenched else {})}


def own_findings(got, record, results_dir):
    """The submission against itself and its manifest, each finding printed: [(what, line)]."""
    found = [("results", line) for line in checks.submission(got.submission, record, results_dir)]
    if manifest.digest(os.path.join(got.submission, record["student"]["file"])) != record["student"]["sha256"]:
        found.append(("student.md", "edited after its report was made: make submission-report, and commit it"))
    if not record.get("complete"):
        found.append(("incomplete", f"the submission's own {record.get('failed', 'run')} failed: its results are "
                                    f"partial; make submission again"))
    for what, line in found:
        print(f"grade: {what}: {line}", flush=True)
    kinds = {what for what, _ in found}
    print("grade: " + "; ".join(ok for what, ok in (
        ("results", f"results: {len(record.get('results') or {}) + len(record.get('report') or {})} files as "
                    "made, the settings, pairs and throughputs agreeing"),
        ("student.md", "student.md: as typeset"), ("incomplete", "complete")) if what not in kinds), flush=True)
    return found


def main():
    args = parse_flags(sys.argv[1:])
    if not args.reruns:
        shutil.rmtree(os.path.join(args.out, "rerun"), ignore_errors=True)  # an earlier grade's must not stand
    graded = grade(args.submission, args.out, args.allow, args.bench, args.reruns, args.trust, args.points)
    print("grade: the assignment's items, from the submission's results and student.md (points earned of the item's; "
          "TA: for you to decide):")
    earned = {item["item"]: item for item in graded["points"]}
    for item in graded["rubric"] + [{"item": points.REPRODUCED, "met": not graded["findings"],
                                     "found": "the rerun agrees" if not graded["findings"] else "below, what not"}]:
        scored = earned.get(item["item"])
        credit = "" if not scored else f"{scored['points']:g} TA" if scored["earned"] is None else \
            f"{scored['earned']:g}/{scored['points']:g}"
        print(f"  {'yes' if item['met'] else 'MISSING':8s} {credit:9s} {item['item']}: {item['found']}")
    print(f"grade: points: {graded['points_line']}")
    print("grade: the hosts it was made on: " + "; ".join(
        f"{h['host']} ({h['environment'].get('cpu_model')}, {h['environment'].get('cpu_cores')} cores, "
        f"{len(h['environment'].get('gpus') or [])} GPUs, {len(h['runs'])} runs)" for h in graded["hosts"]))
    results.write_json(os.path.join(args.out, "grade.json"), graded)
    if graded["findings"]:
        for what, line in graded["findings"]:
            print(f"grade: NOT REPRODUCED: {what}: {line}", file=sys.stderr)
        return 1
    print("grade: REPRODUCED: the code is as it should be, the submission agrees with itself and every verdict "
          "comes out the same here")
    return 0


if __name__ == "__main__":
    harness.main(main)
