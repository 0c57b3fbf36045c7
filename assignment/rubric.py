"""What the assignment (../shared/seeds/004: "Distributed DL training on Parallax") asks of a submission, checked
item by item from one model's results and the student's own section: the PDF's first page lists what is missing,
make grade prints every item with what it found."""
import dataclasses
import os

from harness import results
from assignment import student

ARCHITECTURES = ("tf", "horovod", "parallax")
LEAST_WORKERS = 2        # "Use at least two workers when running your scripts"
LEAST_WARMUP = 50        # "the first 50~100 iterations ... can be unstable, so just discard them"


@dataclasses.dataclass
class Item:
    name: str    # what the assignment asks, in a few words
    met: bool
    found: str   # what was found, in a line


def read(results_dir):
    """(verify.json or None, the bench's records, {run: its hosts record}) of one model's results."""
    verify_path = os.path.join(results_dir, results.VERIFY)
    verify = results.read_json(verify_path, "verify") if os.path.exists(verify_path) else None
    bench = bench_records(results_dir)
    hosts = {}
    for run in (verify or {}).get("runs", []):
        path = results.hosts_path(results_dir, f"verify-{run['name']}")
        if os.path.exists(path):
            hosts[run["name"]] = results.read_json(path, "hosts")
    return verify, bench, hosts


def bench_records(results_dir):
    """The bench's records of one model's results ([] when it did not run)."""
    path = os.path.join(results_dir, results.BENCH)
    return [record for _, record in results.read_lines(path, "bench")] if os.path.exists(path) else []


def differing(verify):
    """verify's pairs of the reference with a run it did not find identical: each needs the student's why."""
    return [p for p in (verify or {}).get("pairs", []) if p["a"] == "reference" and p["verdict"] != "identical"]


def names():
    """The rubric's items by name, in order."""
    return [item.name for item in check(os.devnull, None)]


def check(results_dir, student_text):
    """Every item of the rubric for the results in `results_dir` and the student's file's text (None: no file)."""
    verify, bench, hosts = read(results_dir)
    said = student.sections(student_text or "")
    runs = [run["name"] for run in (verify or {}).get("runs", [])]
    measured = [r for r in bench if "skipped" not in r and r["workers"] >= LEAST_WORKERS]
    benched = sorted({r["architecture"] for r in measured if r.get("architecture") in ARCHITECTURES})
    warmups = sorted({r.get("warmup_steps", -1) for r in measured})  # -1: a record from before they were recorded
    unexplained = [student.difference_heading(p) for p in differing(verify)
                   if not student.answered(said.get(student.difference_heading(p)))]
    distributed = [name for name in runs if name != "reference"]
    unrecorded = [name for name in distributed if name not in hosts]
    workers = verify["config"]["workers"] if verify else 0

    def answered(heading, what):
        return Item(what, student.answered(said.get(heading)),
                    f"section \"{heading}\" {'answered' if student.answered(said.get(heading)) else 'empty'}"
                    if student_text is not None else "no student.md")
    return [
        answered(student.MODEL, "a published model, its paper cited"),
        answered(student.CODE, "where its code came from"),
        Item(f"at least {LEAST_WORKERS} workers", workers >= LEAST_WORKERS,
             f"verify ran {workers} workers" if verify else "no verify.json: make verify"),
        Item("all three architectures run", set(ARCHITECTURES) <= set(runs),
             f"verify ran {', '.join(runs)}" if verify else "no verify.json"),
        Item("correctness checked", bool(verify and verify["passed"]),
             ("verify PASSED" if verify["passed"] else "verify FAILED") if verify else "no verify.json"),
        answered(student.CORRECTNESS, "why the synchronous runs match the reference"),
        Item("every difference explained", bool(verify) and not unexplained,
             f"no explanation of {', '.join(unexplained)}" if unexplained else
             f"{len(differing(verify))} difference(s), each explained" if verify else "no verify.json"),
        Item("throughput of all three compared", set(ARCHITECTURES) <= set(benched),
             f"the bench measured {', '.join(benched) or 'none'} at W >= {LEAST_WORKERS}"),
        Item(f"at least {LEAST_WARMUP} warm-up steps left out", bool(warmups) and warmups[0] >= LEAST_WARMUP,
             f"the bench left out {', '.join(str(w) if w >= 0 else 'unrecorded' for w in warmups)} steps"
             if warmups else "no bench measured"),
        answered(student.THROUGHPUT, "the throughput's ranking explained"),
        Item("environment recorded", bool(verify) and not unrecorded,
             f"no host record of {', '.join(unrecorded)}" if unrecorded else
             f"every host of the {len(distributed)} distributed runs recorded" if verify else "no verify.json"),
        answered(student.ENVIRONMENT, "the environment stated"),
    ]
