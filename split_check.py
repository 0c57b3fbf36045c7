"""Whether a model's loss is a mean over the rows of the global batch, as every runner needs it to be: one step's
gradient computed as one worker and as W workers' shards (run.py --emulate_workers), compared per variable relative
to the largest gradient of any variable. Rounding moves it by about 1e-7; a loss divided by a count of its shard
(a mean of the workers' means) by far more. A variable whose true gradient is zero (a key bias before a softmax)
cannot look wrong here, as it can in the parameters after a step of Adam, which scales its noise up to the rate.

    python split_check.py --model=yours.py --config=tiny          # W = 1 against W = 2
    python split_check.py --model=yours.py --emulate_workers=4
"""
import harness.determinism  # first: it fixes TensorFlow's kernels before TensorFlow loads
import harness
from harness import determinism, models, reduction, runner_flags, update
from harness.training import StepFeed
from harness.variables import Params
import numpy as np
import run
import tensorflow as tf

TOLERANCE = 1e-5  # of the largest gradient: a hundred times float32's rounding of a sum
SHOWN = 8  # the variables the table shows, the farthest first


def global_gradients(params, feed, seed, num_workers):
    """The global batch's gradient of each variable, dense, computed as `num_workers` workers."""
    _, _, gradients = run.worker_gradients(params, feed, seed, num_workers)
    averaged = reduction.workers_mean(gradients)
    return [update.dense(g, variable) for g, variable in zip(averaged, params.variable_list)]


def main():
    args = runner_flags.parse("run", __doc__)
    model, config = models.from_flags(args)
    workers = max(2, args.emulate_workers)
    batches = model.data(config, args.data_path, args.seed)

    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(model, config, batches, rows=slice(None))
    params = Params(model, config, args.seed)
    one, many = (global_gradients(params, feed, args.seed, w) for w in (1, workers))
    with tf.compat.v1.Session(config=determinism.session_config(args)) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(tf.compat.v1.tables_initializer())  # the model's lookup tables (a Keras StringLookup's)
        one, many = session.run([one, many], feed(0, None))
    largest = max(float(np.abs(g).max()) for g in one) or 1.0
    moved = sorted(((float(np.abs(a - b).max()) / largest, name) for name, a, b in zip(params.variables, one, many)),
                   reverse=True)
    print(f"split_check: model {models.name_of(model)}, {config.name} config: step 0's gradient at W = 1 and "
          f"W = {workers}, largest gradient {largest:.3g}")
    print(f"{'variable':<60} {'max |diff| / largest':>22}")
    for share, name in moved[:SHOWN]:
        print(f"{name:<60} {share:>22.3g}")
    worst = [name for share, name in moved if share > TOLERANCE]
    if worst:
        print(f"split_check: FAILED: splitting the batch moves {', '.join(worst[:4])}"
              f"{f' and {len(worst) - 4} more' if len(worst) > 4 else ''} by more than {TOLERANCE:g} of the largest "
              f"gradient: the loss is not a mean over the global batch (a count over the shard? return (sum, count); "
              f"or a row's output depends on the other rows of its batch, as a sum over the batch's axis; "
              f"docs/your-model.md, section 4)")
        return 1
    print(f"split_check: PASSED: within {moved[0][0]:.2g} of the largest gradient (rounding): the loss is a mean "
          f"over the global batch")
    return 0


if __name__ == "__main__":
    harness.main(main)
