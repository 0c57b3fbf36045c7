"""TensorFlow settings that make identical runs, and differently built graphs of one computation, train the same bits.
Import it before TensorFlow, which reads the kernel choice when it loads; docs/architecture.md, "Determinism"."""
import os
import sys

# oneDNN's kernels order their sums by shape and thread count: every process must use plain Eigen kernels.
if "tensorflow" in sys.modules:
    raise ImportError("import harness.determinism before tensorflow: it fixes TensorFlow's kernels")
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from tensorflow.core.protobuf import rewriter_config_pb2  # noqa: E402

# Before any graph is built: some ops (the softmax cross-entropy) choose their kernel when they are created.
tf.config.experimental.enable_op_determinism()


def session_config(args):
    """The session configuration of every process: fixed thread counts fix the order of sums, and Grappler's
    arithmetic optimiser is off because it regroups sums by the whole graph's shape."""
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.intra_op_threads,
                                      inter_op_parallelism_threads=args.inter_op_threads)
    config.graph_options.rewrite_options.arithmetic_optimization = rewriter_config_pb2.RewriterConfig.OFF
    return config
