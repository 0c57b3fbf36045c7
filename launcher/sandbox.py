"""A sandbox for code the TA did not write (make grade): bubblewrap around one command (docs/submission.md).

Inside: the system's programs and libraries, Python and the folders named, read-only; the folders the command
writes, writable; a private /tmp, which is also $HOME; a network of its own with a loopback and nothing else;
process IDs of its own, so nothing it starts outlives it (what is left running is named, then stopped); each
process's address space capped; the whole stopped at a time limit. bubblewrap needs no root where user namespaces
are on."""
import os
import resource
import shutil
import signal
import subprocess
import sys

from harness import UsageError

# The few files of /etc that programs read; the rest (ssh host keys, shadow) stays out.
ETC = ("alternatives", "group", "host.conf", "hosts", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
       "nsswitch.conf", "openmpi", "passwd", "ssl")
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/sys")
# The environment passed in, by name or prefix; the TA's tokens and paths stay out.
KEPT = ("PATH", "LANG", "LC_ALL", "TZ", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "PYTHONPATH")
KEPT_PREFIXES = ("TF_", "HOROVOD_", "LSTM_DIST_")
# Namespaces of its own: a network with a loopback only; process IDs, its shell the first (--as-pid-1: no init of
# bubblewrap's left unreaped), so that shell's end stops everything inside; IPC; and the host name localhost (a
# cluster node's name resolves outside it, and Horovod's Gloo binds to the address of the host's name).
ISOLATION = ("--unshare-net", "--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts", "--hostname",
             "localhost", "--new-session", "--die-with-parent")
# That shell, the command's parent: after the command ends, every process still running is named.
REAPER = ('"$@"; status=$?; for d in /proc/[0-9]*; do [ "${d#/proc/}" = $$ ] && continue; '
          'c=$(tr "\\0" " " < "$d/cmdline" 2>/dev/null); [ -n "$c" ] && echo "sandbox: left running, stopped: $c" >&2; '
          'done; exit $status')
TIMED_OUT = 124  # as timeout(1) exits


def symlinks(path):
    """The symbolic links met while resolving `path`, in order: (link, its target), each link's folder real."""
    found, real = [], "/"
    for part in os.path.abspath(path).split("/")[1:]:
        candidate = os.path.join(real, part)
        if os.path.islink(candidate):
            target = os.readlink(candidate)
            found += [(candidate, target), *symlinks(os.path.join(real, target))]
        real = os.path.realpath(candidate)
    return found


def unavailable():
    """Why no sandbox can start here (no bubblewrap, or it fails to start one), or None."""
    if not shutil.which("bwrap"):
        return "bubblewrap is not installed (sudo apt-get install bubblewrap)"
    tried = Sandbox([], [], seconds=60).run(["true"], cwd="/", capture_output=True, text=True)
    if tried.returncode:
        return f"bubblewrap cannot start a sandbox here: {(tried.stderr.strip().splitlines() or ['?'])[-1]}"
    return None


class Sandbox:
    """The sandbox of one command: `readable` folders read-only, `writable` ones (made if missing) writable, each
    process's address space capped at `memory_gib`, the whole stopped after `seconds`; `setenv` more variables."""

    def __init__(self, readable, writable, memory_gib=16, seconds=3600, setenv=None):
        self.readable, self.writable = list(readable), list(writable)
        self.memory_gib, self.seconds, self.setenv = memory_gib, seconds, dict(setenv or {})

    def mounts(self, reached=()):
        """bubblewrap's mount arguments: system, Python, the readable folders, then the writable ones over them;
        the paths `reached` (a program's) lead where they lead outside."""
        found = ["--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc"]
        found += [arg for path in SYSTEM if os.path.exists(path) for arg in ("--ro-bind", path, path)]
        found += [arg for name in ETC if os.path.exists(f"/etc/{name}")
                  for arg in ("--ro-bind", f"/etc/{name}", f"/etc/{name}")]
        python = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
        for path in sorted(python) + [os.path.realpath(p) for p in self.readable]:
            found += ["--ro-bind", path, path]
        for path in self.writable:
            os.makedirs(path, exist_ok=True)
            found += ["--bind", os.path.realpath(path), os.path.realpath(path)]
        # A path reached through links that lie outside every mounted folder (a .venv linked to a shared one):
        # the links made again inside, so that the same path leads to the same place.
        mounted = [*SYSTEM, *python, *map(os.path.realpath, self.readable + self.writable)]
        for link, target in dict(link for path in (sys.executable, sys.prefix, *reached, *self.readable, *self.writable)
                                 for link in symlinks(path)).items():
            if not any(link == top or link.startswith(top.rstrip("/") + "/") for top in mounted):
                found += ["--symlink", target, link]
        return found

    def environment(self):
        """bubblewrap's arguments for the command's environment: the kept variables, HOME the private /tmp."""
        kept = {name: value for name, value in os.environ.items()
                if name in KEPT or name.startswith(KEPT_PREFIXES)}
        return ["--clearenv", *[arg for name, value in sorted({**kept, "HOME": "/tmp", **self.setenv}.items())
                                for arg in ("--setenv", name, value)]]

    def command(self, argv, cwd=None):
        """The command line that runs `argv` in this sandbox, in `cwd` (a mounted folder; default: the first
        writable one, else the first readable)."""
        cwd = cwd or (self.writable or self.readable or ["/"])[0]
        user = [] if os.geteuid() == 0 else ["--unshare-user"]
        program = [argv[0]] if os.sep in argv[0] else []
        return ["bwrap", *self.mounts(program), *self.environment(), *user, *ISOLATION, "--chdir",
                os.path.realpath(cwd), "sh", "-c", REAPER, "sh", *argv]

    def limit(self):
        """In the child before bubblewrap starts: the address-space cap, inherited by every process inside (never
        above the cap this process already has)."""
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = self.memory_gib << 30 if hard == resource.RLIM_INFINITY else min(self.memory_gib << 30, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    def run(self, argv, cwd=None, capture_output=False, text=False):
        """Run `argv` in the sandbox and return its CompletedProcess; exit status TIMED_OUT when stopped at the
        time limit (the whole sandbox then stopped: the caller names it)."""
        pipe = subprocess.PIPE if capture_output else None
        process = subprocess.Popen(self.command(argv, cwd), preexec_fn=self.limit, start_new_session=True,
                                   stdout=pipe, stderr=pipe, text=text)
        try:
            out, err = process.communicate(timeout=self.seconds)
            status = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # bubblewrap: the namespace's processes die with it
            out, err = process.communicate()
            status = TIMED_OUT
        return subprocess.CompletedProcess(argv, status, out, err)


def check():
    """A UsageError naming why no sandbox can start here."""
    why = unavailable()
    if why:
        raise UsageError(f"no sandbox for the student's code: {why}; TRUST=1 runs it without one, with your rights")
