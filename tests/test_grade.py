"""make grade and make grade-all in the TA's own checkout (assignment/grade.py, gradebook.py): a student's
repository graded with the course's code; a tampered one named file by file, its toolkit and its results; a class
graded at once, copies flagged. The student's side: tests/test_submission.py."""
import csv
import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import REPO, clone, commit, make
from assignment import grade, points, received, rubric
from harness import UsageError

ALWAYS_PASSES = ("    if graded[\"findings\"]:", "    if False:  # always passes")


COURSE_FIX = "harness/__init__.py"  # a file the course changed after the students cloned it


@pytest.fixture(scope="module")
def ta(tmp_path_factory):
    """The TA's checkout: a clone of the course's repository, which moved on by a commit after the students'."""
    checkout = clone(REPO, tmp_path_factory.mktemp("ta") / "checkout", "TA")
    with open(checkout / COURSE_FIX, "a") as f:
        f.write("# The course's fix, after the students cloned it.\n")
    commit(checkout, COURSE_FIX, message="A fix after the students cloned")
    return checkout


def test_the_ta_s_checkout_reproduces_a_student_s_repository(submitted, ta, tmp_path):
    """Ann cloned the course before its last commit, and edited the README (as the assignment asks) in a commit of
    her own: honest work, graded REPRODUCED, the older release and the README listed."""
    ann = clone(submitted[0], tmp_path / "ann", "Ann")
    with open(ann / "README.md", "a") as f:
        f.write("\nHow to run my scripts: make submission MODEL=lstm.\n")
    commit(ann, "README.md", message="How to run my scripts")
    result = make("grade", f"SUBMISSION={ann}", cwd=ta)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "by Ann Lee" in result.stdout
    assert "code: the model file as made, the toolkit this checkout's" in result.stdout
    assert "toolkit: 1 file(s) from the course's release of " in result.stdout and COURSE_FIX in result.stdout
    assert "toolkit: 1 file(s) edited that cannot change results: README.md" in result.stdout
    assert "grade: verify: 7 of 7 pairs of the rerun as the submission has them" in result.stdout
    assert "grade: verify: the reference's loss at its first 8 steps as the submission's (within 1e-05)" \
        in result.stdout
    # tiny: fewer than 50 warm-up steps, tf-async not explained
    assert "grade: points: 6.75 of 10, 1.75 more for the TA to decide" in result.stdout
    assert "  yes      1/1       reproduced: the rerun agrees" in result.stdout
    assert "--results_dir=grade/rerun/" in result.stdout  # this checkout's verify, into the TA's grade/
    assert " --sandbox --sandbox_readable=" in result.stdout  # the student's code only in sandboxes
    assert "grade: REPRODUCED" in result.stdout
    assert "  yes      0.25 TA   a published model, its paper cited: section \"Model and paper\" answered" \
        in result.stdout
    assert "  MISSING  0/0.5     at least 50 warm-up steps left out: the bench left out 2 steps" in result.stdout
    assert "  MISSING  0/1       every difference explained: no explanation of reference vs tf-async" in result.stdout


def tamper(repo):
    """What a student might do to pass: the grader edited to pass always, the pair that differs deleted from
    verify.json, a throughput raised, another PDF, the settings' steps changed, the reference's first loss made up
    with the manifest's digest rewritten to match; all committed."""
    path = repo / "assignment/grade.py"
    path.write_text(path.read_text().replace(*ALWAYS_PASSES))
    results = repo / "submission/results/lstm"
    verify = json.loads((results / "verify.json").read_text())
    verify["pairs"] = [p for p in verify["pairs"] if p["b"] != "tf-async"]
    (results / "verify.json").write_text(json.dumps(verify))
    bench = [json.loads(line) for line in (results / "bench.jsonl").read_text().splitlines()]
    bench[0]["throughput"]["median"] *= 2
    (results / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bench))
    shutil.copy(repo / "submission/results/lstm/bench-costs.json", repo / "submission/report/report.pdf")
    record = json.loads((repo / "submission/manifest.json").read_text())
    reference = results / "verify-reference.jsonl"
    steps = [json.loads(line) for line in reference.read_text().splitlines()]
    steps[0]["loss"] *= 1.001
    reference.write_text("".join(json.dumps(r) + "\n" for r in steps))
    record["results"]["results/lstm/verify-reference.jsonl"] = hashlib.sha256(reference.read_bytes()).hexdigest()
    record["settings"]["verify_steps"] = 6
    (repo / "submission/manifest.json").write_text(json.dumps(record))
    commit(repo, "assignment/grade.py", "submission", message="Passes now")
    return bench[0]["run_name"]


@pytest.fixture(scope="module")
def tampered(submitted, tmp_path_factory):
    repo = clone(submitted[0], tmp_path_factory.mktemp("class") / "dan", "Dan")
    return repo, tamper(repo)


def test_an_allowed_toolkit_file_is_listed_not_counted(tampered, tmp_path):
    """The comparison alone: what ALLOW= lets through, and the archive of a repository graded as the repository."""
    repo, _ = tampered
    found = received.differences(str(repo), ["submission", "models/lstm.py"])
    assert found.changed == ["assignment/grade.py"] and found.released == {}
    assert found.uncounted == found.missing == found.added == []
    archive = tmp_path / "dan.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(repo, "dan", filter=lambda info: None if info.name.startswith(("dan/.git", "dan/.venv")) else info)
    got = received.receive(str(archive), str(tmp_path / "unpacked"))
    assert received.differences(got.tree, ["submission"]).changed == ["assignment/grade.py"]
    assert grade.code_problems(got, json.loads((repo / "submission/manifest.json").read_text()),
                               ["assignment/*.py"]) == []
    if subprocess.run(["git", "-C", REPO, "rev-parse", "-q", "--verify", "HEAD~5"], capture_output=True).returncode:
        pytest.skip("a shallow clone: no older commit to stand for an older release")
    older = git("rev-parse", "HEAD~5")  # a release the student cloned before this checkout's: listed, not counted
    path = next(path for path in git("diff", "--name-only", "--diff-filter=M", older, "HEAD").split()
                if path != "assignment/grade.py")
    (Path(got.tree) / path).write_bytes(subprocess.run(["git", "-C", REPO, "show", f"{older}:{path}"],
                                                       capture_output=True, check=True).stdout)
    found = received.differences(got.tree, ["submission"])
    assert found.changed == ["assignment/grade.py"] and list(found.released) == [path]


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout.strip()


def submission_of(maker, out, seed, measured_costs):
    """One more submission of `maker`'s into `out`: the LSTM's tiny config, reference and horovod, on loopback."""
    (maker / out / "results/lstm").mkdir(parents=True)
    shutil.copy(measured_costs / "bench-costs.json", maker / out / "results/lstm")
    made = make("submission", "CONFIG=tiny", "STEPS=8", "WARMUP=2", f"SEED={seed}", "NET=loopback",
                "ARGS=--runs=horovod --bench_runs=horovod", f"SUBMISSION={out}", cwd=maker)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    return maker / out


def test_a_class_is_graded_at_once_copies_and_tampering_flagged(tampered, ta, tmp_path, measured_costs):
    """Four submissions: ben and cat hand in one submission under two names, dan tampered (each thing he did named
    file by file), eve her own."""
    maker = clone(REPO, tmp_path / "maker")
    made = {"ben": submission_of(maker, "x", 2, measured_costs), "eve": submission_of(maker, "y", 3, measured_costs)}
    made["cat"] = made["ben"]
    folder = tampered[0].parent
    for name, submission in made.items():
        repo = clone(REPO, folder / name, name.title())
        shutil.copytree(submission, repo / "submission")
        commit(repo, "submission")
    result = make("grade-all", f"SUBMISSIONS={folder}", cwd=ta)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]  # make's, for grade-all's 1
    with open(ta / "grade/gradebook.csv") as f:
        rows = {row["submission"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"ben", "cat", "dan", "eve"}
    assert {name: row["verdict"] for name, row in rows.items()} == {
        "ben": "REPRODUCED", "cat": "REPRODUCED", "dan": "NOT REPRODUCED", "eve": "REPRODUCED"}
    assert rows["ben"]["copies"].startswith("shares ") and rows["ben"]["copies"].endswith(" with cat")
    assert rows["cat"]["copies"].endswith(" with ben") and "result file(s)" in rows["cat"]["copies"]
    assert rows["dan"]["copies"] == rows["eve"]["copies"] == ""
    _, raised = tampered
    named = rows["dan"]["not reproduced"].split(" | ")
    for expected in ("code: toolkit file assignment/grade.py differs from this checkout's",
                     "results: results/lstm/verify.json: changed since the submission was made",
                     "results: results/lstm/bench.jsonl: changed since the submission was made",
                     "results: report/report.pdf: changed since the submission was made",
                     "results: verify.json's steps is 8, the manifest's settings say 6",
                     "results: verify.json: tf-async ran but has no pair with the reference",
                     f"results: bench.jsonl: {raised}: throughput",
                     "rerun: verify: reference vs tf-async: the submission says 'nothing'",
                     "rerun: verify: the reference's loss is not the rerun's (within 1e-05) at "):
        assert any(line.startswith(expected) for line in named), (expected, named)
    assert rows["dan"]["student"] == "Ann Lee (made by Ann <ann@example.org>, committed by Dan <dan@example.org>)"
    assert rows["ben"]["student"].startswith("Ben <ben@example.org> (made by Student <student@example.org>")
    assert rows["eve"]["correctness checked"] == "yes" and rows["eve"]["all three architectures run"] == "MISSING"
    page = (ta / "grade/gradebook.md").read_text()
    assert "| eve | Eve <eve@example.org> (made by" in page and "| lstm | 2 | " in page and "| REPRODUCED |" in page
    assert rows["eve"]["workers"] == "2" and rows["eve"]["throughput"].startswith("horovod ")
    assert "- dan: code: toolkit file" in page
    assert result.stdout.count("grade: verify: /") == 3  # ben's and cat's settings and model rerun once


def test_grade_all_of_no_folder_is_one_line_and_exit_2(tmp_path, assert_usage_error):
    result = subprocess.run(["make", "-s", "-C", REPO, "-o", ".venv/.setup-done", "grade-all",
                             f"SUBMISSIONS={tmp_path / 'none'}"], capture_output=True, text=True)
    assert result.returncode == 2 and "not a folder of submissions" in result.stderr, result.stderr


def test_grade_without_a_submission_is_one_line_and_exit_2(tmp_path):
    result = subprocess.run(["make", "-s", "-C", REPO, "-o", ".venv/.setup-done", "grade",
                             f"SUBMISSION={tmp_path / 'none'}"], capture_output=True, text=True)
    assert result.returncode == 2 and f"SUBMISSION={tmp_path / 'none'}: no such file" in result.stderr, result.stderr


def test_the_grade_s_bench_compares_each_architecture_s_share_within_the_band():
    """Another machine may be faster or slower at everything: each architecture's throughput over the three's
    geometric mean is what must stay within grade.BAND."""
    def record(runner, median, workers=2):
        return {"runner": runner, "workers": workers, "throughput": {"median": median}}
    submitted = [record("tf", 100), record("horovod", 200), record("parallax", 400), record("horovod-dense", 1),
                 record("tf", 1, workers=4)]
    slower_machine = [record(r["runner"], r["throughput"]["median"] / 3) for r in submitted[:3]]
    lines, found = grade.compare_throughputs(submitted, slower_machine, 2)
    assert found == [] and lines[0] == "tf: 0.50 of the three's mean in the submission, 0.50 here"
    reordered = [record("tf", 400), record("horovod", 200), record("parallax", 100)]
    _, found = grade.compare_throughputs(submitted, reordered, 2)
    assert [line.split("'")[0] for line in found] == ["bench: tf", "bench: parallax"]
    _, found = grade.compare_throughputs(submitted, reordered[:2], 2)
    assert found == ["the rerun's bench has no throughput of each of tf, horovod, parallax at W = 2"]


def test_the_course_s_points_add_up_to_the_assignment_s_and_a_bad_file_is_one_line(tmp_path):
    table = points.read(points.DEFAULT, rubric.names())
    assert [sum(p for _, p, _ in items) for _, items in table] == [0.5, 4.5, 2.5, 2.5]
    everything = {item: True for _, items in table for item, _, _ in items}
    assert points.line(points.score(table, everything, True)) == "7.25 of 10, 2.75 more for the TA to decide"
    assert points.line(points.score(table, {**everything, "correctness checked": False}, False)) == \
        "5.25 of 10, 2.75 more for the TA to decide"  # a missing written item earns nothing, TA or not
    assert points.line(points.score(table, dict.fromkeys(everything, False), False)) == "0 of 10"
    bad = tmp_path / "points.ini"
    bad.write_text("[Performance]\nthroughput compared = 2.5\n")
    with pytest.raises(UsageError, match=r"Performance: no rubric item 'throughput compared' \(the items: "):
        points.read(str(bad), rubric.names())
    bad.write_text("[Performance]\nenvironment recorded = a lot\n")
    with pytest.raises(UsageError, match="cannot be read as points"):
        points.read(str(bad), rubric.names())


def test_edits_that_can_change_results_fail_and_the_others_are_listed(tmp_path):
    """Negative controls beside honest edits: a runner, a harness file and the Makefile edited are changed (they
    fail the grade); README.md and docs/ edited are listed only; a file as an earlier commit has it is released."""
    tree = tmp_path / "tree"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", REPO, "archive", "HEAD"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    for path in ("run_tf.py", "harness/data.py", "Makefile", "README.md", "docs/setup.md"):
        with open(tree / path, "a") as f:
            f.write("\n# the student's edit\n")
    found = received.differences(str(tree), [])
    assert found.changed == ["Makefile", "harness/data.py", "run_tf.py"]
    assert found.uncounted == ["README.md", "docs/setup.md"] and found.released == {}
