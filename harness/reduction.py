"""One order of addition (docs/architecture.md, "One gradient, one order"): the W workers' gradients of a variable
added in rank order, ((g0 + g1) + g2) + ..., then divided by W; a sparse gradient's rows concatenated in rank order
and each index's rows added in that order. The reference, the parameter servers and the allreduce runners' exact
reduction all add so, which makes them identical at any W; Horovod's own allreduce adds in its ring's order."""
from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import tensorflow as tf  # noqa: E402

from harness.variables import deduplicate  # noqa: E402


def concatenate_slices(slices):
    """tf.IndexedSlices of one variable, their rows concatenated in order."""
    return tf.IndexedSlices(tf.concat([g.values for g in slices], 0), tf.concat([g.indices for g in slices], 0),
                            slices[0].dense_shape)


def sparse_mean(concatenated, divisor):
    """Each index's rows of `concatenated` added in their order, then divided by `divisor`."""
    summed = deduplicate(concatenated)
    return tf.IndexedSlices(summed.values / divisor if divisor != 1 else summed.values, summed.indices,
                            summed.dense_shape)


def mean(gradients, divisor):
    """One variable's gradients, in rank order, added in that order and divided by `divisor`."""
    if isinstance(gradients[0], tf.IndexedSlices):
        return sparse_mean(concatenate_slices(gradients), divisor)
    return sum(gradients[1:], gradients[0]) / divisor  # an explicit chain: the arithmetic optimiser is off


def workers_mean(per_worker):
    """The global batch's gradient from W workers' gradient structures, in rank order."""
    means = [mean(grads, len(per_worker)) for grads in zip(*[tf.nest.flatten(g) for g in per_worker])]
    return tf.nest.pack_sequence_as(per_worker[0], means)


def allreduce_mean(gradients, hvd, group_bytes):
    """What hvd.allreduce(g, op=hvd.Average) gives every gradient, added in rank order in TensorFlow, Horovod only
    moving bytes: the dense ones flattened into buffers (groups) of W chunks, chunk k sent to rank k by alltoall,
    each rank adding its chunk's W copies in rank order, the sums allgathered (2 (W - 1) / W of a buffer each way, a
    ring's bytes); the sparse ones allgathered in rank order, each index's rows added in that order."""
    size = hvd.size()
    dense = [g for g in gradients if not isinstance(g, tf.IndexedSlices)]
    means = iter(dense_means(dense, size, hvd, group_bytes) if dense else [])
    return [sparse_mean(tf.IndexedSlices(hvd.allgather(g.values), hvd.allgather(g.indices), g.dense_shape), size)
            if isinstance(g, tf.IndexedSlices) else next(means) for g in gradients]


def horovod_mean(gradients, hvd, args):
    """Every gradient's mean over the workers, on every worker, by the reduction --reduction names. With up to two
    workers Horovod's own allreduce gives allreduce_mean's bits (one addition commutes; halving is exact), so the
    exact reduction is Horovod's there."""
    if args.reduction == "exact" and hvd.size() > 2:
        return allreduce_mean(gradients, hvd, args.exact_group_bytes)
    return [hvd.allreduce(g, op=hvd.Average) for g in gradients]


def groups(sizes, group_bytes):
    """Indices of tensors of `sizes` bytes in groups of at least `group_bytes` (but the last), from the last tensor:
    backpropagation makes the last layers' gradients first, so a group's collectives start while the earlier
    layers' are computed."""
    found, group, size = [], [], 0
    for i in reversed(range(len(sizes))):
        group.append(i)
        size += sizes[i]
        if size >= group_bytes:
            found.append(group)
            group, size = [], 0
    return found + [group] if group else found


def dense_means(dense, size, hvd, group_bytes):
    """The dense gradients' means, group by group: each element is added in rank order whatever its group."""
    means = [None] * len(dense)
    for group in groups([g.shape.num_elements() * g.dtype.size for g in dense], group_bytes):
        for i, mean_of_i in zip(group, group_means([dense[i] for i in group], size, hvd)):
            means[i] = mean_of_i
    return means


def group_means(dense, size, hvd):
    """One group's means: its gradients in one buffer of `size` chunks, reduced as allreduce_mean says."""
    flat = tf.concat([tf.reshape(g, [-1]) for g in dense], 0)
    length = flat.shape[0]
    chunk = -(-length // size)
    chunks = tf.reshape(tf.pad(flat, [[0, chunk * size - length]]), [size, chunk])
    copies = tf.unstack(hvd.alltoall(chunks), size)  # row r: rank r's copy of this rank's chunk
    mine = sum(copies[1:], copies[0]) / size
    whole = tf.reshape(hvd.allgather(mine[tf.newaxis]), [-1])[:length]
    return [tf.reshape(part, g.shape) for part, g in zip(tf.split(whole, [g.shape.num_elements() for g in dense]),
                                                           dense)]
