"""Compares TensorFlow checkpoints variable by variable; see checkpoints_compare.compare."""
from checkpoints_compare.compare import DEFAULT_ATOL, DEFAULT_RTOL, CheckpointError, compare, load, non_finite

__all__ = ["CheckpointError", "DEFAULT_ATOL", "DEFAULT_RTOL", "compare", "load", "non_finite"]
