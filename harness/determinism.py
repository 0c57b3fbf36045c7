"""TensorFlow settings that make two identical runs give bit-identical parameters, and different graphs of
the same computation (one process emulating W workers, W worker processes) give the same bits.
(TF_ENABLE_ONEDNN_OPTS=0 and op determinism are set when `harness` is imported, before any graph exists.)"""
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2


def session_config(args):
    """The session configuration of every process of a run.

    Fixed thread counts fix the summation order of multi-threaded reductions (it depends on the number of
    threads), so the runs to be compared must use the same counts. Grappler's arithmetic optimiser is off: it
    regroups sums (the per-time-step gradient contributions of a bias, for one) depending on the shape of the
    whole graph, so the same worker computation got other bits inside run.py's W-shard graph than in a
    worker's own graph."""
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.intra_op_threads,
                                      inter_op_parallelism_threads=args.inter_op_threads)
    config.graph_options.rewrite_options.arithmetic_optimization = rewriter_config_pb2.RewriterConfig.OFF
    return config
