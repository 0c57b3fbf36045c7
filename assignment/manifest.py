"""A submission's manifest (submission/manifest.json): what ties its results to the code that made them (the
commit, every file that differed from it, the model file's digest), the digest of every file it holds, who made
it, the commands run, and the environment of every host that ran a task. make grade checks a submission against
it."""
import glob
import hashlib
import os
import subprocess

from harness import REPO, UsageError, results

FILE = "manifest.json"


def digest(path):
    """The SHA-256 of a file's bytes (of a symbolic link's target's name, as git keeps it), or None when there is
    no such file."""
    if os.path.islink(path):
        return hashlib.sha256(os.readlink(path).encode()).hexdigest()
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except FileNotFoundError:
        return None


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout


def head():
    """The repository's current commit; a UsageError where there is none (no git, or a copy without history)."""
    try:
        return git("rev-parse", "HEAD").strip()
    except (OSError, subprocess.CalledProcessError):
        raise UsageError(f"{REPO} is not a git repository with a commit: a submission is tied to one (clone it, or "
                         f"git init and commit)") from None


def changed_files(commit, outside):
    """{path: digest now} of every file of the repository that differs from `commit` (tracked and changed, or new
    and not ignored), `outside` (the submission's own directory, relative to the repository) left out; a deleted
    file's digest is None."""
    excluded = [f":(exclude){outside}"] if outside else []
    names = git("diff", "--name-only", "-z", commit, "--", ".", *excluded).split("\0")
    names += git("ls-files", "--others", "--exclude-standard", "-z", "--", ".", *excluded).split("\0")
    return {name: digest(os.path.join(REPO, name)) for name in sorted(set(names)) if name}


def tracked(path):
    """Whether git tracks `path` (relative to the repository)."""
    return subprocess.run(["git", "-C", REPO, "ls-files", "--error-unmatch", "--", path],
                          capture_output=True).returncode == 0


def files_under(directory, folder):
    """{path relative to `directory`: SHA-256} of every file under directory/folder, in order of path."""
    found = {}
    for root, _, names in os.walk(os.path.join(directory, folder)):
        for name in names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, directory)] = digest(path)
    return dict(sorted(found.items()))


def submitter(name):
    """Who makes the submission: `name` (make submission STUDENT=) and git's user, who will commit it."""
    def config(key):
        return subprocess.run(["git", "-C", REPO, "config", key], capture_output=True, text=True).stdout.strip()
    return {"student": name or None, "git_user": f"{config('user.name')} <{config('user.email')}>"
            if config("user.name") else None}


def in_repository(path):
    """`path` relative to the repository when it lies inside it, else None."""
    relative = os.path.relpath(os.path.abspath(path), REPO)
    return None if relative.startswith("..") else relative


def code(model_path, out):
    """The code a submission in `out` is made from: the commit, the files that differ from it (`out` aside), the
    model file (relative to the repository when inside it) and its digest."""
    commit = head()
    changed = changed_files(commit, in_repository(out))
    return {"commit": commit, "dirty": bool(changed), "changed": changed,
            "model": {"file": in_repository(model_path) or os.path.abspath(model_path), "sha256": digest(model_path)}}


def hosts(results_dir):
    """Every host that ran a task of the runs in `results_dir`, by host name: its environment and its runs. The
    launcher's <run>.hosts.json name a distributed run's hosts; a run without one (run.py) ran on this machine, as
    its summary records."""
    found = {}

    def add(environment, run):
        name = environment.get("hostname") or (environment.get("hostnames") or ["?"])[0]
        entry = found.setdefault(name, {"environment": environment, "runs": []})
        if run not in entry["runs"]:
            entry["runs"].append(run)
    recorded = set()
    for path in sorted(glob.glob(os.path.join(results_dir, "**", "*.hosts.json"), recursive=True)):
        record = results.read_json(path, "hosts")
        recorded.add(record["run"])
        for host in record["hosts"]:
            add(host["environment"], record["run"])
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        summary = results.read_json(path)
        if isinstance(summary, dict) and "environment" in summary and "runner" in summary:
            run = os.path.basename(path)[:-len(".json")]
            if run not in recorded:
                add(summary["environment"], run)
    return [{"host": name, **entry} for name, entry in found.items()]
