"""Planning past this machine: the traffic model (bench/traffic.py) extrapolated to clusters this machine cannot
emulate, and held against Parallax's published LM1B figures.

    python -m bench.predict                          # this repo's config on 8, 16, 32, 48 machines
                                                     # (also written to results/bench-predict.jsonl)
    python -m bench.predict --config=small --net=1gbit --compute_seconds=0.05
    python -m bench.predict --parallax               # Parallax's LM1B cluster against its README figure

The model of a step: every worker computes for `compute_seconds` (its own batch: the batch per worker stays
fixed as machines are added, as tf_cnn_benchmarks and Horovod's benchmarks scale), and in each phase of the
step (pull, then exchange) the busiest link direction moves its bytes at the link's rate; nothing overlaps. words/sec = workers x words per worker batch / step time.
Assumed: one parameter server per machine (Parallax's setup), the ring orders of docs/bench.md, the links the
only bottleneck of the network (a non-blocking switch), no latency, no per-message cost, no time for the
parameter servers' own arithmetic. The compute time comes from bench's run.py measurement in
results/bench.jsonl, or --compute_seconds.
"""
import os

import harness.determinism  # (first: it fixes TensorFlow's kernels)
from harness import data, experiments, flags, results
from harness.experiments import RUNS
from harness.starters import netns
import numpy as np

from bench import traffic

# Parallax's LM1B example (snuspl/parallax examples/lm1b) and its README's benchmark cluster.
PARALLAX_LM1B = {"vocab": 793_470, "embedding": 512, "lstm": 2048, "projection": 512, "sampled": 8192,
                 "batch_per_gpu": 128, "num_steps": 20, "gpus_per_machine": 6, "machines": 8, "partitions": 32,
                 "link": "100gbit"}
# Parallax's README figure at 8 machines (48 GPUs), words/sec, as read off the figure.
PARALLAX_PUBLISHED = {"tf": 100_000, "horovod": 40_000, "parallax": 277_000}
MACHINES = (8, 16, 32, 48)  # 48: Parallax's largest cluster (8 machines of 6 GPUs)


def parallax_lm1b_variables(p):
    """LM1B's variables by kind: with sampled softmax both big tables (and the softmax bias) get sparse
    gradients; the LSTM and its projection are dense."""
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
    """One step's rows per worker on a Zipf corpus (LM1B's vocabulary is sorted by frequency too): the
    embedding looks up the batch's words; the softmax gathers its targets and 8,192 sampled classes."""
    tokens = data.synthetic_tokens(p["vocab"], seed)
    words = p["batch_per_gpu"] * p["num_steps"]
    rng = np.random.default_rng(seed)
    step = []
    for w in range(workers):
        batch = tokens[(w * words) % (len(tokens) - words):][:words]
        gathered = np.concatenate([batch, log_uniform_sample(rng, p["vocab"], p["sampled"])])
        step.append({"embedding": (batch, np.unique(batch)), "softmax_w": (gathered, np.unique(gathered)),
                     "softmax_b": (gathered, np.unique(gathered))})
    return traffic.Rows([step])


def predict(architecture, variables, rows, machines, per_machine, link, compute_seconds, words_per_worker,
            partitions=1, costs=traffic.Costs()):
    """(words/sec, network seconds) of `machines` machines of `per_machine` workers each, one parameter server
    per machine; with `costs`, the network time holds the protocols' costs and the step the update's CPU time."""
    workers = machines * per_machine
    machine_of = {**{f"worker{w}": w // per_machine for w in range(workers)},
                  **{f"ps{p}": p for p in range(machines)}}
    _, network, update = traffic.predict(architecture, variables, rows, workers, machines, machine_of,
                                         link.bits_per_second / 8, partitions, costs=costs)
    return workers * words_per_worker / (compute_seconds + network + update), network


def repeat_rows(rows, workers):
    """Rows for `workers` workers from a sample of one worker's steps: worker w gets sampled step w."""
    one = [step[0] for step in rows.steps]
    return traffic.Rows([[one[w % len(one)] for w in range(workers)]])


def extrapolate(config, args, compute, machine_counts):
    """bench-predict.jsonl's records: each architecture's predicted words/sec of `config` on each of
    `machine_counts` machines (one worker and one parameter server a machine, `compute` seconds a step, every
    sparse variable in one part per server, as Parallax partitions them: in one part, the server that holds
    it would carry every worker's rows)."""
    variables = traffic.model_variables(config)
    sample = traffic.touched_rows(config, args, variables, 1, range(args.warmup_steps, args.warmup_steps + 48))
    records = []
    for machines in machine_counts:
        rows = repeat_rows(sample, machines)
        for name in experiments.SYNCHRONOUS:
            rate, network = predict(RUNS[name].traffic, variables, rows, machines, 1, args.net, compute,
                                    config.words_per_batch, partitions=machines)
            records.append({"runner": name, "config": config.name, "workers": machines,
                            "partitions": machines, "machines": machines, "link": str(args.net),
                            "compute_seconds": compute, "network_seconds": network, "words_per_sec": rate})
    return records


def write(results_dir, records):
    """<results_dir>/bench-predict.jsonl, one line per record, written whole or not at all (make report reads
    it)."""
    path = os.path.join(results_dir, results.PREDICTIONS)
    results.write_lines(path, records, "prediction")
    return path


def this_repo(args):
    config = flags.model_config(args)
    compute = args.compute_seconds or measured_compute(args)
    records = extrapolate(config, args, compute, args.machines)
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


def parallax(args):
    """Parallax's LM1B on its 8 machines. Its 1-machine throughput is not given here (the README's figure is a
    picture), so the compute time is calibrated from one published point, the hybrid at 8 machines, unless
    --compute_seconds is given; the model then predicts the other architectures."""
    p = dict(PARALLAX_LM1B)
    link = netns.Link.parse(p["link"])
    variables = parallax_lm1b_variables(p)
    workers = p["machines"] * p["gpus_per_machine"]
    rows = parallax_lm1b_rows(p, workers)
    words = p["batch_per_gpu"] * p["num_steps"]
    shape = (variables, rows, p["machines"], p["gpus_per_machine"], link)
    _, hybrid_network = predict(RUNS["parallax"].traffic, *shape, 1.0, words, p["partitions"])
    compute = args.compute_seconds or workers * words / PARALLAX_PUBLISHED["parallax"] - hybrid_network
    print(f"Parallax LM1B: {p['machines']} machines x {p['gpus_per_machine']} GPUs, {p['link']} links, vocabulary "
          f"{p['vocab']:,}, batch {p['batch_per_gpu']} x {p['num_steps']} per GPU, {p['partitions']} partitions; "
          f"compute {compute:.3f} s per step "
          f"({'given' if args.compute_seconds else 'calibrated on the hybrid figure'})")
    print(f"{'architecture':36s} {'predicted':>10s} {'published':>10s} {'pred/pub':>8s} {'network':>12s} "
          f"{'rate that would explain it':>26s}")
    for name in experiments.SYNCHRONOUS:
        rate, network = predict(RUNS[name].traffic, *shape, compute, words, p["partitions"])
        published = PARALLAX_PUBLISHED.get(name)
        explain = ""
        if published:
            spare = workers * words / published - compute  # seconds the published step leaves for the network
            explain = (f"{network * link.bits_per_second / spare / 1e9:.1f} Gbit/s" if spare > 0 else "none")
        print(f"{RUNS[name].title:36s} {rate:10,.0f} {f'{published:,}' if published else '-':>10s} "
              f"{f'{rate / published:.2f}' if published else '-':>8s} {network * 1e3:9.1f} ms {explain:>26s}")


def main():
    parser = flags.parser("bench.predict", __doc__)
    flags.DEFINE_list("machines", list(map(str, MACHINES)), "cluster sizes", flag_values=parser)
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
