"""make grade-all SUBMISSIONS=dir/: a class graded at once with this checkout's code (docs/submission.md).

    python -m assignment.gradebook --submissions=dir/ [--bench] [--allow=...]

Grades every entry of the folder (a student's repository, folder or archive each) as make grade does, verify
rerun once for submissions of the same model and settings, then writes <out>/gradebook.csv (a row each: student,
model, verdict, each rubric item, what did not reproduce, copies) and <out>/gradebook.md, the one page a grader
reads. Submissions are flagged as copies when they share their own model file's digest, a result file's digest
or a throughput. Exit 0 when every submission reproduces and none is flagged, 1 otherwise, 2 on bad input."""
import csv
import itertools
import os
import shlex
import shutil
import subprocess
import sys

import harness
from harness import REPO, flags, results
from bench import costs
from assignment import grade, manifest, points, rubric
from launcher import sandbox

# The machine's records, the same for every student of one lab machine: its hosts, its costs, and Parallax's
# published configurations priced with them.
MACHINE_RECORDS = (".hosts.json", costs.COSTS, results.PARALLAX)


def parse_flags(argv=None):
    parser = flags.FlagSet("python -m assignment.gradebook", __doc__)
    flags.DEFINE_string("submissions", None, "a folder of submissions: a repository, folder or archive each",
                        flag_values=parser)
    flags.DEFINE_boolean("bench", False, "a short bench of each too (make grade BENCH=1)", flag_values=parser)
    flags.DEFINE_list("allow", [], "toolkit files (glob patterns) students may have changed", flag_values=parser)
    flags.DEFINE_string("out", "grade", "where each grade and the gradebook go", flag_values=parser)
    flags.DEFINE_boolean("trust", False, "run the students' code without a sandbox, with your rights (make grade-all "
                         "TRUST=1)", flag_values=parser)
    flags.DEFINE_string("points", points.DEFAULT, "the rubric's points (make grade-all POINTS=)", flag_values=parser)
    flags.DEFINE_boolean("slurm", False, "grade each submission as a task of one Slurm array job, across the "
                         "cluster's nodes (make grade-all SLURM=1); --out and the submissions on a file system they "
                         "share", flag_values=parser)
    args = flags.parse(parser, argv)
    args.table = points.read(args.points, rubric.names())
    if args.slurm and not shutil.which("sbatch"):
        raise harness.UsageError("--slurm: no sbatch here (Slurm's client): grade where the cluster's jobs are "
                                 "submitted, or without SLURM=1")
    if not args.trust:
        sandbox.check()
    if not args.submissions or not os.path.isdir(args.submissions):
        raise harness.UsageError(f"--submissions={args.submissions or ''}: not a folder of submissions")
    args.entries = sorted(name for name in os.listdir(args.submissions) if not name.startswith("."))
    if not args.entries:
        raise harness.UsageError(f"--submissions={args.submissions}: empty")
    manifest.head()
    return args


def shared(a, b):
    """What two graded submissions have in common that a submission of one's own would not, a phrase each."""
    found = []
    if a["model_sha256"] == b["model_sha256"] and not a["model_in_toolkit"]:
        found.append("model file")
    same = [path for path, digest in a["results"].items() if b["results"].get(path) == digest
            and not path.endswith(MACHINE_RECORDS)]
    if same:
        found.append(f"{len(same)} result file(s)")
    if set(a["medians"]) & set(b["medians"]):
        found.append("throughputs")
    return found


def copies(graded):
    """{name: [a line for each other submission it shares something with]}."""
    found = {name: [] for name in graded}
    for (x, a), (y, b) in itertools.combinations(graded.items(), 2):
        what = shared(a, b)
        if what:
            found[x].append(f"shares {', '.join(what)} with {y}")
            found[y].append(f"shares {', '.join(what)} with {x}")
    return found


def hosts_of(g):
    """The hosts a graded submission was made on, by name."""
    return ", ".join(host["host"] for host in g.get("hosts", []))


def throughputs_of(g):
    """Each architecture's median throughput in the submission's bench at its W, and each over tf's."""
    measured = g.get("throughput") or {}
    return ", ".join(f"{runner} {median:,.0f}" + (f" ({median / measured['tf']:.2f}x tf)"
                                                   if runner != "tf" and measured.get("tf") else "")
                     for runner, median in sorted(measured.items(),
                                                  key=lambda item: rubric.ARCHITECTURES.index(item[0]))) or "-"


def write(out, graded, flagged):
    """gradebook.csv and gradebook.md from each submission's grade (`graded`: {name: grade or its error})."""
    items = next((g["rubric"] for g in graded.values() if "rubric" in g), [])
    names = [item["item"] for item in items]
    with open(os.path.join(out, "gradebook.csv"), "w", newline="") as f:
        table = csv.writer(f)
        table.writerow(["submission", "student", "model", "workers", "hosts", "throughput", "verdict", "points",
                        "for the TA", *names, "not reproduced", "copies"])
        for name, g in graded.items():
            met = {item["item"]: "yes" if item["met"] else "MISSING" for item in g.get("rubric", [])}
            earned, pending, _ = points.totals([points.Scored(**item) for item in g.get("points", [])])
            table.writerow([name, g.get("student", ""), g.get("model", ""), g.get("workers", ""), hosts_of(g),
                            throughputs_of(g), g["verdict"], f"{earned:g}" if "points" in g else "",
                            f"{pending:g}" if "points" in g else "",
                            *[met.get(item, "") for item in names],
                            " | ".join(f"{what}: {line}" for what, line in g.get("findings", [])),
                            " | ".join(flagged[name])])
    lines = ["# Gradebook", "", "| submission | student | model | W | hosts | throughput | verdict | points | rubric | "
             "copies |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, g in graded.items():
        met = sum(item["met"] for item in g.get("rubric", []))
        lines.append(f"| {name} | {g.get('student', '')} | {g.get('model', '')} | {g.get('workers', '')} | "
                     f"{hosts_of(g) or '-'} | {throughputs_of(g)} | {g['verdict']} | {g.get('points_line', '-')} | "
                     f"{met} of {len(g.get('rubric', []))} | {'; '.join(flagged[name]) or '-'} |")
    unbenched = [f"- {name}: {g['not_rebenched']}" for name, g in graded.items() if "not_rebenched" in g]
    lines += ["", "## Benches not rerun", "", *unbenched] if unbenched else []
    lines += ["", "## What did not reproduce", ""]
    for name, g in graded.items():
        lines += [f"- {name}: {what}: {line}" for what, line in g.get("findings", [])[:5]]
        if len(g.get("findings", [])) > 5:
            lines.append(f"- {name}: {len(g['findings']) - 5} more (gradebook.csv)")
    with open(os.path.join(out, "gradebook.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return "\n".join(lines)


def main():
    args = parse_flags(sys.argv[1:])
    reruns = os.path.join(args.out, "reruns")
    shutil.rmtree(reruns, ignore_errors=True)  # an earlier grade-all's must not stand for this one
    graded = graded_on_slurm(args, reruns) if args.slurm else graded_here(args, reruns)
    flagged = copies({name: g for name, g in graded.items() if "results" in g})
    flagged = {name: flagged.get(name, []) for name in graded}
    print(write(args.out, graded, flagged))
    print(f"gradebook: {os.path.join(args.out, 'gradebook.csv')}, {os.path.join(args.out, 'gradebook.md')}")
    return 0 if all(g["verdict"] == "REPRODUCED" for g in graded.values()) and not any(flagged.values()) else 1


def graded_here(args, reruns):
    """{name: its grade}: each entry graded in turn on this machine."""
    graded = {}
    for name in args.entries:
        print(f"gradebook: {name}", flush=True)
        try:
            graded[name] = grade.grade(os.path.join(args.submissions, name), os.path.join(args.out, name),
                                       args.allow, args.bench, reruns, args.trust, args.table)
        except harness.UsageError as error:  # one that cannot be graded is named, the others go on
            print(f"gradebook: {name}: {error}", flush=True)
            graded[name] = {"verdict": "NOT GRADED", "findings": [("submission", str(error))]}
    return graded


def graded_on_slurm(args, reruns):
    """{name: its grade}: each entry graded by python -m assignment.grade as a task of one Slurm array job (one
    node a task), verify's reruns shared; an entry whose task left no grade.json is NOT GRADED, its log's last
    line saying why."""
    logs = os.path.abspath(os.path.join(args.out, "slurm"))
    os.makedirs(logs, exist_ok=True)
    for name in args.entries:  # an earlier grade's must not stand for this one
        shutil.rmtree(os.path.join(args.out, name), ignore_errors=True)
    grade_flags = [f"--reruns={os.path.abspath(reruns)}", f"--points={os.path.abspath(args.points)}",
                   *(["--bench"] if args.bench else []), *(["--trust"] if args.trust else []),
                   *([f"--allow={','.join(args.allow)}"] if args.allow else [])]
    script = os.path.join(logs, "grade.sh")
    grade_command = [sys.executable, "-m", "assignment.grade", *grade_flags]
    lines = ["#!/bin/bash", "# make grade-all SLURM=1: array task i grades entry i (assignment/gradebook.py)",
             f"entries=({' '.join(shlex.quote(name) for name in args.entries)})",
             "entry=${entries[$SLURM_ARRAY_TASK_ID]}",
             'echo "gradebook: $entry, task $SLURM_ARRAY_TASK_ID on $(hostname)"',
             f"exec {' '.join(map(shlex.quote, grade_command))} "
             f"--submission={shlex.quote(os.path.abspath(args.submissions))}/\"$entry\" "
             f"--out={shlex.quote(os.path.abspath(args.out))}/\"$entry\""]
    with open(script, "w") as f:
        f.write("\n".join(lines) + "\n")
    argv = ["sbatch", "--wait", f"--array=0-{len(args.entries) - 1}", "--nodes=1", "--exclusive",
            f"--output={logs}/%a.out", f"--chdir={os.getcwd()}", f"--export=ALL,PYTHONPATH={REPO}", script]
    print(f"gradebook: {len(args.entries)} grades as one array job: {' '.join(argv)}", flush=True)
    subprocess.run(argv)  # its status is its tasks': 1 for any not reproduced; each grade.json says more
    graded = {}
    for index, name in enumerate(args.entries):
        path = os.path.join(args.out, name, "grade.json")
        if os.path.exists(path):
            graded[name] = results.read_json(path)
            continue
        log = os.path.join(logs, f"{index}.out")
        last = ((open(log).read().strip().splitlines() or ["no output"])[-1] if os.path.exists(log) else
                f"no log in {logs}: does every node see this folder (a shared file system)?")
        print(f"gradebook: {name}: not graded: {last}", flush=True)
        graded[name] = {"verdict": "NOT GRADED", "findings": [("submission", last)]}
    return graded


if __name__ == "__main__":
    harness.main(main)
