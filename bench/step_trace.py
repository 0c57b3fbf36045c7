"""When run.py's one-device step first reads each variable and when each gradient is ready, as fractions of the
step, from TensorFlow's step statistics (median over --traced_steps steps after the warm-up); docs/bench.md says
how the model uses them. Prints one JSON line:
{"needed": {variable: fraction}, "ready": {variable: fraction}, "traced_step_seconds": median}

    python -m bench.step_trace --config=small
"""
import json
import statistics

import harness.determinism  # (first: it fixes TensorFlow's kernels)
from harness import determinism, flags, models
from harness.training import StepFeed
import tensorflow as tf

from bench import bare_loop

PASS_THROUGH = ("ReadVariableOp", "Identity")  # a read, not a use: the step needs the variable at their readers


def gradient_ops(gradients):
    """{variable's name: the op that yields its gradient, then the ops it passes through identities from (Grappler
    may remove an identity: a while loop's gradient leaves by one)}."""
    found = {}
    for name, g in gradients.items():
        op = (g.values if isinstance(g, tf.IndexedSlices) else g).op
        found[name] = [op.name]
        while op.type in PASS_THROUGH and op.inputs:
            op = op.inputs[0].op
            found[name].append(op.name)
    return found


def reader_ops(variables):
    """{name of an op that uses a variable's value: the variable's name}, through reads and identities (a
    partitioned variable's parts count as the variable)."""
    found = {}
    for name, parts in variables.items():
        todo = [part.op for part in tf.nest.flatten(parts)]
        while todo:
            for reader in (c for output in todo.pop().outputs for c in output.consumers()):
                if reader.type in PASS_THROUGH:
                    todo.append(reader)
                else:
                    found[reader.name] = name
    return found


def fractions(step_stats, ready_ops, readers):
    """({variable: when its first reader started}, {variable: when its gradient's op ended, the first of
    ready_ops' that ran; none: the step's end}, the step's seconds); times are fractions of the step, first op's
    start to last op's end."""
    nodes = [node for device in step_stats.dev_stats for node in device.node_stats]
    start = min(node.all_start_micros for node in nodes)
    end = max(node.all_start_micros + node.all_end_rel_micros for node in nodes)
    needed = {}
    for node in nodes:
        # a reader or a node within it: Grappler lowers a while loop into nodes named under the loop's
        parts = node.node_name.split("/")
        reader = next((r for r in ("/".join(parts[:k]) for k in range(len(parts), 0, -1)) if r in readers), None)
        if reader is not None:
            name = readers[reader]
            needed[name] = min(needed.get(name, end), node.all_start_micros)
    ended = {node.node_name: node.all_start_micros + node.op_end_rel_micros for node in nodes}
    ready = {name: next((ended[op] for op in ops if op in ended), end) for name, ops in ready_ops.items()}
    return ({name: (at - start) / (end - start) for name, at in needed.items()},
            {name: (at - start) / (end - start) for name, at in ready.items()}, (end - start) / 1e6)


def main():
    parser = flags.parser("step_trace", __doc__)
    flags.DEFINE_integer("traced_steps", 6, "steps traced after the warm-up", lower_bound=1, flag_values=parser)
    args = flags.parse(parser)
    model, config = models.from_flags(args)
    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(model, config, model.data(config, args.data_path, args.seed), rows=slice(None))
    fetches, variables, gradients = bare_loop.train_step(model, config, args.seed, feed)
    ready_ops, readers = gradient_ops(gradients), reader_ops(variables)
    trace = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    traced, state = [], None
    with tf.compat.v1.Session(config=determinism.session_config(args)) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(tf.compat.v1.tables_initializer())  # the model's lookup tables (a Keras StringLookup's)
        for step in range(args.warmup_steps + args.traced_steps):
            metadata = tf.compat.v1.RunMetadata()
            _, state, _ = session.run(fetches, feed(step, state),
                                      options=trace if step >= args.warmup_steps else None, run_metadata=metadata)
            if step >= args.warmup_steps:
                traced.append(fractions(metadata.step_stats, ready_ops, readers))
    print(json.dumps({kind: {name: statistics.median(t[k][name] for t in traced) for name in gradients}
                      for k, kind in enumerate(("needed", "ready"))}
                     | {"traced_step_seconds": statistics.median(t[2] for t in traced)}))


if __name__ == "__main__":
    harness.main(main)
