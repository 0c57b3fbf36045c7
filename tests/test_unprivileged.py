"""A student without root, as on a course's lab machines: a user made with useradd clones the repository, makes its
own .venv from the system's Python, hands in (make submission: verify, the bench, the report) and grades it. The
bench runs its machines on loopback, unshaped, and its table and the report say so."""
import glob
import json
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest
from pypdf import PdfReader

from conftest import REPO, missing

USER = "lstmstudent"
PATH = "/usr/local/bin:/usr/bin:/bin"  # an ordinary user's, without root's /usr/sbin
TINY = ["CONFIG=tiny", "STEPS=8", "WARMUP=2", "ARGS=--runs=tf,horovod,parallax"]


def horovod_wheels():
    """The directory of this .venv's Horovod wheel in setup's cache (scripts/setup.sh), or None."""
    key = open(os.path.join(REPO, ".venv", ".horovod-build")).read().strip()
    cache = os.environ.get("LSTM_DIST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "lstm-dist")
    wheels = os.path.join(cache, "wheels", key)
    return wheels if glob.glob(os.path.join(wheels, "horovod-*.whl")) else None


@pytest.fixture(scope="module")
def student():
    """(a function running a command as the unprivileged user in its clone, the clone's path)."""
    if os.geteuid() != 0:
        pytest.skip("useradd needs root: run as root to test the unprivileged paths")
    if not horovod_wheels():
        missing("no cached Horovod wheel of this .venv (make setup caches it)")
    created = subprocess.run(["id", USER], capture_output=True).returncode != 0
    if created:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", USER], check=True)
    home = pwd.getpwnam(USER).pw_dir
    work = tempfile.mkdtemp(prefix="lstm-unprivileged-")
    os.chmod(work, 0o755)
    try:
        repo = os.path.join(work, "repo")
        subprocess.run(["git", "clone", "-q", REPO, repo], check=True)
        # The Horovod build this machine already made, as a lab's shared cache would hand it over.
        cache = os.path.join(work, "cache", "wheels")
        shutil.copytree(horovod_wheels(), os.path.join(cache, os.path.basename(horovod_wheels())))
        subprocess.run(["chown", "-R", f"{USER}:", work], check=True)
        environment = {"HOME": home, "PATH": PATH, "LSTM_DIST_CACHE": os.path.join(work, "cache"),
                       **{k: v for k, v in os.environ.items() if k.startswith("PIP_")}}

        def as_user(*argv, timeout=900):
            return subprocess.run(["runuser", "-u", USER, "--", "env", "-i",
                                   *(f"{k}={v}" for k, v in environment.items()), *argv],
                                  cwd=repo, capture_output=True, text=True, timeout=timeout)
        for key, value in (("user.name", "Student"), ("user.email", "student@example.org")):
            as_user("git", "config", key, value)
        yield as_user, repo
    finally:
        subprocess.run(["pkill", "-KILL", "-u", USER], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
        if created:
            subprocess.run(["userdel", "--remove", USER], capture_output=True)


@pytest.fixture(scope="module")
def set_up(student):
    as_user, repo = student
    if as_user("sh", "-c", "scripts/find_python.sh").returncode:
        missing("no Python 3.9-3.11 on an ordinary user's PATH")
    result = as_user("make", "setup")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_make_setup_makes_the_user_s_own_venv(set_up, student):
    as_user, repo = student
    assert os.stat(os.path.join(repo, ".venv", "pyvenv.cfg")).st_uid == pwd.getpwnam(USER).pw_uid
    assert "apt-get" not in set_up.stdout.replace("sudo apt-get install adds them", "")
    checked = as_user(".venv/bin/horovodrun", "--check-build")
    assert "[X] TensorFlow" in checked.stdout and "[X] Gloo" in checked.stdout


@pytest.fixture(scope="module")
def submitted(set_up, student):
    as_user, repo = student
    made = as_user("make", "-s", "submission", *TINY)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    as_user("git", "add", "submission")
    as_user("git", "commit", "-qm", "Submission")
    return made


def test_a_submission_without_root_benches_on_loopback_and_says_so(submitted, student):
    _, repo = student
    assert "tiny, links not emulated: every task on this machine's loopback" in submitted.stdout
    manifest = json.load(open(os.path.join(repo, "submission", "manifest.json")))
    assert manifest["complete"] and manifest["settings"]["net"] == "loopback"
    bench = [json.loads(line) for line in open(os.path.join(repo, "submission/results/lstm/bench.jsonl"))]
    assert sorted(r["runner"] for r in bench) == ["horovod", "parallax", "tf"]
    for record in bench:
        assert (record["link"], record["emulated"], record["machines"]) == (None, False, 1)
        assert record["throughput"]["median"] > 0 and record["point_seconds"] is None
    text = " ".join(" ".join(page.extract_text() for page in
                             PdfReader(os.path.join(repo, "submission/report/report.pdf")).pages).split())
    assert "The benchmark: one machine, links not emulated" in text
    assert "Parallax's figure not predicted: make bench as root" in text


def test_the_user_grades_it(submitted, student):
    as_user, _ = student
    graded = as_user("make", "-s", "grade")
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    assert "grade: REPRODUCED" in graded.stdout
    left = subprocess.run(["pgrep", "-u", USER, "-a"], capture_output=True, text=True).stdout
    assert not left, f"left running: {left}"


def test_without_root_emulated_links_are_one_line_and_not_rebenched(set_up, student, assert_usage_error):
    as_user, repo = student
    bench = as_user(".venv/bin/python", "-m", "bench.run", "--net=100mbit", "--quick")
    assert_usage_error(bench, "--net=100mbit: emulated links need root", "--net=loopback")
    copy = os.path.join(repo, "emulated")  # a submission a student made as root, graded here with BENCH=1
    as_user("cp", "-r", "submission", copy)
    manifest = json.load(open(os.path.join(copy, "manifest.json")))
    manifest["settings"]["net"] = "100mbit"
    with open(os.path.join(copy, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    grade = as_user(".venv/bin/python", "-m", "assignment.grade", "--submission=emulated", "--bench")
    assert "grade: bench: not rerun: its bench ran on emulated links of 100mbit, which need root" in grade.stdout
    assert "grade: bench: python" not in grade.stdout  # graded without the re-bench


def test_a_probe_model_in_the_user_s_sandbox_reads_and_writes_nothing_of_theirs(set_up, student):
    """verify --sandbox as the unprivileged TA (bubblewrap in a user namespace): a model that writes into their
    home, reads their ~/.ssh and leaves a process running is contained, and its honest training still passes."""
    as_user, repo = student
    home = pwd.getpwnam(USER).pw_dir
    as_user("sh", "-c", "mkdir -p ~/.ssh && echo the-user-s-key > ~/.ssh/id_probe")
    probe = os.path.join(repo, "probe.py")
    with open(os.path.join(REPO, "models", "lstm.py")) as f:
        lstm = f.read()
    with open(probe, "w") as f:
        f.write(f"import os, subprocess\ntry:\n    open({home + '/probe-wrote-here'!r}, 'w').write('x')\n"
                f"except OSError as error:\n    print('probe: write:', repr(error), flush=True)\n"
                f"try:\n    print('probe: key:', open({home + '/.ssh/id_probe'!r}).read(), flush=True)\n"
                f"except OSError as error:\n    print('probe: key:', repr(error), flush=True)\n"
                f"subprocess.Popen(['sleep', '97531'], start_new_session=True)\n" + lstm)
    os.chmod(probe, 0o644)
    result = as_user(".venv/bin/python", "verify.py", "--model=probe.py", "--config=tiny", "--steps=8",
                     "--warmup_steps=2", "--runs=reference,horovod", "--sandbox")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not os.path.exists(os.path.join(home, "probe-wrote-here"))
    assert "probe: key: FileNotFoundError" in result.stdout and "the-user-s-key" not in result.stdout
    assert "sandbox: left running, stopped: sleep 97531" in result.stderr
    assert not subprocess.run(["pgrep", "-f", "sleep 97531"], capture_output=True).stdout
