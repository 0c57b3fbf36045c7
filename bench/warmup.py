"""How many first steps to leave out: each architecture's median step early and late, side by side.
docs/bench.md, "Warm-up", explains the choice it informs.

    python -m bench.warmup                      # the first config, W = 2, 1gbit, 150 steps of each runner
    python -m bench.warmup --steps=60           # shorter: the late window is then steps 50-60
"""
import os
import statistics

import harness
from harness import experiments, flags, results

from bench import validate

EARLY, LATE = (5, 24), (50, 150)  # the bench's measured steps, and the window the assignment would measure


def median_of(steps, first, last):
    return statistics.median(r["seconds"] for r in steps if first <= r["step"] <= last)


def main():
    parser = flags.parser("bench.warmup", __doc__)
    flags.DEFINE_names("runners", ["tf", "horovod", "parallax", "tf-async"], "runners to run", parser,
                       known=experiments.DISTRIBUTED)
    flags.DEFINE_string("net", "1gbit", "every machine's link rate", flag_values=parser)
    parser.set_default("steps", 150)
    args = flags.parse(parser)
    if args.steps <= LATE[0]:
        raise harness.UsageError(f"--steps={args.steps}: the late window starts at step {LATE[0]}")
    out = os.path.join(args.results_dir, "warmup", args.model)
    records = validate.sweep(out, [f"--model={args.model}", f"--runners={','.join(args.runners)}", "--workers=2",
                                   f"--net={args.net}", f"--steps={args.steps}", f"--warmup_steps={EARLY[0] - 1}",
                                   f"--configs={args.config}"], "bench.warmup")
    late_window = f"steps {LATE[0]}-{min(args.steps, LATE[1])} s"
    print(f"{'runner':10s} {'config':8s} {'steps 5-24 s':>12s} {late_window:>13s} {'late/early':>10s}")
    for record in records:
        steps = [r for _, r in results.read_lines(results.steps_path(os.path.join(out, "bench"),
                                                                      record["run_name"]), "step")]
        early, late = median_of(steps, *EARLY), median_of(steps, LATE[0], min(args.steps, LATE[1]))
        print(f"{record['runner']:10s} {record['config']:8s} {early:12.3f} {late:13.3f} {late / early:10.2f}")
    return 0


if __name__ == "__main__":
    harness.main(main)
