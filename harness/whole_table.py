"""How a partitioned variable is checkpointed: as one tensor, so that a checkpoint depends on no partitioning."""
from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import tensorflow as tf  # noqa: E402
from tensorflow.python.training.saving import saveable_object  # noqa: E402

from harness.partitioning import join_rows, part_rows, split_rows  # noqa: E402


class WholeTable(saveable_object.SaveableObject):
    """A partitioned variable saved as one tensor, its parts joined in row order; restoring splits it back."""

    def __init__(self, parts, strategy, name):
        self.parts, self.strategy = parts, strategy
        whole = join_rows([part.read_value() for part in parts], strategy)
        super().__init__(whole, [saveable_object.SaveSpec(whole, "", name)], name)

    def restore(self, restored_tensors, restored_shapes):
        rows = split_rows(restored_tensors[0], part_rows(sum(part.shape[0] for part in self.parts),
                                                         len(self.parts), self.strategy))
        return tf.group(*[part.assign(value) for part, value in zip(self.parts, rows)])
