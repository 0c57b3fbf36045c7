"""The traffic model extrapolated to clusters this machine cannot emulate, and held against Parallax's published LM1B
figure; docs/bench.md ("Extrapolation and Parallax's figure") states its assumptions.

    python -m bench.predict              # this repo's config on 8..48 machines -> results/bench-predict.jsonl
    python -m bench.predict --config=small --net=1gbit --compute_seconds=0.05
    python -m bench.predict --parallax   # Parallax's twelve LM1B points -> results/bench-parallax.jsonl"""
import os

import harness.determinism  # (first: it fixes TensorFlow's kernels)
from harness import data, experiments, flags, models, results
from harness.experiments import RUNS
from launcher.starters import netns
import numpy as np

from bench import costs, traffic

# Parallax's LM1B example (snuspl/parallax examples/lm1b) on its README's cluster: 6 TITAN Xp a machine, 100 Gbit/s.
PARALLAX_LM1B = {"vocab": 793_470, "embedding": 512, "lstm": 2048, "projection": 512, "sampled": 8192,
                 "batch_per_gpu": 128, "num_steps": 20, "gpus_per_machine": 6, "partitions": 32, "link": "100gbit"}
# Its README figure (doc/figure/benchmark.png): LM1B words/sec at 1, 2, 4 and 8 machines, read off the bars.
PARALLAX_MACHINES = (1, 2, 4, 8)
PARALLAX_PUBLISHED = {"ps": (88_000, 128_000, 147_000, 101_000), "allreduce": (68_000, 47_000, 43_000, 40_000),
                      "hybrid": (88_000, 150_000, 250_000, 277_000)}
# How its experiments (run_parallax_exp.py, doc/installation.md, branch exp) moved each operation's tensors.
PARALLAX_TRANSPORTS = {"pull": "verbs", "push": "verbs", "allreduce": "nccl", "allgather": "mpi allgather"}
# The figure's series as the traffic model's architectures; Parallax's hybrid aggregates each machine's rows first.
PARALLAX_ARCHITECTURES = {"ps": "ps", "allreduce": "allreduce", "hybrid": "hybrid-local"}
# Every input of the prediction and where it comes from; "assumed" where neither they nor we measured it.
PARALLAX_INPUTS = (
    ("model sizes, batch, partitions", "published: examples/lm1b (vocabulary, widths, 128 x 20 a GPU, 32 parts)"),
    ("machines, GPUs a machine, link", "published: README (6 TITAN Xp, 100 Gbit/s InfiniBand)"),
    ("transports of each operation", "published: run_parallax_exp.py, doc/installation.md (branch exp)"),
    ("verbs and NCCL rates", "assumed: the link's rate"),
    ("verbs' cost of a message", "assumed: gRPC's, measured here"),
    ("NCCL's fixed cost of a collective", "assumed: MPI allreduce's, measured here"),
    ("MPI allgather's rate and fixed cost", "measured here over TCP (their interface's speed is not published)"),
    ("servers' CPU per byte (add, deduplicate, apply)", "measured here, one core of this machine"),
    ("each part updated on a core of its own", "assumed (parallel_parts)"),
    ("the workers' own update on their GPUs", "assumed (accelerated_workers)"),
    ("TensorFlow-PS: one synchronous worker a GPU", "assumed: no script of theirs launches it"),
    ("compute seconds a step", "calibrated: the hybrid at 1 machine equals its published figure"),
)
WITHIN, READING = 1.5, 0.05  # the count's band, and the reading error of the figure's bars
MACHINES = (8, 16, 32, 48)  # 48: Parallax's largest cluster (8 machines of 6 GPUs)


def parallax_lm1b_variables(p):
    """LM1B's variables by kind: with sampled softmax both big tables (and the softmax bias) get sparse gradients."""
    v, e, h, proj = p["vocab"], p["embedding"], p["lstm"], p["projection"]
    return [traffic.Variable("embedding", (v, e), "sparse"),
            traffic.Variable("lstm/kernel", (e + proj, 4 * h), "dense"),
            traffic.Variable("lstm/bias", (4 * h,), "dense"),
            traffic.Variable("lstm/projection", (h, proj), "dense"),
            traffic.Variable("softmax_w", (v, proj), "sparse"),
            traffic.Variable("softmax_b", (v,), "sparse")]


def log_uniform_sample(rng, vocab, count):
    """`count` distinct classes from TensorFlow's log-uniform (Zipfian) candidate sampler."""
    found = np.zeros(0, np.int64)
    while len(found) < count:
        draw = (np.exp(rng.random(count * 2) * np.log(vocab + 1)) - 1).astype(np.int64)
        found = np.unique(np.concatenate([found, draw[draw < vocab]]))
    return rng.permutation(found)[:count]


def parallax_lm1b_rows(p, workers, seed=1):
    """One step's rows per worker, repeats included, on a Zipf corpus (LM1B's vocabulary is frequency-sorted too)."""
    tokens = data.synthetic_tokens(p["vocab"], seed)
    words = p["batch_per_gpu"] * p["num_steps"]
    rng = np.random.default_rng(seed)
    step = []
    for w in range(workers):
        batch = tokens[(w * words) % (len(tokens) - words):][:words]
        gathered = np.concatenate([batch, log_uniform_sample(rng, p["vocab"], p["sampled"])])
        step.append({"embedding": (batch, batch), "softmax_w": (gathered, gathered),
                     "softmax_b": (gathered, gathered)})
    return traffic.Rows([step])


def step_terms(architecture, variables, rows, machines, per_machine, link, partitions=1, costs=traffic.Costs()):
    """(network seconds, the update's CPU seconds) of a step on `machines` machines of `per_machine` workers
    each, one parameter server per machine; with Costs(), the bytes-only model's (no CPU time)."""
    workers = machines * per_machine
    machine_of = {**{f"worker{w}": w // per_machine for w in range(workers)},
                  **{f"ps{p}": p for p in range(machines)}}
    _, network, update = traffic.predict(architecture, variables, rows, workers, machines, machine_of,
                                         link.bits_per_second / 8, partitions, costs=costs)
    return network, update


def repeat_rows(rows, workers):
    """Rows for `workers` workers from a sample of one worker's steps: worker w gets sampled step w (a model without
    sparse variables: none)."""
    if not rows.steps:
        return rows
    one = [step[0] for step in rows.steps]
    return traffic.Rows([[one[w % len(one)] for w in range(workers)]])


def extrapolate(model, config, args, compute, machine_counts):
    """bench-predict.jsonl's records: each runner's words/sec of `config` on each of `machine_counts` machines, one
    worker and one server a machine, sparse variables in one part per server (else one server carries all rows)."""
    variables = traffic.model_variables(model, config, args)
    sample = traffic.touched_rows(model, config, args, variables, 1,
                                  range(args.warmup_steps, args.warmup_steps + 48))
    records = []
    for machines in machine_counts:
        rows = repeat_rows(sample, machines)
        for name in experiments.SYNCHRONOUS:
            network, _ = step_terms(RUNS[name].traffic, variables, rows, machines, 1, args.net, partitions=machines)
            rate = machines * models.units_per_step(model, config) / (compute + network)
            records.append({"runner": name, "config": config.name, "workers": machines,
                            "partitions": machines, "machines": machines, "link": str(args.net),
                            "compute_seconds": compute, "network_seconds": network, "words_per_sec": rate})
    return records


def write(results_dir, records):
    """Write <results_dir>/bench-predict.jsonl whole or not at all (make report reads it); return its path."""
    path = os.path.join(results_dir, results.PREDICTIONS)
    results.write_lines(path, records, "prediction")
    return path


def this_repo(args):
    model, config = models.from_flags(args)
    compute = args.compute_seconds or measured_compute(args)
    records = extrapolate(model, config, args, compute, args.machines)
    print(f"{config.name}: compute {compute:.3f} s per step of {config.batch_size} rows per worker, links of "
          f"{args.net}, one worker and one parameter server per machine, batch per worker fixed, sparse "
          f"variables in one part per machine")
    print(f"{'machines':>8s} " + " ".join(f"{RUNS[name].title:>24s}" for name in experiments.SYNCHRONOUS))
    for machines in args.machines:
        rates = [r["words_per_sec"] for r in records if r["machines"] == machines]
        print(f"{machines:8d} " + " ".join(f"{r:24,.0f}" for r in rates))
    print(f"-> {write(args.results_dir, records)}")


def measured_compute(args):
    path = os.path.join(args.results_dir, results.BENCH)
    if os.path.exists(path):
        for _, record in results.read_lines(path, "bench"):
            if record["config"] == args.config:
                return record["compute_seconds_one_device"]
    raise harness.UsageError(f"no compute time for {args.config}: run make bench first, or pass "
                             f"--compute_seconds")


def parallax_costs(measured):
    """The costs of Parallax's cluster (PARALLAX_TRANSPORTS) from bench.costs's measurements here."""
    here = traffic.Costs.measured(measured, collective="mpi")
    return traffic.Costs(rates={name: here.rates[name] for name in ("mpi allgather", "mpi-local allgather")},
                         message_seconds={"verbs": here.message_seconds["grpc"],
                                          "nccl": here.message_seconds["mpi allreduce"],
                                          **{name: here.message_seconds[name]
                                             for name in ("mpi allgather", "mpi-local allgather")}},
                         local_transports={"mpi allgather": "mpi-local allgather"},
                         row_seconds_per_byte={name: here.row_seconds_per_byte[name]
                                               for name in ("deduplicate", "apply", "add")},
                         transports=PARALLAX_TRANSPORTS,
                         parallel_parts=True, accelerated_workers=True)


def parallax_terms(architecture, machines, rows, costs):
    """(network seconds, the update's CPU seconds) of a step of Parallax's LM1B on `machines` machines."""
    p = PARALLAX_LM1B
    return step_terms(PARALLAX_ARCHITECTURES[architecture], parallax_lm1b_variables(p), rows, machines,
                      p["gpus_per_machine"], netns.Link.parse(p["link"]), p["partitions"], costs)


def parallax(args):
    """Parallax's twelve published points against the model and the bytes-only model, each with its compute time
    calibrated on the hybrid at one machine and every other input as PARALLAX_INPUTS says."""
    measured = costs.load(args.results_dir)
    if not measured and os.geteuid() != 0:  # bench.costs emulates its links: without root there are none
        print("bench.predict: Parallax's figure not predicted: it needs this machine's protocol costs, which "
              "bench.costs measures on emulated links (root)")
        return 0
    if not measured:
        raise harness.UsageError(f"no protocol costs of this machine in {args.results_dir}: run python -m "
                                 f"bench.costs first")
    p = PARALLAX_LM1B
    words = p["gpus_per_machine"] * p["batch_per_gpu"] * p["num_steps"]
    models = {"costed": parallax_costs(measured), "bytes only": traffic.Costs(transports=PARALLAX_TRANSPORTS)}
    rows = {machines: parallax_lm1b_rows(p, machines * p["gpus_per_machine"]) for machines in PARALLAX_MACHINES}
    compute = {name: args.compute_seconds or words / PARALLAX_PUBLISHED["hybrid"][0] - sum(parallax_terms(
        "hybrid", 1, rows[1], model_costs)) for name, model_costs in models.items()}
    print(f"Parallax LM1B: 1-8 machines x {p['gpus_per_machine']} GPUs, {p['link']} links, vocabulary "
          f"{p['vocab']:,}, batch {p['batch_per_gpu']} x {p['num_steps']} per GPU, {p['partitions']} partitions; "
          f"compute {compute['costed']:.4f} s per step "
          f"({'given' if args.compute_seconds else 'calibrated on the hybrid at 1 machine'})")
    print(f"{'architecture':12s} {'machines':>8s} {'predicted':>10s} {'published':>10s} {'pred/pub':>8s} "
          f"{'network':>10s} {'update':>9s} {'bytes only':>10s}")
    records = []
    for architecture, published in PARALLAX_PUBLISHED.items():
        for machines, figure in zip(PARALLAX_MACHINES, published):
            words_per_step = machines * words
            network, update = parallax_terms(architecture, machines, rows[machines], models["costed"])
            rate = words_per_step / (compute["costed"] + network + update)
            bytes_only = words_per_step / (compute["bytes only"] + sum(parallax_terms(
                architecture, machines, rows[machines], models["bytes only"])))
            records.append({"architecture": architecture, "machines": machines, "predicted_words_per_sec": rate,
                            "published_words_per_sec": figure, "compute_seconds": compute["costed"],
                            "network_seconds": network, "update_seconds": update,
                            "bytes_only_words_per_sec": bytes_only})
            print(f"{architecture:12s} {machines:8d} {rate:10,.0f} {figure:10,} {rate / figure:8.2f} "
                  f"{network * 1e3:7.1f} ms {update * 1e3:6.1f} ms {bytes_only / figure:10.2f}")
    print(parallax_count(records))
    print("inputs:\n" + "\n".join(f"  {what:48s} {source}" for what, source in PARALLAX_INPUTS))
    path = os.path.join(args.results_dir, results.PARALLAX)
    results.write_lines(path, records, "parallax point")
    print(f"-> {path}")


def parallax_count(records):
    """How many of the points, the calibration point left out, are within WITHIN of the published figure, and
    how many could be given the figure's reading error."""
    scored = [r for r in records if (r["architecture"], r["machines"]) != ("hybrid", 1)]
    ratios = [r["predicted_words_per_sec"] / r["published_words_per_sec"] for r in scored]
    inside = sum(1 / WITHIN <= x <= WITHIN for x in ratios)
    reachable = sum(1 / WITHIN <= x * (1 + READING) and x * (1 - READING) <= WITHIN for x in ratios)
    return (f"within {WITHIN}x of the published figure: {inside} of {len(scored)} points (the hybrid at 1 machine, "
            f"the calibration point, not counted); {reachable} of {len(scored)} allowing the bars' "
            f"+-{READING:.0%} reading")


def main():
    parser = flags.parser("bench.predict", __doc__)
    flags.DEFINE_names("machines", list(map(str, MACHINES)), "cluster sizes", parser)
    flags.DEFINE_parsed("net", netns.Link.parse("100mbit"), netns.Link.parse, "link rate", parser)
    flags.DEFINE_finite_float("compute_seconds", 0.0, "one worker's compute time per step (default: measured by "
                              "make bench, or calibrated with --parallax)", parser)
    flags.DEFINE_boolean("parallax", False, "Parallax's LM1B setup against its published figure", flag_values=parser)
    args = flags.parse(parser)
    try:
        args.machines = [int(m) for m in args.machines]
    except ValueError:
        raise harness.UsageError(f"--machines: expected numbers, got {','.join(args.machines)}")
    if min(args.machines) < 1:
        raise harness.UsageError(f"--machines: a cluster has at least 1 machine, got {min(args.machines)}")
    return parallax(args) if args.parallax else this_repo(args)


if __name__ == "__main__":
    harness.main(main)
