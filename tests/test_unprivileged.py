"""A student without root, as on a course's lab machines: a user made with useradd clones the repository, makes its
own .venv from the system's Python, hands in (make submission: verify, the bench, the report) and grades it. The
bench runs its machines on loopback, unshaped, and its table and the report say so."""
import glob
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile

import pytest
from pypdf import PdfReader

from conftest import REPO, missing

USER = "lstmstudent"
PATH = "/usr/local/bin:/usr/bin:/bin"  # an ordinary user's, without root's /usr/sbin
# verify: the reference and one distributed run; the bench runs all three architectures, as the user too
TINY = ["CONFIG=tiny", "STEPS=8", "WARMUP=2", "ARGS=--runs=horovod --bench_runs=tf,horovod,parallax"]


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

        def as_user(*argv, timeout=900, hidden=(), **variables):
            """`argv` run as the user; with `hidden` [(a path, what stands in for it)], in a mount namespace of
            its own where each path is that stand-in, as on a machine without what the path held."""
            command = ["runuser", "-u", USER, "--", "env", "-i",
                       *(f"{k}={v}" for k, v in {**environment, **variables}.items()), *argv]
            if hidden:
                mounts = " && ".join(f"mount --bind {stand_in} {path}" for path, stand_in in hidden)
                command = ["unshare", "--mount", "sh", "-c", f'{mounts} && exec "$@"', "sh", *command]
            return subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=timeout)
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


def without_build_packages(tmp_path):
    """[(path, stand-in)] hiding from the user's Python its headers (pythonX.Y-dev), venv's ensurepip
    (pythonX.Y-venv), and cmake and bubblewrap: an unprivileged user's machine that lacks them."""
    python = subprocess.run(["env", "-i", f"PATH={PATH}", "sh", "-c", f"{REPO}/scripts/find_python.sh"],
                            capture_output=True, text=True, check=True).stdout.strip()
    include, ensurepip, version = subprocess.run(
        ["env", "-i", f"PATH={PATH}", python, "-c", "import sys, sysconfig, ensurepip; print(sysconfig.get_paths()"
         "['include'], ensurepip.__path__[0], '%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True).stdout.split()
    not_executable, empty, failing = tmp_path / "not-installed", tmp_path / "empty", tmp_path / "ensurepip"
    not_executable.write_text("")
    empty.mkdir()
    failing.mkdir()
    (failing / "__init__.py").write_text("raise ImportError('not installed')\n")
    for made in (not_executable, empty, failing, failing / "__init__.py"):
        made.chmod(0o755 if made.is_dir() else 0o644)
    tmp_path.chmod(0o755)
    programs = [shutil.which(name, path=PATH) for name in ("cmake", "bwrap")]
    if None in programs:
        missing("cmake or bwrap not installed: make setup installs them")
    return [(include, empty), (ensurepip, failing), *((program, not_executable) for program in programs)], version


def test_setup_without_the_build_packages_names_every_missing_one_at_once(student, tmp_path):
    """Without a cached Horovod wheel: the required packages (the venv's, the build's) and the optional one,
    each with what needs it, in one apt-get line, before anything is made."""
    as_user, repo = student
    hidden, version = without_build_packages(tmp_path)
    result = as_user("bash", "scripts/setup.sh", hidden=hidden, LSTM_DIST_CACHE=str(tmp_path / "no-cache"))
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line == (f"setup: missing python{version}-venv (the virtual environment), cmake (Horovod's build), "
                    f"python{version}-dev (Horovod's build); optional, also missing: bubblewrap (make grade's "
                    f"sandbox): sudo apt-get install python{version}-venv cmake python{version}-dev bubblewrap, "
                    f"then rerun make setup")


def test_setup_with_a_cached_wheel_needs_no_build_package(student, tmp_path):
    """A lab's shared wheel cache (LSTM_DIST_CACHE) is looked up first: with the wheel there, only the venv's
    package is required."""
    as_user, repo = student
    hidden, version = without_build_packages(tmp_path)
    result = as_user("bash", "scripts/setup.sh", hidden=hidden)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "setup: Horovod's wheel is cached" in result.stdout
    assert result.stderr.strip() == (f"setup: missing python{version}-venv (the virtual environment); optional, "
                                     f"also missing: bubblewrap (make grade's sandbox): sudo apt-get install "
                                     f"python{version}-venv bubblewrap, then rerun make setup")


def test_make_setup_makes_the_user_s_own_venv(set_up, student):
    as_user, repo = student
    assert os.stat(os.path.join(repo, ".venv", "pyvenv.cfg")).st_uid == pwd.getpwnam(USER).pw_uid
    assert "with apt-get" not in set_up.stdout  # ("setup: installing ... with apt-get": as root only)
    # said once the user's `horovodrun --check-build` lists TensorFlow and Gloo (scripts/setup.sh)
    assert re.search(r"^setup: horovod \S+ built with TensorFlow \S+ and gloo", set_up.stdout, re.M), set_up.stdout


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
