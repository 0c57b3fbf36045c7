"""make bench-overhead: what does the harness cost? words/sec of run.py against bench/bare_loop.py, the same
graph in a loop with nothing around it. Each round runs both at the same time, each pinned to its own core
(so both see the same moment of a shared, noisy machine), and the next round swaps the cores.

    python -m bench.overhead --config=small --steps=300 --warmup_steps=50 --rounds=4

Writes <results_dir>/bench-overhead.json. The figure is the median over rounds of
(run.py median words/sec) / (bare loop median words/sec); the target is >= 0.97. Exit status 0 when it is met,
1 when it is missed."""
import json
import os
import statistics
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.pinned import start_pinned
import harness
from harness import environment, flags





def main():
    parser = flags.parser("bench-overhead", __doc__)
    flags.DEFINE_integer("rounds", 4, "pairs of runs; an even number gives each loop each core equally often",
                         lower_bound=1, flag_values=parser)
    flags.DEFINE_finite_float("target", 0.97, "the ratio run.py / bare loop must reach", parser)
    args = flags.parse(parser)
    shared = [f"--config={args.config}", f"--steps={args.steps}", f"--warmup_steps={args.warmup_steps}",
              f"--seed={args.seed}", f"--intra_op_threads={args.intra_op_threads}",
              f"--inter_op_threads={args.inter_op_threads}"] + ([f"--data_path={args.data_path}"]
                                                                 if args.data_path else [])
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise harness.UsageError("bench-overhead runs its two loops side by side and needs 2 cores")
    rounds = []
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(args.rounds):
            # Both loops at once, each pinned to its own core, so that both see the same moment of this
            # shared, noisy machine; every other round they swap cores.
            run_core, bare_core = (cores[0], cores[1]) if i % 2 == 0 else (cores[1], cores[0])
            run_py = start_pinned(run_core, [os.path.join(REPO, "run.py"), *shared, f"--results_dir={scratch}",
                                             f"--ckpt_dir={scratch}/ckpt"])
            bare_loop = start_pinned(bare_core, ["-m", "bench.bare_loop", *shared])
            bare_output, _ = bare_loop.communicate()
            run_py.communicate()
            if run_py.returncode or bare_loop.returncode:
                raise SystemExit(f"round {i + 1} failed: run.py exit {run_py.returncode}, "
                                   f"bare loop exit {bare_loop.returncode}")
            with open(os.path.join(scratch, "run.json")) as f:
                harnessed = json.load(f)["throughput"]["median"]
            bare = json.loads(bare_output.strip().splitlines()[-1])["median"]
            rounds.append({"run_py": harnessed, "bare_loop": bare, "ratio": harnessed / bare,
                           "run_py_core": run_core, "bare_loop_core": bare_core})
            print(f"round {i + 1}: run.py {harnessed:,.0f} words/sec on core {run_core}, bare loop {bare:,.0f} "
                  f"words/sec on core {bare_core}: ratio {harnessed / bare:.3f}", flush=True)
    ratio = statistics.median(r["ratio"] for r in rounds)
    result = {"benchmark": "overhead", "ratio": ratio, "target": args.target, "met": ratio >= args.target,
              "rounds": rounds, "steps": args.steps, "warmup_steps": args.warmup_steps,
              "environment": environment.describe(args, flags.model_config(args), 1)}
    os.makedirs(args.results_dir, exist_ok=True)
    path = os.path.join(args.results_dir, "bench-overhead.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"harness overhead: run.py / bare loop = {ratio:.3f} (median of {args.rounds} rounds; target >= "
          f"{args.target}): {'met' if result['met'] else 'MISSED'} -> {path}")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    harness.main(main)
