"""What a TA received (make grade SUBMISSION=): a student's repository (a path or a git URL), an archive of it, a
folder holding it, or, for the student's own self-check, a submission directory in this checkout; and the
student's files against this checkout's, the course's toolkit."""
import dataclasses
import fnmatch
import hashlib
import os
import shutil
import subprocess

from harness import REPO, UsageError
from assignment import manifest

ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")


@dataclasses.dataclass
class Received:
    source: str      # as the TA named it
    tree: str        # the student's files (this checkout for the self-check)
    submission: str  # its submission directory, holding manifest.json
    own: bool        # the self-check: a submission of this checkout, graded with this checkout's code


def is_url(source):
    return "://" in source or (":" in source and "@" in source.split(":")[0])


def unpack(source, into):
    """The tree an archive holds, unpacked into `into`: its one top folder, or `into` itself."""
    try:
        shutil.unpack_archive(source, into, filter="data")
    except (shutil.ReadError, OSError, ValueError) as error:
        raise UsageError(f"SUBMISSION={source}: cannot unpack: {error}") from None
    entries = [entry for entry in os.listdir(into) if not entry.startswith(".")]
    only = os.path.join(into, entries[0]) if len(entries) == 1 else None
    return only if only and os.path.isdir(only) else into


def clone(source, into):
    """A clone of a repository: what the student committed, nothing else."""
    cloned = subprocess.run(["git", "clone", "-q", source, into], capture_output=True, text=True)
    if cloned.returncode:
        raise UsageError(f"SUBMISSION={source}: git clone failed: {cloned.stderr.strip().splitlines()[-1]}")
    return into


def submission_in(tree, source):
    """The submission directory of a student's tree: submission/, or the one folder holding a manifest."""
    found = [name for name in ["submission"] + sorted(os.listdir(tree))
             if os.path.isfile(os.path.join(tree, name, manifest.FILE))]
    if not found:
        raise UsageError(f"SUBMISSION={source}: no submission in it (no */{manifest.FILE}: make submission writes "
                         f"submission/{manifest.FILE})")
    return os.path.join(tree, found[0])


def receive(source, into):
    """The Received of `source`, copied under `into` (emptied first) unless it is this checkout's own."""
    path = os.path.abspath(source)
    if not is_url(source) and os.path.isfile(os.path.join(path, manifest.FILE)):
        if toplevel(path) == os.path.realpath(REPO):
            return Received(source, REPO, path, own=True)
        path = os.path.dirname(path)  # a submission directory: its tree is the folder holding it
    if not is_url(source) and not os.path.exists(path):
        raise UsageError(f"SUBMISSION={source}: no such file or directory (a student's repository, a git URL, an "
                         f"archive of it, or a submission directory)")
    shutil.rmtree(into, ignore_errors=True)
    os.makedirs(into)
    if is_url(source) or os.path.isdir(os.path.join(path, ".git")):
        tree = clone(source if is_url(source) else path, os.path.join(into, "tree"))
    elif os.path.isfile(path):
        if not path.endswith(ARCHIVES):
            raise UsageError(f"SUBMISSION={source}: not an archive ({', '.join(ARCHIVES)}) or a directory")
        tree = unpack(path, os.path.join(into, "tree"))
    else:
        tree = os.path.join(into, "tree")
        shutil.copytree(path, tree, symlinks=True, ignore=shutil.ignore_patterns(".git", ".venv"))
    return Received(source, tree, submission_in(tree, source), own=False)


def toplevel(path):
    found = subprocess.run(["git", "-C", path, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    return os.path.realpath(found.stdout.strip()) if found.returncode == 0 else None


def blob(path):
    """Git's object name of a file's bytes (of a symbolic link's target's name)."""
    data = os.readlink(path).encode() if os.path.islink(path) else open(path, "rb").read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def toolkit(commit="HEAD"):
    """{path: git object name} of every file of a commit of this checkout (HEAD: the course's toolkit); {} when
    this checkout has no such commit."""
    try:
        listed = manifest.git("ls-tree", "-r", "-z", commit).split("\0")
    except subprocess.CalledProcessError:
        return {}
    return {entry.split("\t", 1)[1]: entry.split()[2] for entry in listed if entry and " blob " in entry}


def student_files(tree):
    """{path: git object name} of the student's files this checkout's .gitignore does not leave out."""
    found = {}
    for root, folders, names in os.walk(tree):
        folders[:] = [name for name in folders if name != ".git"]
        for name in names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, tree)] = blob(path)
    ignored = subprocess.run(["git", "-C", REPO, "check-ignore", "--no-index", "--stdin", "-z"],
                             input="\0".join(found), capture_output=True, text=True).stdout.split("\0")
    return {path: name for path, name in found.items() if path not in set(ignored)}


# Files that cannot change what a run computes: a student's edits of them are listed, never failed.
UNCOUNTED = ("*.md", "docs/*", "tests/*", ".ci/*", ".gitignore", "LICENSE*", "*.pdf", "*.png")


def counted(path):
    """Whether the student's version of a toolkit file can change results (code, Makefile, requirements, scripts)."""
    return not any(fnmatch.fnmatch(path, pattern) for pattern in UNCOUNTED)


def course_versions(path):
    """{git object name: the date of the newest commit that made it} of every version of `path` in this checkout's
    history: the course's releases of the file."""
    versions, date = {}, None
    for line in manifest.git("log", "--format=%x01%cs", "--raw", "--no-abbrev", "--", path).splitlines():
        if line.startswith("\x01"):
            date = line[1:]
        elif line.startswith(":"):
            versions.setdefault(line.split()[3], date)  # newest first
    return versions


@dataclasses.dataclass
class Differences:
    changed: list     # counted files the course never had in these versions: the grade fails on them
    released: dict    # {path: date} of files as an earlier release of the course's has them
    uncounted: list   # files the student edited that cannot change results (README.md, docs/)
    missing: list     # the toolkit's files the student's tree lacks
    added: list       # the student's files the toolkit does not have


def differences(tree, leave_out):
    """The student's files against this checkout's and its history, `leave_out` (paths or folders) aside."""
    ours, theirs = toolkit(), student_files(tree)

    def kept(paths):
        return sorted(path for path in paths if not any(path == out or path.startswith(out.rstrip("/") + "/")
                                                        for out in leave_out))
    differing = kept(path for path in theirs if path in ours and theirs[path] != ours[path])
    released = {path: course_versions(path).get(theirs[path]) for path in differing}
    released = {path: date for path, date in released.items() if date}
    unreleased = [path for path in differing if path not in released]
    return Differences([path for path in unreleased if counted(path)], released,
                       [path for path in unreleased if not counted(path)],
                       kept(path for path in ours if path not in theirs),
                       kept(path for path in theirs if path not in ours))
