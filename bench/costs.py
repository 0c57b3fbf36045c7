"""Measure on this machine what the traffic model's bytes leave out: each protocol's fixed cost per message, its
rate and its payload's share of a shaped link, and the CPU time per byte of the sparse rows' work. Needs root.

    python -m bench.costs            # measure, print the table, write results/bench-costs.json
    python -m bench.costs --quick    # small sizes and few repeats: seconds, for the tests

docs/bench.md ("What it costs beyond bytes") explains each measurement.
"""
import contextlib
import io
import os
import signal
import sys

import harness.determinism  # (first: it fixes TensorFlow's kernels)
import numpy as np
import tensorflow as tf

import harness
from harness import environment, flags, results
from launcher import launch, tasks
from harness.update import Adagrad
from harness.variables import deduplicate
from launcher.starters import mpirun, netns
from launcher.starters.local import LocalProcess

from bench import protocol_probe, traffic

PROBE = os.path.abspath(protocol_probe.__file__)
COSTS = "bench-costs.json"
SIZES = {"full": [4096, 1 << 20, 8 << 20, 32 << 20], "quick": [4096, 1 << 16, 1 << 18]}
SHAPED = "100mbit"  # the link rate the payload's share is measured at
SHAPED_SIZES = [1 << 18, 1 << 20]  # both beyond htb's bucket of 10 ms of traffic
SHAPED_RANKS = (2, 4)  # the rank counts Gloo's share is measured at; a run uses the nearest (docs/bench.md)
PROBE_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONPATH": harness.REPO}
IDLE_SECONDS = {"full": 5.0, "quick": 0.5}  # how long the collectives' ranks idle while their background is measured
FORMAT = 6  # the record's layout: a record of another FORMAT is measured again
ROW_FLOATS = 512  # Parallax's LM1B rows (embedding and softmax 512 wide)


def quantiles(seconds):
    return {"median": float(np.median(seconds)), "p16": float(np.percentile(seconds, 16)),
            "p84": float(np.percentile(seconds, 84))}


def fit(timings):
    """Fit seconds = fixed + bytes / rate through the medians of the smallest and the largest size of `timings`:
    two points, not least squares, which the largest sizes would dominate. At two ranks a size is its wire bytes."""
    points = sorted(({"size": int(size), **quantiles(seconds)} for size, seconds in timings.items()),
                    key=lambda p: p["size"])
    small, large = points[0], points[-1]
    extra = large["median"] - small["median"]
    rate = (large["size"] - small["size"]) / extra if extra > 0 else float("inf")
    return {"fixed_seconds": max(small["median"] - small["size"] / rate, 0.0), "bytes_per_second": rate,
            "points": points}


def run_probe(probe_tasks, starter, timings_file):
    """Run the probe's tasks and return the timings rank 0 wrote; their output is shown only if one fails."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        status = tasks.run_tasks(probe_tasks, starter)
    if status or not os.path.exists(timings_file):
        tail = "\n".join(output.getvalue().strip().splitlines()[-15:])
        raise SystemExit(f"bench.costs: the probe of {', '.join(t.name for t in probe_tasks)} failed (exit "
                         f"{status}):\n{tail}")
    timings = results.read_json(timings_file)
    os.remove(timings_file)
    return timings


def probe_flags(args, probe, sizes=None):
    return [f"--probe={probe}", f"--sizes={','.join(map(str, sizes or args.sizes))}", f"--repeats={args.repeats}",
            f"--idle_seconds={args.idle_seconds}", f"--timings_file={timings_file(args, probe)}"]


def timings_file(args, probe):
    return os.path.abspath(os.path.join(args.results_dir, f"bench-costs-{probe}.json"))


def measure_grpc_and_gloo(args, link=None, sizes=None):
    """Time gRPC and Gloo between the two machines of an emulated cluster linked at `link` (None: unshaped)."""
    with netns.EmulatedCluster(2, link) as cluster:
        cluster.join_switch()  # Horovod's rendezvous, in this process, must be reachable from the machines
        starter = netns.NetnsProcess(cluster)
        first, second = cluster.addresses
        grpc_tasks = launch.parameter_server_tasks(os.path.relpath(PROBE, harness.REPO),
                                                   probe_flags(args, "grpc", sizes),
                                                   *launch.with_ports([first], [second], starter))
        for task in grpc_tasks:
            task.env.update(PROBE_ENV)
        return run_probe(grpc_tasks, starter, timings_file(args, "grpc")), measure_gloo(args, cluster, sizes)


def measure_gloo(args, cluster, sizes=None):
    """Time Gloo's collectives, one rank a machine of `cluster` (its switch joined)."""
    starter = netns.NetnsProcess(cluster)
    environments, stop_rendezvous = launch.horovod_environments(cluster.addresses, netns.INTERFACE)
    try:
        return run_probe([tasks.Task(f"worker{r}", [sys.executable, PROBE, *probe_flags(args, "collective", sizes)],
                                     {**PROBE_ENV, **environments[r]}, host)
                          for r, host in enumerate(cluster.addresses)], starter, timings_file(args, "collective"))
    finally:
        stop_rendezvous()


def measure_shaped_gloo(args, ranks, link):
    """Time Gloo's collectives of `ranks` ranks, one a machine, over links shaped at `link`."""
    with netns.EmulatedCluster(ranks, link) as cluster:
        cluster.join_switch()
        return measure_gloo(args, cluster, SHAPED_SIZES)


# MPI's transports: TCP between machines (as Parallax's mpirun ran it), shared memory (vader) within one.
MPI_TRANSPORTS = {"mpi": ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"],
                  "mpi-local": ["--mca", "btl", "vader,self"]}


def measure_mpi(args, transport):
    """Time Horovod's MPI operations between two ranks on this machine, over `transport` (MPI_TRANSPORTS)."""
    command = mpirun.command(["127.0.0.1", "127.0.0.1"], [sys.executable, PROBE, *probe_flags(args, "collective")])
    command[1:1] = [*MPI_TRANSPORTS[transport], "-x", "HOROVOD_CPU_OPERATIONS=MPI", "-x",
                    f"PYTHONPATH={harness.REPO}"]
    return run_probe([tasks.Task("mpirun", command)], LocalProcess(), timings_file(args, "collective"))


def fit_with_cpu(timings, operation, ranks):
    """fit() of `operation`, with the CPU seconds per byte each of `ranks` ranks sent at the largest size."""
    fitted = fit(timings[operation])
    largest = max(int(size) for size in timings[operation])
    return {**fitted, "cpu_seconds_per_byte": timings["cpu_seconds"][operation] / (ranks * largest)}


def protocols(grpc, collectives):
    """Fit the protocols to the unshaped probes; gRPC's cost per message is a pull of many small tensors vs one."""
    (one_size, one), = grpc["pull_one_small"].items()
    (many_size, many), = grpc["pull_many_small"].items()
    tensors = int(many_size) // int(one_size)
    found = {"grpc": {"pull": fit_with_cpu(grpc, "pull", 1), "push": fit_with_cpu(grpc, "push", 1),
                      "message_seconds": max(float(np.median(many) - np.median(one)) / (tensors - 1), 0.0)}}
    for name, timings in collectives.items():
        found[name] = {operation: fit_with_cpu(timings, operation, 2) for operation in traffic.COLLECTIVES}
        found[name]["background_cpu_share"] = float(np.median(timings["background_cpu_share"]))
    return found


def payload_shares(timings, link, ranks):
    """{transport: {p16, median, p84: share}}: the rate each carries a rank's bytes over `link`, over its rate.
    gRPC is a pull and a push at once: in a run, acknowledgements of what a machine receives share its sending."""
    sent = {"grpc": 1.0, "gloo allreduce": 2 * (ranks - 1) / ranks, "gloo allgather": ranks - 1,
            "gloo alltoall": 2 * (ranks - 1) / ranks}
    shares = {}
    for name, measured in timings.items():
        line = fit(measured)
        large = line["points"][-1]
        shares[name] = {q: min(sent[name] * large["size"] / (link.bits_per_second / 8)
                               / max(large[q] - line["fixed_seconds"], 1e-9), 1.0) for q in ("p16", "median", "p84")}
    return shares


def gloo_timings(gloo):
    return {f"gloo {operation}": gloo[operation] for operation in traffic.COLLECTIVES}


def measure_rows(args):
    """CPU seconds per byte, on one core, of each of the sparse rows' operations docs/bench.md lists."""
    rows, vocab = (20_000, 100_000) if not args.quick else (2_000, 10_000)
    rng = np.random.default_rng(args.seed)
    indices = np.minimum(rng.zipf(1.2, rows) - 1, vocab - 1).astype(np.int32)
    distinct = np.unique(indices)
    row_bytes = ROW_FLOATS * 4
    with tf.Graph().as_default():
        # Inputs in variables, not fed: feeding would copy them in every run and be most of what is timed.
        gathered = tf.IndexedSlices(tf.Variable(rng.random((rows, ROW_FLOATS), np.float32)).read_value(),
                                    tf.constant(indices), tf.constant([vocab, ROW_FLOATS]))
        unique = tf.IndexedSlices(tf.Variable(rng.random((len(distinct), ROW_FLOATS), np.float32)).read_value(),
                                  tf.constant(distinct), tf.constant([vocab, ROW_FLOATS]))
        table, accumulator = tf.Variable(tf.ones([vocab, ROW_FLOATS])), tf.Variable(tf.ones([vocab, ROW_FLOATS]))
        whole = tf.Variable(rng.random((vocab, ROW_FLOATS), np.float32)).read_value()
        def apply(gradient):
            return tf.group(*Adagrad(1.0).apply(table, [accumulator], gradient, 0.2, 0))
        deduplicated = deduplicate(gathered)
        operations = {
            # Each result is fetched through a sum of its first row: a tf.group of them is optimised away.
            "deduplicate": (tf.reduce_sum(deduplicated.values[:1]), rows * row_bytes),
            "apply": (apply(unique), len(distinct) * row_bytes),
            "add": (tf.reduce_sum((gathered.values + gathered.values)[:1]), rows * row_bytes),
            "densify": (tf.reduce_sum(tf.convert_to_tensor(gathered)[:1]), vocab * row_bytes),
            "apply_dense": (apply(whole), vocab * row_bytes)}
        with tf.compat.v1.Session(config=harness.determinism.session_config(args)) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            measured = {name: (quantiles(protocol_probe.timed(session, op, args.repeats)[0]), size)
                        for name, (op, size) in operations.items()}
    return {name: {"seconds_per_byte": q["median"] / size, "bytes": size, **q} for name, (q, size) in measured.items()}


def measure(args):
    """The record: protocols fitted on unshaped links, payload shares on links shaped at SHAPED, the rows' costs."""
    cpus = os.sched_getaffinity(0)
    grpc, gloo = measure_grpc_and_gloo(args)
    shaped = netns.Link.parse(SHAPED)
    shaped_grpc, shaped_gloo = measure_grpc_and_gloo(args, shaped, SHAPED_SIZES)
    shares = {"2": payload_shares({"grpc": shaped_grpc["pull_and_push"], **gloo_timings(shaped_gloo)}, shaped, 2)}
    for ranks in SHAPED_RANKS[1:]:
        shares[str(ranks)] = payload_shares(gloo_timings(measure_shaped_gloo(args, ranks, shaped)), shaped, ranks)
    collectives = {"gloo": gloo, **({name: measure_mpi(args, name) for name in MPI_TRANSPORTS} if args.mpi else {})}
    os.sched_setaffinity(0, {min(cpus)})
    try:
        rows = measure_rows(args)
    finally:
        os.sched_setaffinity(0, cpus)
    return {"machine": environment.machine(), "format": FORMAT, "sizes": args.sizes, "repeats": args.repeats,
            "protocols": protocols(grpc, collectives), "shaped_link": {"link": SHAPED, "payload_shares": shares},
            "rows": rows}


def load(results_dir):
    """The costs measured on this machine with its software and this FORMAT (results/bench-costs.json), or None."""
    path = os.path.join(results_dir, COSTS)
    if not os.path.exists(path):
        return None
    costs = results.read_json(path)
    return costs if costs.get("machine") == environment.machine() and costs.get("format") == FORMAT else None


def describe(costs):
    lines = ["protocol   operation   fixed        rate (unshaped)   the machine's CPU   per-message"]
    for name, operations in costs["protocols"].items():
        for operation, fitted in operations.items():
            if isinstance(fitted, dict):
                lines.append(f"{name:10s} {operation:11s} {fitted['fixed_seconds'] * 1e3:7.3f} ms  "
                             f"{fitted['bytes_per_second'] * 8 / 1e9:8.2f} Gbit/s   "
                             f"{fitted['cpu_seconds_per_byte'] * 1e9:5.2f} CPU s per GB")
        if "message_seconds" in operations:
            lines.append(f"{name:10s} {'message':11s} {'':27s}{operations['message_seconds'] * 1e6:9.1f} us")
        if "background_cpu_share" in operations:
            lines.append(f"{name:10s} {'background':11s} {operations['background_cpu_share']:.3f} of a core per rank "
                         f"while idle (Horovod's background thread)")
    shaped = costs["shaped_link"]
    for ranks, shares in shaped["payload_shares"].items():
        lines.append(f"payload's share of a link shaped at {shaped['link']}, {ranks} ranks (fast end, median, slow "
                     f"end): " + ", ".join(f"{name} {share['p16']:.2f} {share['median']:.2f} {share['p84']:.2f}"
                                           for name, share in shares.items()))
    lines.append("rows (one core)  seconds per GB of rows: " + ", ".join(
        f"{name} {r['seconds_per_byte'] * 1e9:.2f} "
        f"[{r['p16'] / r['bytes'] * 1e9:.2f}, {r['p84'] / r['bytes'] * 1e9:.2f}]"
        for name, r in costs["rows"].items()))
    return "\n".join(lines)


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through the emulated clusters' removal
    parser = flags.parser("bench.costs", __doc__)
    flags.DEFINE_boolean("quick", False, "small sizes and 5 repeats: seconds, not minutes", flag_values=parser)
    flags.DEFINE_boolean("mpi", True, "measure Horovod's MPI operations too (needs mpirun)", flag_values=parser)
    flags.DEFINE_integer("repeats", 15, "timed runs of each operation and size", lower_bound=3, flag_values=parser)
    args = flags.parse(parser)
    if os.geteuid() != 0:
        raise harness.UsageError("bench.costs: the emulated cluster needs root (network namespaces)")
    if args.mpi:
        mpirun.check()
    args.sizes = SIZES["quick" if args.quick else "full"]
    args.repeats = 5 if args.quick else args.repeats
    args.idle_seconds = IDLE_SECONDS["quick" if args.quick else "full"]
    costs = measure(args)
    print(describe(costs))
    path = os.path.join(args.results_dir, COSTS)
    results.write_json(path, costs)
    print(f"-> {path}")


if __name__ == "__main__":
    harness.main(main)
