"""TensorFlow settings that make two identical runs, and different graphs of the same computation (one
process emulating W workers, W worker processes), give bit-identical parameters.

Import it before TensorFlow: it chooses TensorFlow's kernels, which TensorFlow reads when it loads.
"""
import os
import sys

# oneDNN's CPU kernels choose their summation order by shape and thread count; every process of every runner
# must use the same plain Eigen kernels. The variable is read when TensorFlow loads, so it is set here.
if "tensorflow" in sys.modules:
    raise ImportError("import harness.determinism before tensorflow: it fixes TensorFlow's kernels")
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from tensorflow.core.protobuf import rewriter_config_pb2  # noqa: E402

# Before any graph is built: some ops choose their implementation when they are created (with determinism
# on, the softmax cross-entropy is built from LogSoftmax and Gather instead of its fused kernel), so a graph
# built before this line computes other bits than one built after it.
tf.config.experimental.enable_op_determinism()


def session_config(args):
    """The session configuration of every process of a run. Fixed thread counts fix the order of multi-threaded
    sums; Grappler's arithmetic optimiser is off because it regroups sums by the shape of the whole graph, so
    run.py's W-shard graph and a worker's own would give the same computation other bits."""
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.intra_op_threads,
                                      inter_op_parallelism_threads=args.inter_op_threads)
    config.graph_options.rewrite_options.arithmetic_optimization = rewriter_config_pb2.RewriterConfig.OFF
    return config
