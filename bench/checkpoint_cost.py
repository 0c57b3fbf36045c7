"""What periodic checkpoints cost: run.py with --save_every against run.py without, in turn on one core
(bench/pinned.py). The figure is the ratio of their aggregate words/sec (a per-step median would hide the saves),
with each save's size and time. Writes <results_dir>/bench-checkpoint-cost-<config>.json.

    python -m bench.checkpoint_cost --config=small --steps=300 --warmup_steps=50 --save_every=50 --rounds=2
    python -m bench.checkpoint_cost --config=lm1b --steps=12 --warmup_steps=2 --save_every=5 --rounds=1
"""
import os
import re
import statistics
import tempfile

import harness
from harness import REPO, environment, flags, models, results

from bench.pinned import CORE, in_turn

SAVED = re.compile(r"checkpoint: \S+ after step \d+: ([\d.]+) MB in ([\d.]+) s")


def main():
    parser = flags.parser("bench-checkpoint-cost", __doc__)
    flags.DEFINE_integer("save_every", 50, "the interval whose cost is measured", lower_bound=1, flag_values=parser)
    flags.DEFINE_integer("rounds", 2, "pairs of runs; an even number puts each first equally often", lower_bound=1,
                         flag_values=parser)
    args = flags.parse(parser)
    if args.save_every >= args.steps:
        raise harness.UsageError(f"--save_every={args.save_every}: no save within --steps={args.steps}")
    rounds = []
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(args.rounds):
            runs = {name: [os.path.join(REPO, "run.py"), *flags.passed_on(args), f"--results_dir={scratch}",
                           f"--run_name={name}", f"--ckpt_dir={scratch}/{name}", *extra]
                    for name, extra in (("without", []), ("with", [f"--save_every={args.save_every}"]))}
            outputs, first = in_turn(runs, i)
            rates = {name: results.read_json(results.summary_path(scratch, name), "summary")["throughput"]["aggregate"]
                     for name in runs}
            saves = [(float(mb), float(seconds)) for mb, seconds in SAVED.findall(outputs["with"])]
            rounds.append({"words_per_sec": rates, "ratio": rates["with"] / rates["without"], "saves": saves,
                           "core": CORE, "first": first})
            print(f"round {i + 1}: {rates['with']:,.0f} words/sec with a checkpoint every {args.save_every} steps, "
                  f"{rates['without']:,.0f} without ({first} first, core {CORE}): ratio "
                  f"{rounds[-1]['ratio']:.3f}; saves {', '.join(f'{s:.2f} s' for _, s in saves)}", flush=True)
    saves = [save for r in rounds for save in r["saves"]]
    result = {"benchmark": "checkpoint-cost", "config": args.config, "save_every": args.save_every,
              "ratio": statistics.median(r["ratio"] for r in rounds), "rounds": rounds,
              "save_megabytes": saves[0][0], "save_seconds_median": statistics.median(s for _, s in saves),
              "steps": args.steps, "warmup_steps": args.warmup_steps,
              "environment": environment.describe(args, *models.from_flags(args), 1)}
    path = os.path.join(args.results_dir, f"bench-checkpoint-cost-{args.config}.json")
    results.write_json(path, result)
    print(f"{args.config}: a checkpoint is {result['save_megabytes']:,.1f} MB and takes "
          f"{result['save_seconds_median']:.2f} s (median of {len(saves)}); with one every {args.save_every} steps, "
          f"words/sec with / without = {result['ratio']:.3f} (median of {args.rounds} rounds) -> {path}")
    return 0


if __name__ == "__main__":
    harness.main(main)
