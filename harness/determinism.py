"""How every process loads TensorFlow: with the settings that make identical runs, and differently built graphs of one
computation, train the same bits (docs/architecture.md, "Determinism"), and only once it is used. Import it before
TensorFlow."""
import importlib
import os
import sys
import types

if "tensorflow.python" in sys.modules:  # loaded, not merely deferred (below)
    raise ImportError("import harness.determinism before tensorflow: it fixes TensorFlow's kernels")
# oneDNN's kernels order their sums by shape and thread count: every process must use plain Eigen kernels.
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
# Op determinism, as tf.config.experimental.enable_op_determinism() turns it on: read before any op is built
# (some, the softmax cross-entropy, choose their kernel when they are created).
os.environ["TF_DETERMINISTIC_OPS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class Deferred(types.ModuleType):
    """Stands in sys.modules for a module not yet imported; the first attribute read imports it, and the stand-in
    takes its namespace. A program that rejects its flags, and the launcher, which reads a model's configs and
    shapes but never runs it, so never pay TensorFlow's seconds of CPU and hundreds of MB."""

    def __getattr__(self, name):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        module = importlib.import_module(self.__name__)
        self.__dict__.update(module.__dict__)
        return getattr(module, name)


sys.modules.setdefault("tensorflow", Deferred("tensorflow"))
import tensorflow as tf  # noqa: E402  (the stand-in, until first used)


def fix_threads(args):
    """Every device's threads as the flags say. TensorFlow makes one pool of threads per process, with its first
    device, and a Keras layer (asking for GPUs) can make that device before any session, a thread per core; the
    pool's size decides how a matrix product blocks its sums. These are read when that first device is made."""
    os.environ["TF_NUM_INTRAOP_THREADS"] = str(args.intra_op_threads)
    os.environ["TF_NUM_INTEROP_THREADS"] = str(args.inter_op_threads)


def session_config(args):
    """The session configuration of every process: fixed thread counts fix the order of sums; Grappler's
    arithmetic optimiser (it regroups sums) and its remapper (it fuses an op with its consumer, so a gradient's
    bits depend on what consumes it: the reference's sum or a runner's queue) are off, as both follow the whole
    graph's shape."""
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.intra_op_threads,
                                      inter_op_parallelism_threads=args.inter_op_threads)
    rewrites = config.graph_options.rewrite_options
    rewrites.arithmetic_optimization = rewrites.OFF
    rewrites.remapping = rewrites.OFF
    return config
