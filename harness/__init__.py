"""What every runner shares: flags, data and sharding, determinism, the throughput timer, the recorder.
It loads no TensorFlow, as the launcher and the report import it; a runner imports harness.determinism first."""
import os
import re
import resource
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the runners, models/, docs/


# How a Horovod collective's failure reads once a rank has died: its library's words, or Gloo's lost connection.
HOROVOD_FAILED = ("Horovod has been shut down", "gloo/transport/tcp/")


class UsageError(Exception):
    """Bad input or environment: reported as one line, exit status 2."""


# The line every program ends with; the launcher gathers its tasks' into one (tasks.run_tasks).
PEAK_MEMORY = re.compile(r"^\S+: peak resident memory ([\d,]+) MiB$")


def peak_resident_bytes():
    """Return this process's peak resident memory so far, in bytes (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def program_name():
    """How the user started this program: "run_tf.py", "python -m bench.run", or a repository path ("bench/run.py")."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec:
        return f"python -m {spec.name.removesuffix('.__main__')}"
    script = os.path.relpath(os.path.abspath(sys.argv[0]), REPO)
    return os.path.basename(sys.argv[0]) if script.startswith("..") else script


def main(entry_point):
    """Run a runner's main(): a UsageError, or an error a model file's own code raised, is one line on stderr and
    exit 2, a dead Horovod peer one line and exit 1, Ctrl-C exit 130; then print peak memory."""
    prog = program_name()
    for stream in (sys.stdout, sys.stderr):  # a line in one write: mpirun --tag-output tags each write it reads
        stream.reconfigure(line_buffering=True, write_through=False)
    try:
        status = entry_point()
    except UsageError as error:
        for line in str(error).splitlines():  # several problems (the preflight's): a line each
            print(f"{prog}: error: {line}", file=sys.stderr)
        exit_now(2)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as error:
        if any(words in str(error) for words in HOROVOD_FAILED):  # a rank died; the launcher names it
            print(f"{prog}: stopping: a Horovod collective failed, a rank is gone", file=sys.stderr)
            exit_now(1)
        from harness import models  # (here: models imports this module)
        found = models.mistake(error)
        if found is None:
            raise
        print(f"{prog}: error: {found}", file=sys.stderr)  # the model file's mistake: its line, not our frames
        exit_now(2)
    print(f"{prog}: peak resident memory {peak_resident_bytes() / 2**20:,.0f} MiB", file=sys.stderr, flush=True)
    horovod = sys.modules.get("horovod.tensorflow")
    if horovod is not None and horovod.is_initialized():
        horovod.shutdown()  # with the other ranks; under mpirun it finalizes MPI
    exit_now(status or 0)


def exit_now(status):
    """Exit without the interpreter's teardown, which takes about a second once TensorFlow is loaded: every file
    is closed by now, and every child stopped."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
