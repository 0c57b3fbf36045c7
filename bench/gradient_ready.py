"""When, within run.py's step on one device, each variable's gradient is ready: the fraction of the step (its
first op's start to its last op's end, the update included) at which the op that yields the gradient ends, from
TensorFlow's step statistics (a traced session.run), the median over --traced_steps steps after the warm-up.
The bound lets a gradient's exchange start then, while the backward pass goes on (docs/bench.md): Horovod
allreduces each gradient as it is ready, and a worker's send of a gradient to its server is an op that runs as
soon as its input is. Prints one JSON line: {"ready": {variable: fraction}, "traced_step_seconds": median}.

    python -m bench.gradient_ready --config=small
"""
import json
import statistics

import harness.determinism  # (first: it fixes TensorFlow's kernels)
from harness import data, determinism, flags
from harness.training import StepFeed
import tensorflow as tf

from bench import bare_loop


def gradient_ops(gradients):
    """{name of the op that yields each variable's gradient: the variable's name}."""
    return {(g.values if isinstance(g, tf.IndexedSlices) else g).op.name: name for name, g in gradients.items()}


def ready_fractions(step_stats, ops):
    """{variable: fraction of the traced step at which its gradient's op ended}, and the step's seconds."""
    nodes = [node for device in step_stats.dev_stats for node in device.node_stats]
    start = min(node.all_start_micros for node in nodes)
    end = max(node.all_start_micros + node.all_end_rel_micros for node in nodes)
    ended = {node.node_name: node.all_start_micros + node.op_end_rel_micros for node in nodes}
    return {name: (ended[op] - start) / (end - start) for op, name in ops.items()}, (end - start) / 1e6


def main():
    parser = flags.parser("gradient_ready", __doc__)
    flags.DEFINE_integer("traced_steps", 6, "steps traced after the warm-up", lower_bound=1, flag_values=parser)
    args = flags.parse(parser)
    config = flags.model_config(args)
    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(config, data.load(args, config), rows=slice(None))
    fetches, gradients = bare_loop.train_step(config, args.seed, feed)
    ops = gradient_ops(gradients)
    trace = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    fractions, seconds, state = [], [], None
    with tf.compat.v1.Session(config=determinism.session_config(args)) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        for step in range(args.warmup_steps + args.traced_steps):
            metadata = tf.compat.v1.RunMetadata()
            _, state, _ = session.run(fetches, feed(step, state),
                                      options=trace if step >= args.warmup_steps else None, run_metadata=metadata)
            if step >= args.warmup_steps:
                ready, step_seconds = ready_fractions(metadata.step_stats, ops)
                fractions.append(ready)
                seconds.append(step_seconds)
    print(json.dumps({"ready": {name: statistics.median(f[name] for f in fractions) for name in ops.values()},
                      "traced_step_seconds": statistics.median(seconds)}))


if __name__ == "__main__":
    harness.main(main)
