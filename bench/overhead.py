"""make bench-overhead: what the harness costs, as run.py's words/sec over bench/bare_loop.py's (the same graph in
a bare loop), both in turn on one core each round. Writes <results_dir>/bench-overhead.json; exits 0 when the
median ratio over the rounds reaches --target, else 1.

    python -m bench.overhead --config=small --steps=300 --warmup_steps=50 --rounds=4
"""
import json
import os
import statistics
import tempfile

import harness
from harness import REPO, environment, flags, models, results

from bench.pinned import CORE, in_turn


def main():
    parser = flags.parser("bench-overhead", __doc__)
    flags.DEFINE_integer("rounds", 4, "pairs of runs; an even number puts each loop first equally often",
                         lower_bound=1, flag_values=parser)
    flags.DEFINE_finite_float("target", 0.97, "the ratio run.py / bare loop must reach", parser)
    args = flags.parse(parser)
    shared = flags.passed_on(args)
    rounds = []
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(args.rounds):
            loops = {"run.py": [os.path.join(REPO, "run.py"), *shared, f"--results_dir={scratch}",
                                f"--ckpt_dir={scratch}/ckpt"],
                     "bare loop": ["-m", "bench.bare_loop", *shared]}
            output, first = in_turn(loops, i)
            harnessed = results.read_json(results.summary_path(scratch, "run"), "summary")["throughput"]["median"]
            bare = json.loads(output["bare loop"].strip().splitlines()[-1])["median"]
            rounds.append({"run_py": harnessed, "bare_loop": bare, "ratio": harnessed / bare, "core": CORE,
                           "first": first})
            print(f"round {i + 1}: run.py {harnessed:,.0f} words/sec, bare loop {bare:,.0f} words/sec, in turn "
                  f"on core {CORE} ({first} first): ratio {harnessed / bare:.3f}", flush=True)
    ratio = statistics.median(r["ratio"] for r in rounds)
    result = {"benchmark": "overhead", "ratio": ratio, "target": args.target, "met": ratio >= args.target,
              "rounds": rounds, "steps": args.steps, "warmup_steps": args.warmup_steps,
              "environment": environment.describe(args, *models.from_flags(args), 1)}
    path = os.path.join(args.results_dir, results.OVERHEAD)
    results.write_json(path, result)
    print(f"harness overhead: run.py / bare loop = {ratio:.3f} (median of {args.rounds} rounds; target >= "
          f"{args.target}): {'met' if result['met'] else 'MISSED'} -> {path}")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    harness.main(main)
