"""make submission and make grade (assignment/): a student's submission made in a clone, completed and committed,
then graded in a second clone of the result; an edited model file, another commit and a student's section edited
after its PDF are each named; the PDF's first page lists what is missing."""
import json
import os
import shutil
import subprocess
import sys

import pytest
from pypdf import PdfReader

from conftest import REPO
from assignment import grade, rubric, student, submit
from reporting import blocks

# Minutes, not the assignment's window: 8 steps of which 2 warm-up; verify's runs those the bench compares, and
# tf-async for a difference to explain.
TINY = ["CONFIG=tiny", "STEPS=8", "WARMUP=2", "ARGS=--runs=tf,horovod,parallax,tf-async"]
ANSWERS = {"<The model and the paper it comes from": "Zaremba, Sutskever and Vinyals, Recurrent Neural Network "
                                                     "Regularization, arXiv:1409.2329, 2014.",
           "<The repository and file you took": "tensorflow/models, tutorials/rnn/ptb/ptb_word_lm.py.",
           "<Why the architectures rank": "Horovod sends the dense gradients once, by a ring."}


def make(target, *variables, cwd, timeout=1200):
    return subprocess.run(["make", "-s", "-o", ".venv/.setup-done", target, *variables], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def clone(source, destination):
    """A clone of `source` using this repository's .venv, as a student's or a TA's checkout."""
    subprocess.run(["git", "clone", "-q", str(source), str(destination)], check=True)
    os.symlink(os.path.join(REPO, ".venv"), destination / ".venv")
    for key, value in (("user.name", "Student"), ("user.email", "student@example.org")):
        subprocess.run(["git", "-C", str(destination), "config", key, value], check=True)
    return destination


def answer(path):
    """Fill in the student's section: every placeholder answered but the ones of the differences."""
    text = path.read_text()
    for placeholder, words in ANSWERS.items():
        start = text.index(placeholder)
        text = text[:start] + words + text[text.index(">", start) + 1:]
    path.write_text(text)


@pytest.fixture(scope="module")
def submitted(tmp_path_factory, measured_costs):
    """A student's clone after make submission (its bench given this machine's measured costs), student.md
    answered, make submission-report and a commit of submission/; and the make submission run."""
    repo = clone(REPO, tmp_path_factory.mktemp("student") / "repo")
    (repo / "submission/results/lstm").mkdir(parents=True)
    shutil.copy(measured_costs / "bench-costs.json", repo / "submission/results/lstm")
    (repo / "submission/results/lstm/verify-parallax-local.json").write_text("{}")  # an earlier attempt's
    made = make("submission", *TINY, cwd=repo)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    first_page = PdfReader(repo / "submission/report/report.pdf").pages[0].extract_text()
    answer(repo / "submission/student.md")
    again = make("submission-report", cwd=repo)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    subprocess.run(["git", "-C", str(repo), "add", "submission"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "Submission"], check=True)
    return repo, made, first_page


def test_a_submission_records_the_code_the_commands_and_every_host(submitted):
    repo, made, _ = submitted
    record = json.loads((repo / "submission/manifest.json").read_text())
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD~1"], capture_output=True, text=True).stdout
    assert record["commit"] == head.strip() and not record["dirty"] and record["complete"]
    assert record["model"]["file"] == "models/lstm.py"
    assert [(c["step"], c["status"]) for c in record["commands"]] == [
        ("verify", 0), ("bench", 0), ("predict", 0), ("report", 0), ("report", 0)]  # the last: submission-report
    (host,) = record["hosts"]  # every task on this machine
    assert {"verify-reference", "verify-tf", "verify-parallax"} <= set(host["runs"])
    assert any(run.startswith("bench-tiny-horovod") for run in host["runs"])
    for field in ("cpu_model", "cpu_cores", "memory_bytes", "gpus", "os", "python", "tensorflow", "horovod", "mpi",
                  "links"):
        assert field in host["environment"], field
    assert record["student"]["sha256"] is not None
    bench = [json.loads(line) for line in (repo / "submission/results/lstm/bench.jsonl").read_text().splitlines()]
    assert {(r["runner"], r["steps"], r["warmup_steps"]) for r in bench} == {(name, 8, 2) for name in
                                                                             ("tf", "horovod", "parallax")}
    assert not (repo / "submission/results/lstm/verify-parallax-local.json").exists()
    committed = subprocess.run(["git", "-C", str(repo), "ls-files", "submission"], capture_output=True,
                               text=True).stdout.split()
    assert {"submission/manifest.json", "submission/student.md", "submission/report/report.pdf",
            "submission/results/lstm/verify.json"} <= set(committed)


def test_the_first_page_lists_what_is_missing_until_the_student_answers(submitted):
    repo, _, first_page = submitted
    before = " ".join(first_page.split())
    for item in ("a published model, its paper cited", "where its code came from",
                 "every difference explained (no explanation of reference vs tf-async)",
                 "at least 50 warm-up steps left out (the bench left out 2 steps)"):
        assert item in before, before
    after = " ".join(PdfReader(repo / "submission/report/report.pdf").pages[0].extract_text().split())
    missing = after[after.index("Missing:"):after.index("the assignment asks")]
    assert "paper cited" not in missing and "where its code came from" not in missing
    assert "reference vs tf-async" in missing and "warm-up" in missing
    text = " ".join(page.extract_text() for page in PdfReader(repo / "submission/report/report.pdf").pages)
    assert "arXiv:1409.2329" in " ".join(text.split())  # the student's own words, typeset


@pytest.fixture(scope="module")
def graded(submitted, tmp_path_factory):
    """The TA's clone of the committed submission and its make grade."""
    ta = clone(submitted[0], tmp_path_factory.mktemp("ta") / "repo")
    return ta, make("grade", "SUBMISSION=submission", cwd=ta)


def test_the_ta_s_clone_reproduces_the_submission(graded):
    ta, result = graded
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "grade: verify: 7 of 7 verdicts reproduce" in result.stdout
    assert "grade: REPRODUCED" in result.stdout
    assert "  yes      a published model, its paper cited: section \"Model and paper\" answered" in result.stdout
    assert "  MISSING  at least 50 warm-up steps left out: the bench left out 2 steps" in result.stdout


def test_an_edited_model_file_and_student_section_are_named(graded):
    ta, _ = graded
    model, section = ta / "models/lstm.py", ta / "submission/student.md"
    original = model.read_text(), section.read_text()
    model.write_text(original[0] + "\n# edited\n")
    section.write_text(original[1] + "\nOne more line.\n")
    try:
        result = make("grade", "SUBMISSION=submission", cwd=ta)
    finally:
        model.write_text(original[0])
        section.write_text(original[1])
    assert result.returncode == 2 and "grade] Error 1" in result.stderr, result.stdout + result.stderr  # make's 2
    assert ("grade: NOT REPRODUCED: model file models/lstm.py: not the one the submission was made from"
            in result.stderr)
    assert "submission/student.md: edited after its report was made: make submission-report" in result.stderr
    assert "grade: verify:" not in result.stdout  # nothing rerun for code that is not the submission's


def test_another_commit_is_named(graded, tmp_path):
    ta, _ = graded
    shutil.copytree(ta / "submission", tmp_path / "submission")
    subprocess.run(["git", "-C", str(ta), "checkout", "-q", "HEAD~2"], check=True)
    try:
        result = make("grade", f"SUBMISSION={tmp_path / 'submission'}", cwd=ta)
    finally:
        subprocess.run(["git", "-C", str(ta), "checkout", "-q", "-"], check=True)
    assert result.returncode == 2 and "grade] Error 1" in result.stderr, result.stdout + result.stderr
    assert "file(s) differ from the code the submission was made from" in result.stderr


def test_grade_without_a_submission_is_one_line_and_exit_2(tmp_path, assert_usage_error):
    result = subprocess.run(["make", "-s", "-C", REPO, "-o", ".venv/.setup-done", "grade",
                             f"SUBMISSION={tmp_path / 'none'}"], capture_output=True, text=True)
    assert result.returncode == 2 and "no " + str(tmp_path / "none/manifest.json") in result.stderr, result.stderr


def test_a_section_is_answered_once_its_placeholder_is_replaced():
    differing = [{"a": "reference", "b": "tf-async", "verdict": "differs, as expected (asynchronous)"}]
    text = student.template("gru", differing)
    said = student.sections(text)
    assert list(said) == [student.MODEL, student.CODE, student.CORRECTNESS, "reference vs tf-async",
                          student.THROUGHPUT, student.ENVIRONMENT]
    assert not any(student.answered(body) for body in said.values())
    answered = text.replace("<Why tf-async differs from reference (differs, as expected (asynchronous)).>",
                            "Stale gradients <and more>.")
    assert student.answered(student.sections(answered)["reference vs tf-async"])
    parts = student.blocks_of("# title\n\n## A\nOne\nline.\n\n- x\n- y\n  z\n", blocks)
    assert parts == [blocks.subheading("A"), blocks.paragraph("One line."), blocks.bullets(["x", "y z"])]


def test_the_rubric_of_an_empty_results_directory_names_each_missing_thing(tmp_path):
    items = rubric.check(str(tmp_path), None)
    assert not any(item.met for item in items)
    assert {item.found for item in items} >= {"no student.md", "no verify.json: make verify", "no bench measured"}


def bench_record(runner, median, workers=2):
    return {"runner": runner, "workers": workers, "throughput": {"median": median}}


def test_the_grade_s_bench_compares_each_architecture_s_share_within_the_band():
    """Another machine may be faster or slower at everything: each architecture's throughput over the three's
    geometric mean is what must stay within grade.BAND."""
    submitted = [bench_record("tf", 100), bench_record("horovod", 200), bench_record("parallax", 400),
                 bench_record("horovod-dense", 1), bench_record("tf", 1, workers=4)]
    slower_machine = [bench_record(r["runner"], r["throughput"]["median"] / 3) for r in submitted[:3]]
    lines, found = grade.compare_throughputs(submitted, slower_machine, 2)
    assert found == [] and lines[0] == "tf: 0.50 of the three's mean in the submission, 0.50 here"
    reordered = [bench_record("tf", 400), bench_record("horovod", 200), bench_record("parallax", 100)]
    _, found = grade.compare_throughputs(submitted, reordered, 2)
    assert [line.split("'")[0] for line in found] == ["bench: tf", "bench: parallax"]
    _, found = grade.compare_throughputs(submitted, reordered[:2], 2)
    assert found == ["the rerun's bench has no throughput of each of tf, horovod, parallax at W = 2"]


def test_make_submission_s_bench_leaves_out_the_assignment_s_warm_up_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    steps = dict(submit.commands(submit.parse_flags([])))
    assert "--steps=150" in steps["bench"] and "--warmup_steps=50" in steps["bench"]
    assert "--steps=60" in steps["verify"] and "--runs=" not in " ".join(steps["verify"])
    assert "--runners=tf,horovod,parallax" in steps["bench"]


def test_make_submission_with_hosts_benches_on_them(tmp_path, monkeypatch):
    """HOSTS= reaches verify's runs and the bench alike (bench.run --hosts measures the hosts' links itself)."""
    monkeypatch.chdir(tmp_path)
    steps = dict(submit.commands(submit.parse_flags(["--hosts=node1:1,node2:1"])))
    assert "--hosts=node1:1,node2:1" in steps["verify"] and "--hosts=node1:1,node2:1" in steps["bench"]
    assert not any(arg.startswith("--net") for arg in steps["bench"])


def test_a_copy_without_git_history_is_one_line_and_exit_2(tmp_path, assert_usage_error):
    """A submission is tied to a commit: a downloaded copy of the code (no .git) cannot make or grade one."""
    subprocess.run(f"git -C {REPO} archive HEAD | tar -x -C {tmp_path}", shell=True, check=True)
    result = subprocess.run([sys.executable, "-m", "assignment.grade"], cwd=tmp_path, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert_usage_error(result, "is not a git repository with a commit")
