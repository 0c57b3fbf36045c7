"""How a partitioned variable's rows lie in its parts, for any runner's partitioning and for checkpoints."""
from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import tensorflow as tf  # noqa: E402


def part_rows(num_rows, partitions, strategy):
    """The whole variable's rows each part holds, as ranges: "mod" puts row i at row i // P of part i % P; "div"
    gives contiguous ranges, the first num_rows % P parts one row longer."""
    if strategy == "mod":
        return [range(p, num_rows, partitions) for p in range(partitions)]
    sizes = [num_rows // partitions + (1 if p < num_rows % partitions else 0) for p in range(partitions)]
    starts = [sum(sizes[:p]) for p in range(partitions + 1)]
    return [range(starts[p], starts[p + 1]) for p in range(partitions)]


def join_rows(parts, strategy):
    """The whole value from its parts' values (tensors with static shapes), rows in the whole's order."""
    if len(parts) == 1:
        return parts[0]
    if strategy == "div":
        return tf.concat(parts, 0)
    total, longest = sum(p.shape[0] for p in parts), parts[0].shape[0]
    padded = [tf.pad(p, [[0, longest - p.shape[0]]] + [[0, 0]] * (p.shape.rank - 1)) for p in parts]
    # Row j of part p is row j * P + p: stacking the parts on a new second axis interleaves them.
    return tf.reshape(tf.stack(padded, 1), [-1, *parts[0].shape[1:]])[:total]


def split_rows(whole, rows_of_parts):
    """The inverse of join_rows: each part's rows (`rows_of_parts`, from part_rows) of the whole value."""
    return [whole[rows.start:rows.stop:rows.step] for rows in rows_of_parts]
