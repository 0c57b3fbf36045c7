import contextlib
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import harness.determinism  # noqa: F401  (before TensorFlow: it fixes the kernels, as in the runners)
import numpy as np
import pytest
from pypdf import PdfReader
import tensorflow as tf

from harness import REPO
from launcher.starters.local import LocalProcess


# make test runs two groups of tests at a time (pytest-xdist, -n 2). A group is a module; the longest go first, so
# that no long one is left running alone at the end.
# test_docker first: on a fresh machine it builds its image, Horovod included, for about 20 minutes.
# Then by their seconds in the last full run (docs/measurements.md, "The test suite's time").
LONGEST_FIRST = ["test_docker", "test_cluster", "test_keras_programs", "test_copied_code", "test_verify",
                 "test_unprivileged", "test_grade", "test_resume", "test_end_of_run", "test_bench", "test_soak",
                 "test_parallax", "test_tf", "test_your_model", "test_netns", "test_ssh", "test_lm1b"]


def group_of(nodeid):
    """The group of a test: "tests/test_report.py::test_x" -> "test_report"."""
    return os.path.basename(nodeid.split("::")[0]).removesuffix(".py")


def pytest_collection_modifyitems(items):
    """Puts the longest groups first."""
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's scheduling by scope, a scope being a group: each group's tests run in one process, in turn."""
    from xdist.scheduler import LoadScopeScheduling
    config.option.loadscopereorder = False  # the groups in collection order, longest first, not by test count

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return group_of(nodeid)
    return ByGroup(config, log)


def missing(reason):
    """Skip for a missing capability, saying why; under CI=true as root, where make setup provides every one,
    fail instead: a skip there is a missing install step."""
    if os.environ.get("CI") == "true" and os.geteuid() == 0:
        pytest.fail(f"CI as root, yet {reason}")
    pytest.skip(reason)


def run_script(script, *flags, cwd, timeout=300):
    """Runs one of the repository's scripts in `cwd` (where its outputs go) and returns the CompletedProcess."""
    return subprocess.run([sys.executable, os.path.join(REPO, script), *flags], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def free_ports(count):
    """`count` ports free now, below the ephemeral range as the launcher draws them: an outgoing connection meanwhile
    cannot take one before its server binds it."""
    return LocalProcess().free_ports("127.0.0.1", count)


def run_module(module, *flags, cwd, timeout=300):
    """`python -m MODULE FLAGS` of the repository (bench.run) in `cwd`; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", module, *flags], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": REPO})


SHARED = {}  # "root": the directory made_once makes in, common to make test's two processes


@pytest.fixture(scope="session", autouse=True)
def shared_root(tmp_path_factory):
    root = tmp_path_factory.getbasetemp()
    SHARED["root"] = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


def made_once(name, make):
    """The directory `name`, made by make(directory) once in the session, by whichever of make test's two
    processes asks first; the other waits for it. What is made there is read, never changed."""
    root = SHARED["root"]
    directory = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / ".made").exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            make(directory)
            (directory / ".made").touch()
    return directory


VERIFY_STEPS = 30
VERIFY_FLAGS = ["--config=tiny", f"--steps={VERIFY_STEPS}", "--warmup_steps=5", f"--log_every={VERIFY_STEPS}"]


@pytest.fixture(scope="session")
def verify_run():
    """One make verify FAULTS=1 of every run on the tiny config, 30 steps (its directory and CompletedProcess):
    what test_verify and test_report check, and what test_tf, test_horovod and test_parallax read their runs from."""
    def verify(work):
        result = subprocess.run([sys.executable, os.path.join(REPO, "verify.py"), *VERIFY_FLAGS, "--faults"],
                                cwd=work, capture_output=True, text=True, timeout=1200)
        (work / "verify.out.json").write_text(json.dumps([result.returncode, result.stdout, result.stderr]))
    work = made_once("verify", verify)
    returncode, stdout, stderr = json.loads((work / "verify.out.json").read_text())
    return work, subprocess.CompletedProcess([], returncode, stdout, stderr)


@pytest.fixture(scope="session")
def measured_costs():
    """The results directory of one `python -m bench.costs --quick`: this machine's protocol costs, which a bench
    run given them (its results directory's bench-costs.json) reuses."""
    if os.geteuid() != 0:
        pytest.skip("bench.costs' emulated cluster needs root")

    def measure(work):
        result = run_module("bench.costs", "--quick", cwd=work, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
    return made_once("costs", measure) / "results"


def make(target, *variables, cwd, timeout=1200):
    """`make -s TARGET VARIABLES` in `cwd` (a clone: setup is this repository's) -> the CompletedProcess."""
    return subprocess.run(["make", "-s", "-o", ".venv/.setup-done", target, *variables], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def clone(source, destination, name="Student"):
    """A clone of `source` using this repository's .venv, as a student's or a TA's checkout; `name` commits."""
    subprocess.run(["git", "clone", "-q", str(source), str(destination)], check=True)
    os.symlink(os.path.join(REPO, ".venv"), destination / ".venv")
    for key, value in (("user.name", name), ("user.email", f"{name.lower()}@example.org")):
        subprocess.run(["git", "-C", str(destination), "config", key, value], check=True)
    return destination


def commit(repo, *paths, message="Submission"):
    subprocess.run(["git", "-C", str(repo), "add", *paths], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", message], check=True)


# A submission in minutes, not the assignment's window: 8 steps of which 2 warm-up; verify's runs those the bench
# compares, and tf-async for a difference to explain.
SUBMISSION_TINY = ["CONFIG=tiny", "STEPS=8", "WARMUP=2", "ARGS=--runs=tf,horovod,parallax,tf-async"]
ANSWERS = {"<The model and the paper it comes from": "Zaremba, Sutskever and Vinyals, Recurrent Neural Network "
                                                     "Regularization, arXiv:1409.2329, 2014.",
           "<The repository and file you took": "tensorflow/models, tutorials/rnn/ptb/ptb_word_lm.py.",
           "<What verify compared": "Each run adds the two workers' gradients as the reference does.",
           "<Why the architectures rank": "Horovod sends the dense gradients once, by a ring.",
           "<Anything about the machines": "One shared two-core machine."}


def answer(path):
    """Fill in the student's section: every placeholder answered but the ones of the differences."""
    text = path.read_text()
    for placeholder, words in ANSWERS.items():
        start = text.index(placeholder)
        text = text[:start] + words + text[text.index(">", start) + 1:]
    path.write_text(text)


@pytest.fixture(scope="session")
def submitted(measured_costs):
    """A student's repository, made once: make submission STUDENT="Ann Lee" (its bench given this machine's
    measured costs), student.md answered, make submission-report and a commit of submission/. Returns (the
    repository, make submission's CompletedProcess, the PDF's first page before the answers, the manifest before
    the report was typeset again); clone the repository to change anything."""
    def submit(work):
        repo = clone(REPO, work / "repo", "Ann")
        (repo / "submission/results/lstm").mkdir(parents=True)
        shutil.copy(measured_costs / "bench-costs.json", repo / "submission/results/lstm")
        (repo / "submission/results/lstm/verify-parallax-local.json").write_text("{}")  # an earlier attempt's
        made = make("submission", *SUBMISSION_TINY, "STUDENT=Ann Lee", cwd=repo)
        assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
        first_page = PdfReader(repo / "submission/report/report.pdf").pages[0].extract_text()
        before = json.loads((repo / "submission/manifest.json").read_text())
        answer(repo / "submission/student.md")
        again = make("submission-report", cwd=repo)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        commit(repo, "submission")
        (work / "made.json").write_text(json.dumps([made.stdout, made.stderr, first_page, before]))
    work = made_once("submission", submit)
    stdout, stderr, first_page, before = json.loads((work / "made.json").read_text())
    return work / "repo", subprocess.CompletedProcess([], 0, stdout, stderr), first_page, before


def copy_verified(verified, work, names):
    """Copy the session's verify runs into `work` as the module's own: {name here: verify's run} of checkpoints
    (ckpt/<name>) and results (results/<name>.json, .jsonl)."""
    (work / "results").mkdir(exist_ok=True)
    for name, run in names.items():
        shutil.copytree(verified / f"checkpoints/verify/{run}", work / f"ckpt/{name}")
        for suffix in (".json", ".jsonl"):
            shutil.copy(verified / f"results/verify-{run}{suffix}", work / f"results/{name}{suffix}")


def train_reference(flags, workers, ckpt_dir, cwd):
    """run.py --emulate_workers=W with `flags`: the reference a W-worker run must match, its checkpoint in
    `ckpt_dir` and its results in `cwd`/results. Trained once per session for each (flags, W), then copied:
    it is deterministic, so a copy is what training it again would write."""
    def train(trained):
        result = run_script("run.py", *flags, f"--emulate_workers={workers}", "--run_name=reference",
                            "--ckpt_dir=ckpt", cwd=trained)
        assert result.returncode == 0, result.stderr
    key = hashlib.sha256(json.dumps([list(flags), workers]).encode()).hexdigest()[:12]
    trained = made_once(f"reference-{key}", train)
    shutil.copytree(trained / "ckpt", os.path.join(cwd, ckpt_dir), dirs_exist_ok=True)
    shutil.copytree(trained / "results", os.path.join(cwd, "results"), dirs_exist_ok=True)


def launch(architecture, *flags, cwd, env=None, **popen):
    """The launcher, as `make run-tf` and `make run-horovod` start it: python -m launcher ARCH FLAGS."""
    command = [sys.executable, "-m", "launcher", architecture, *flags]
    # Ctrl-C as at a terminal, even when the suite itself runs in the background (which ignores SIGINT, and
    # the launcher would inherit that).
    return subprocess.Popen(command, cwd=cwd, env={**os.environ, "PYTHONPATH": REPO, **(env or {})}, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **popen)


def launch_and_wait(architecture, *flags, cwd):
    """Runs the launcher to the end; returns its combined output, asserting success."""
    process = launch(architecture, *flags, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output
    return output


def processes_with(marker):
    """PIDs of processes whose command line contains `marker` (the test's own excepted)."""
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found if int(pid) != os.getpid()]


@contextlib.contextmanager
def long_run(architecture, marker, cwd, *launcher_flags, runner_flags=()):
    """A 2-worker run through the launcher that would train for ever, named `marker`, from the moment its
    chief has logged step 10; killed at the end of the block if it is still running."""
    process = launch(architecture, "--workers=2", *launcher_flags, "--", "--config=tiny", "--steps=1000000",
                     "--log_every=10", f"--run_name={marker}", *runner_flags, cwd=cwd, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)
    try:
        while "[worker0] [run_" not in (line := process.stdout.readline()) or " step 10/" not in line:
            assert process.poll() is None, process.stderr.read()
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def kill_a_task_mid_run(architecture, victim, is_victim, cwd, *launcher_flags):
    """Starts a long run through the launcher, SIGKILLs the task for which is_victim(pid, argv) holds once
    training has begun, and checks that the run goes down: launcher exit 1 within 60 s, naming the task, no
    process left, no final checkpoint."""
    marker = f"{architecture}-kill-{victim}-{os.getpid()}"
    with long_run(architecture, marker, cwd, *launcher_flags) as process:
        argv = {pid: open(f"/proc/{pid}/cmdline").read().split("\0") for pid in processes_with(marker)}
        victims = [pid for pid in argv if is_victim(pid, argv[pid])]
        assert len(victims) == 1, argv
        os.kill(victims[0], signal.SIGKILL)
        process.wait(timeout=60)
    assert process.returncode == 1
    assert re.search(rf"task {victim}( on \S+)? was killed by signal 9", process.stderr.read())
    assert no_process_left(marker)
    assert not glob.glob(os.path.join(str(cwd), "checkpoints", "*", "checkpoint"))
    assert not os.path.exists(os.path.join(str(cwd), "results", marker + ".json"))


def no_process_left(marker, seconds=10):
    """Whether every process whose command line contains `marker` is gone within `seconds` (tasks on other
    hosts are stopped by their hosts, moments after the launcher)."""
    deadline = time.monotonic() + seconds
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return processes_with(marker) == []


def is_task(job, index):
    """is_victim for kill_a_task_mid_run: the parameter-server runners' task `job` `index`."""
    return lambda pid, argv: f"--job_name={job}" in argv and f"--task_index={index}" in argv


def launcher_usage_error(architecture, flags, cwd):
    """The launcher's result for bad input, as a CompletedProcess, after checking that it started no task."""
    process = launch(architecture, *flags, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = process.communicate(timeout=120)
    assert stdout == ""
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def checkpoint_tensors(directory):
    """{name: array} of the latest checkpoint in `directory`."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(directory)))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.fixture
def assert_usage_error():
    """Checks a run that got bad input: exit status 2, one line naming the problem, no traceback."""
    def check(result, *words):
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert "Traceback" not in result.stderr
        for word in words:
            assert word in lines[0], lines[0]
    return check


def bit_identical(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


np.set_printoptions(precision=10)


def wait_until_listening(server, address, port, why_not):
    """Waits up to 10 s for `server` (a Popen) to accept connections at address:port; fails with why_not()."""
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((address, port), timeout=1).close()
            return
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, why_not()
            time.sleep(0.1)


@pytest.fixture(scope="session")
def ssh_config(tmp_path_factory):
    """A real OpenSSH server of the tests' own, on a free port of 127.0.0.1 and 127.0.0.2 (two hosts on this
    machine), with its own host key and client key; returns an ssh_config(5) file that reaches it (and
    127.0.0.3, where nothing listens)."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    assert os.path.exists(sshd), "no sshd: make setup installs openssh-server"
    directory = tmp_path_factory.mktemp("sshd")
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(directory / key)], check=True)
    (port,) = free_ports(1)
    (directory / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
ListenAddress 127.0.0.2
HostKey {directory}/host_key
AuthorizedKeysFile {directory}/client_key.pub
PidFile {directory}/sshd.pid
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
""")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
    with open(directory / "sshd.log", "w") as log:
        server = subprocess.Popen([sshd, "-D", "-e", "-f", str(directory / "sshd_config")], stderr=log)
    wait_until_listening(server, "127.0.0.2", port, lambda: (directory / "sshd.log").read_text())
    config = directory / "ssh_config"
    config.write_text(f"""Host 127.0.0.1 127.0.0.2 127.0.0.3 127.0.0.4
  Port {port}
  IdentityFile {directory}/client_key
  IdentitiesOnly yes
  UserKnownHostsFile {directory}/known_hosts
  StrictHostKeyChecking no
  LogLevel ERROR
""")
    yield str(config)
    server.terminate()
    server.wait()


@pytest.fixture
def host_without_this_workdir(ssh_config, tmp_path):
    """A third host, 127.0.0.4, reached through the same ssh_config: the same sshd configuration in a mount
    namespace of its own, where an empty tmpfs hides `tmp_path`: a host that does not share the working
    directory `tmp_path` (no shared file system). Needs root (unshare -m); returns the host."""
    if os.geteuid() != 0:
        pytest.skip("a host with a file system of its own needs a mount namespace: root only")
    directory = os.path.dirname(ssh_config)
    sshd_config = open(os.path.join(directory, "sshd_config")).read()
    port = int(sshd_config.split()[1])
    own = os.path.join(directory, "sshd_config_private")
    with open(own, "w") as f:
        f.write(sshd_config.replace("ListenAddress 127.0.0.1\nListenAddress 127.0.0.2", "ListenAddress 127.0.0.4")
                .replace("sshd.pid", "sshd_private.pid"))
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    server = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               f"mount -t tmpfs tmpfs {tmp_path} && exec {sshd} -D -e -f {own}"],
                              stderr=subprocess.DEVNULL)
    wait_until_listening(server, "127.0.0.4", port, lambda: "the private sshd did not start")
    yield "127.0.0.4"
    server.terminate()
    server.wait()


def pdf_text(path):
    """The PDF's text, with runs of whitespace (line and cell breaks) as one space and without the invisible
    word joiners that keep ranges of numbers on one line."""
    text = " ".join(page.extract_text() for page in PdfReader(path).pages).replace("\u2060", "")
    return " ".join(text.split())


def without_spaces(text):
    """`text` with no whitespace at all: a full table cell may touch the next in a PDF's text
    ("8,6986,511–11,922"), so rows are compared without it on both sides."""
    return "".join(text.split())
