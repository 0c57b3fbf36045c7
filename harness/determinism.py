"""TensorFlow settings that make two identical runs give bit-identical parameters."""
import tensorflow as tf


def session_config(args):
    """The session configuration of every process of a run.

    Op determinism rules out kernels with non-deterministic reductions. Fixed thread counts fix the
    summation order of multi-threaded reductions (it depends on the number of threads), so the runs to be
    compared must use the same counts. (TF_ENABLE_ONEDNN_OPTS=0 is set when `harness` is imported.)"""
    tf.config.experimental.enable_op_determinism()
    return tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.intra_op_threads,
                                    inter_op_parallelism_threads=args.inter_op_threads)
