"""What does the O(rows) sparse update save? The training step of run.py (one worker) with model.update as
it is, which scatters a sparse gradient into the rows it touches, against the same step with the rule it
replaced, which first summed every sparse gradient into a dense table and then updated the whole table
(`densify`). Each round runs both in turn on the same core, the first alternating (bench/pinned.py), as
bench/overhead.py does.

    python -m bench.sparse_update --config=small --steps=300 --warmup_steps=50 --rounds=4
    python -m bench.sparse_update --config=lm1b --steps=40 --warmup_steps=10 --rounds=2 --workers=2

It also counts what one worker of --workers sends per step: the bytes of its dense gradients (from the
shapes) and of its sparse gradients' rows, one per distinct word (values and int32 indices, from the rows
the first steps actually touch). Writes <results_dir>/bench-sparse-update-<config>.json; the figure is the
median over rounds of (scatter words/sec) / (dense words/sec): at least 0.97 means the scatter does not slow
the config down (exit 1 otherwise)."""
import json
import os
import statistics

from bench.bare_loop import timed_steps, train_step
from bench.pinned import CORE, in_turn
import harness.determinism  # (first: it fixes TensorFlow's kernels)
from harness import data, determinism, environment, flags, results
from harness.training import StepFeed
import numpy as np
import tensorflow as tf

import configs
import model

TARGET = 0.97
BYTES_COUNTED_STEPS = 20


def densify(variables, gradients):
    """The rule before the O(rows) update, as gradients for today's: each sparse gradient summed into a dense
    tensor as large as its (unpartitioned) variable, so that model.update updates whole tables."""
    return [tf.math.unsorted_segment_sum(g.values, g.indices, v.shape[0]) if isinstance(g, tf.IndexedSlices) else g
            for v, g in zip(variables, gradients)]


def time_steps(args, config):
    """A child: trains --steps steps with --update; prints the throughput summary as one JSON line."""
    tf.compat.v1.disable_eager_execution()
    feed = StepFeed(config, data.load(args, config), rows=slice(None))
    fetches, _, _ = train_step(config, args.seed, feed, densify if args.update == "dense" else None)
    summary = timed_steps(args, config, feed, fetches)
    print(json.dumps({**summary, "peak_resident_bytes": harness.peak_resident_bytes()}))


def bytes_per_worker(args, config):
    """What one worker of --workers sends per step: its dense gradients' bytes, and per sparse variable the
    mean number of rows (distinct words) its gradient has over the first steps, averaged over the workers."""
    shapes = configs.variable_shapes(config)
    sparse = configs.sparse_variables(config)
    batches = data.load(args, config)
    rows = {name: [] for name in sparse}
    with tf.Graph().as_default():
        lm = model.LSTMLanguageModel(config, args.seed)
        feeds, touched = [], []
        for worker in range(args.workers):
            feed = StepFeed(config, batches, data.shard(config.batch_size, worker, args.workers))
            loss, _ = lm.loss(feed.inputs, feed.targets, feed.initial_state, None,
                              lm.sampled_candidates(args.seed, feed.step))
            gradients = dict(zip(lm.variables, lm.worker_gradients(loss)))
            feeds.append(feed)
            touched.append([tf.size(gradients[name].indices) for name in sparse])  # no backward pass needed
        with tf.compat.v1.Session(config=determinism.session_config(args)) as session:
            for step in range(min(BYTES_COUNTED_STEPS, args.steps)):
                feed_dict = {k: v for feed in feeds for k, v in feed(step, None).items()}
                for counts in session.run(touched, feed_dict):
                    for name, count in zip(sparse, counts):
                        rows[name].append(int(count))
    row_bytes = {name: 4 * int(np.prod(shapes[name][1:])) for name in sparse}
    mean_rows = {name: float(np.mean(counts)) for name, counts in rows.items()}
    return {
        "workers": args.workers,
        "dense_gradient_bytes": sum(4 * int(np.prod(shape)) for name, shape in shapes.items() if name not in sparse),
        "sparse_rows": mean_rows,
        # values and one int32 index per row
        "sparse_gradient_bytes": sum(mean_rows[name] * (row_bytes[name] + 4) for name in sparse),
        "sparse_variable_bytes": sum(4 * int(np.prod(shapes[name])) for name in sparse),
    }



def main():
    parser = flags.parser("bench-sparse-update", __doc__)
    flags.DEFINE_integer("rounds", 4, "pairs of runs; an even number puts each update first equally often",
                         lower_bound=1, flag_values=parser)
    flags.DEFINE_integer("workers", 2, "the workers whose per-worker bytes are counted", lower_bound=1,
                         flag_values=parser)
    flags.DEFINE_enum("update", None, ["scatter", "dense"], "(internal) time this update in this process",
                      flag_values=parser)
    args = flags.parse(parser)
    config = flags.model_config(args)
    data.shard(config.batch_size, 0, args.workers)
    if args.update:
        return time_steps(args, config)
    shared = flags.passed_on(args)
    rounds = []
    for i in range(args.rounds):
        outputs, first = in_turn({update: ["-m", "bench.sparse_update", *shared, f"--update={update}"]
                                  for update in ("scatter", "dense")}, i)
        summaries = {update: json.loads(output.strip().splitlines()[-1]) for update, output in outputs.items()}
        ratio = summaries["scatter"]["median"] / summaries["dense"]["median"]
        rounds.append({update: {"words_per_sec": s["median"], "median_step_seconds": s["median_step_seconds"],
                                "peak_resident_bytes": s["peak_resident_bytes"]}
                       for update, s in summaries.items()} | {"ratio": ratio, "core": CORE, "first": first})
        print(f"round {i + 1}: " + ", ".join(f"{u} update {s['median_step_seconds']:.4f} s/step"
                                             for u, s in summaries.items())
              + f", in turn on core {CORE} ({first} first): ratio {ratio:.3f}", flush=True)
    ratio = statistics.median(r["ratio"] for r in rounds)
    sent = bytes_per_worker(args, config)
    result = {"benchmark": "sparse-update", "config": args.config, "ratio": ratio, "target": TARGET,
              "met": ratio >= TARGET, "rounds": rounds,
              "median_step_seconds": {u: statistics.median(r[u]["median_step_seconds"] for r in rounds)
                                      for u in ("scatter", "dense")},
              "per_worker_per_step": sent, "steps": args.steps, "warmup_steps": args.warmup_steps,
              "environment": environment.describe(args, config, 1)}
    path = os.path.join(args.results_dir, f"bench-sparse-update-{args.config}.json")
    results.write_json(path, result)
    steps = result["median_step_seconds"]
    print(f"{args.config}: scatter update {steps['scatter']:.4f} s/step, dense update {steps['dense']:.4f} s/step; "
          f"words/sec scatter / dense = {ratio:.3f} (median of {args.rounds} rounds; target >= {TARGET})")
    print(f"per worker of {sent['workers']} per step: dense gradients {sent['dense_gradient_bytes']:,} bytes, "
          f"sparse rows {sent['sparse_gradient_bytes']:,.0f} bytes "
          f"({', '.join(f'{n} {r:,.0f}' for n, r in sent['sparse_rows'].items())} rows) -> {path}")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    harness.main(main)
