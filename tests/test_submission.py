"""make submission (assignment/): a student's submission made in a clone, completed and committed (conftest's
`submitted`); what its manifest records, what the PDF's first page lists as missing, the student's own make grade,
and the hand-in's defects: a failed step stays failed, a failed verify is still handed in, an untracked model file
is refused. make grade in the TA's checkout: tests/test_grade.py."""
import json
import os
import shutil
import subprocess
import sys

import pytest
from pypdf import PdfReader

import harness
from conftest import REPO, clone, commit, make
from assignment import grade, received, rubric, student, submit
from reporting import blocks

UNSEEDED = ("rng = np.random.default_rng([seed, 7])", "rng = np.random.default_rng()  # a bug: unseeded")


def test_a_submission_records_the_code_the_commands_every_file_and_who(submitted):
    repo, made, _, before = submitted
    record = json.loads((repo / "submission/manifest.json").read_text())
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD~1"], capture_output=True, text=True).stdout
    assert record["commit"] == head.strip() and not record["dirty"] and record["complete"]
    assert record["model"]["file"] == "models/lstm.py"
    assert record["submitted_by"] == {"student": "Ann Lee", "git_user": "Ann <ann@example.org>"}
    assert [(c["step"], c["status"]) for c in record["commands"]] == [
        ("verify", 0), ("bench", 0), ("predict", 0), ("report", 0), ("report", 0)]  # the last: submission-report
    (host,) = record["hosts"]  # every task on this machine
    assert {"verify-reference", "verify-tf", "verify-parallax"} <= set(host["runs"])
    assert any(run.startswith("bench-tiny-horovod") for run in host["runs"])
    for field in ("cpu_model", "cpu_cores", "memory_bytes", "gpus", "os", "python", "tensorflow", "horovod", "mpi",
                  "links"):
        assert field in host["environment"], field
    assert record["student"]["sha256"] is not None
    assert "results/lstm/verify.json" in record["results"] and "report/report.pdf" in record["report"]
    # the results' digests and the commit as make submission fixed them; the report's typeset again
    assert {key: record[key] for key in ("commit", "results", "made")} == {key: before[key] for key in
                                                                           ("commit", "results", "made")}
    assert record["report"]["report/report.pdf"] != before["report"]["report/report.pdf"]
    bench = [json.loads(line) for line in (repo / "submission/results/lstm/bench.jsonl").read_text().splitlines()]
    assert {(r["runner"], r["steps"], r["warmup_steps"]) for r in bench} == {(name, 8, 2) for name in
                                                                             ("tf", "horovod", "parallax")}
    assert not (repo / "submission/results/lstm/verify-parallax-local.json").exists()
    committed = subprocess.run(["git", "-C", str(repo), "ls-files", "submission"], capture_output=True,
                               text=True).stdout.split()
    assert {"submission/manifest.json", "submission/student.md", "submission/report/report.pdf",
            "submission/results/lstm/verify.json"} <= set(committed)


def test_the_first_page_lists_what_is_missing_until_the_student_answers(submitted):
    repo, _, first_page, _ = submitted
    before = " ".join(first_page.split())
    for item in ("a published model, its paper cited", "where its code came from",
                 "why the synchronous runs match the reference", "the environment stated",
                 "every difference explained (no explanation of reference vs tf-async)",
                 "at least 50 warm-up steps left out (the bench left out 2 steps)"):
        assert item in before, before
    after = " ".join(PdfReader(repo / "submission/report/report.pdf").pages[0].extract_text().split())
    missing = after[after.index("Missing:"):after.index("the assignment asks")]
    assert "paper cited" not in missing and "where its code came from" not in missing
    assert "environment stated" not in missing and "synchronous runs match" not in missing
    assert "reference vs tf-async" in missing and "warm-up" in missing
    text = " ".join(page.extract_text() for page in PdfReader(repo / "submission/report/report.pdf").pages)
    assert "arXiv:1409.2329" in " ".join(text.split())  # the student's own words, typeset


@pytest.fixture(scope="module")
def own(submitted, tmp_path_factory):
    """The student's repository, cloned to be changed: their own make grade checks it with their code."""
    return clone(submitted[0], tmp_path_factory.mktemp("own") / "repo", "Ann")


def test_the_student_s_own_grade_names_an_edited_model_file_and_section(own):
    model, section = own / "models/lstm.py", own / "submission/student.md"
    original = model.read_text(), section.read_text()
    model.write_text(original[0] + "\n# edited\n")
    section.write_text(original[1] + "\nOne more line.\n")
    try:
        result = make("grade", cwd=own)
    finally:
        model.write_text(original[0])
        section.write_text(original[1])
    assert result.returncode == 2 and "grade] Error 1" in result.stderr, result.stdout + result.stderr  # make's 2
    assert ("grade: NOT REPRODUCED: code: model file models/lstm.py: not the one the submission was made from"
            in result.stderr)
    assert "grade: NOT REPRODUCED: student.md: edited after its report was made" in result.stderr
    assert "grade: verify:" not in result.stdout  # nothing rerun for code that is not the submission's


def head(repo):
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def test_the_student_s_own_grade_names_a_commit_since(own):
    """A runner changed since the submission was made is named; the README changed beside it is not (it cannot
    change results)."""
    submitted_at = head(own)
    for path in ("README.md", "run_tf.py"):
        with open(own / path, "a") as f:
            f.write("\n# A line.\n")
    commit(own, "README.md", "run_tf.py", message="A change since")
    try:
        result = make("grade", cwd=own)
    finally:
        subprocess.run(["git", "-C", str(own), "reset", "-q", "--hard", submitted_at], check=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "code: 1 file(s) differ from the code the submission was made from" in result.stderr
    assert "run_tf.py" in result.stderr and "README.md" not in result.stderr


def test_a_failed_step_stays_failed_and_the_results_stay_as_made(own):
    """A bench that failed, then make submission-report twice (after a commit): never complete, the commit and the
    results' digests those of make submission; the grade says incomplete, not that the code differs."""
    path, submitted_at = own / "submission/manifest.json", head(own)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "complete": False, "failed": "bench"}))
    try:
        for _ in range(2):
            again = make("submission-report", cwd=own)
            assert again.returncode == 2 and "FAILED: bench did not run to its end" in again.stderr, again.stderr
            assert json.loads(path.read_text())["complete"] is False
        graded = make("grade", cwd=own)
        assert "grade: NOT REPRODUCED: incomplete: the submission's own bench failed" in graded.stderr
        assert "code:" not in graded.stderr and "grade: verify:" not in graded.stdout, graded.stderr
        readme = own / "README.md"
        readme.write_text(readme.read_text() + "\nA line.\n")
        commit(own, "README.md", message="A change since")
        make("submission-report", cwd=own)
        after = json.loads(path.read_text())
        assert (after["commit"], after["results"], after["failed"]) == (record["commit"], record["results"], "bench")
    finally:
        subprocess.run(["git", "-C", str(own), "reset", "-q", "--hard", submitted_at], check=True)


def test_a_failed_verify_is_handed_in_with_a_heading_for_each_difference(tmp_path, measured_costs,
                                                                          assert_usage_error):
    """A model whose data is unseeded fails verify: the bench and the report run all the same, student.md has a
    heading to explain the difference, and the rubric says verify failed. Untracked, the file is refused first."""
    repo = clone(REPO, tmp_path / "repo")
    model = repo / "models/unseeded.py"
    model.write_text((repo / "tests/models/bag_of_words.py").read_text().replace(*UNSEEDED))
    untracked = subprocess.run([sys.executable, "-m", "assignment.submit", "--model=models/unseeded.py"], cwd=repo,
                               capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(repo)})
    assert_usage_error(untracked, "git does not track models/unseeded.py: git add models/unseeded.py")
    commit(repo, "models/unseeded.py", message="My model")
    (repo / "submission/results/unseeded").mkdir(parents=True)
    shutil.copy(measured_costs / "bench-costs.json", repo / "submission/results/unseeded")
    made = make("submission", "MODEL=models/unseeded.py", "CONFIG=tiny", "STEPS=8", "WARMUP=2", "NET=loopback",
                "ARGS=--runs=horovod --bench_runs=horovod", cwd=repo)
    assert made.returncode == 2, made.stdout[-3000:] + made.stderr[-3000:]  # make's, for the submission's 1
    assert "verify FAILED: explain each difference under its heading in student.md" in made.stdout
    record = json.loads((repo / "submission/manifest.json").read_text())
    assert record["complete"] and [c["step"] for c in record["commands"]] == ["verify", "bench", "predict", "report"]
    assert (repo / "submission/report/report.pdf").exists()
    assert "reference vs horovod" in student.sections((repo / "submission/student.md").read_text())
    items = {item.name: item for item in rubric.check(repo / "submission/results/unseeded",
                                                      (repo / "submission/student.md").read_text())}
    assert items["correctness checked"].found == "verify FAILED" and not items["every difference explained"].met


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


def test_the_rubric_reads_every_section_of_student_md(tmp_path):
    text = student.template("gru", [])
    unanswered = {item.name for item in rubric.check(str(tmp_path), text) if not item.met}
    assert {"why the synchronous runs match the reference", "the environment stated"} <= unanswered
    answered = text.replace("<Anything about the machines", "Two cores.<")
    found = {item.name: item.found for item in rubric.check(str(tmp_path), answered)}
    assert found["the environment stated"] == 'section "Environment" answered'


def test_the_rubric_of_an_empty_results_directory_names_each_missing_thing(tmp_path):
    items = rubric.check(str(tmp_path), None)
    assert not any(item.met for item in items)
    assert {item.found for item in items} >= {"no student.md", "no verify.json: make verify", "no bench measured"}


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


def test_a_model_file_outside_the_repository_is_refused(tmp_path, assert_usage_error):
    shutil.copy(os.path.join(REPO, "tests/models/bag_of_words.py"), tmp_path / "mine.py")
    result = subprocess.run([sys.executable, "-m", "assignment.submit", f"--model={tmp_path / 'mine.py'}"],
                            cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO})
    assert_usage_error(result, "outside the repository: copy it into models/ and git add it")


def test_the_data_a_submission_names_is_found_here_or_named(tmp_path):
    """The TA's side of DATA=: the student's tree's copy, else this checkout's (make data), else one line."""
    got = received.Received("x", str(tmp_path), str(tmp_path / "submission"), own=False)
    (tmp_path / "corpus.txt").write_text("a b c\n")
    assert grade.data_path(got, {"data": "corpus.txt"}) == str(tmp_path / "corpus.txt")
    assert grade.data_path(got, {"data": "synthetic"}) == "synthetic"
    with pytest.raises(harness.UsageError) as error:
        grade.data_path(got, {"data": "data/no-such-corpus"})
    assert "make data first" in str(error.value)


def test_a_copy_without_git_history_is_one_line_and_exit_2(tmp_path, assert_usage_error):
    """A submission is tied to a commit: a downloaded copy of the code (no .git) cannot make or grade one."""
    subprocess.run(f"git -C {REPO} archive HEAD | tar -x -C {tmp_path}", shell=True, check=True)
    result = subprocess.run([sys.executable, "-m", "assignment.grade"], cwd=tmp_path, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert_usage_error(result, "is not a git repository with a commit")
