"""What every runner shares: flags, data and sharding, determinism, the throughput timer and the recorder of
results. The runners (run.py, run_tf.py, run_horovod.py, run_parallax.py) import this package FIRST."""
import os
import resource
import sys

# oneDNN's CPU kernels choose their summation order by shape and thread count; every process of every runner
# must use the same plain Eigen kernels. The variable is read when TensorFlow loads, so it is set here.
if "tensorflow" in sys.modules:
    raise ImportError("import harness before tensorflow: it fixes TensorFlow's kernels for determinism")
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

# Before any graph is built: some ops choose their implementation when they are created (with determinism
# on, the softmax cross-entropy is built from LogSoftmax and Gather instead of its fused kernel), so a graph
# built before this line computes other bits than one built after it.
tf.config.experimental.enable_op_determinism()


class UsageError(Exception):
    """Bad input or environment: reported as one line, exit status 2."""


def peak_resident_bytes():
    """This process's peak resident memory so far (getrusage's ru_maxrss, in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(entry_point):
    """Runs a runner's main(): a UsageError becomes one line on stderr and exit status 2, Ctrl-C exit 130. A
    task that finishes prints its peak resident memory on stderr (every task: parameter servers too)."""
    prog = os.path.basename(sys.argv[0])
    try:
        status = entry_point()
    except UsageError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
    print(f"{prog}: peak resident memory {peak_resident_bytes() / 2**20:,.0f} MiB", file=sys.stderr, flush=True)
    sys.exit(status or 0)
