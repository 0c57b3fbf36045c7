"""TensorFlow settings that make identical runs, and differently built graphs of one computation, train the same bits.
Import it before TensorFlow, which reads them when it loads; docs/architecture.md, "Determinism"."""
import os
import sys

if "tensorflow.python" in sys.modules:  # loaded, not merely deferred (the launcher's, harness/launch.py)
    raise ImportError("import harness.determinism before tensorflow: it fixes TensorFlow's kernels")
# oneDNN's kernels order their sums by shape and thread count: every process must use plain Eigen kernels.
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
# Op determinism, as tf.config.experimental.enable_op_determinism() turns it on: read before any op is built
# (some, the softmax cross-entropy, choose their kernel when they are created).
os.environ["TF_DETERMINISTIC_OPS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def session_config(args):
    """The session configuration of every process: fixed thread counts fix the order of sums, and Grappler's
    arithmetic optimiser is off because it regroups sums by the whole graph's shape."""
    import tensorflow as tf  # here: the launcher imports this module and never TensorFlow
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.intra_op_threads,
                                      inter_op_parallelism_threads=args.inter_op_threads)
    rewrites = config.graph_options.rewrite_options
    rewrites.arithmetic_optimization = rewrites.OFF
    return config
