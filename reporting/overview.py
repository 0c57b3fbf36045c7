"""Sections 1-3: the model and its configs, the environment of the measured runs, the architectures."""
import statistics

from reporting import blocks, diagram

NOT_RECORDED = "not recorded"


def model_section(results):
    configs, described = {}, {}
    for run in results.runs.values():  # each config's own update rule beside its fields
        configs.setdefault(run.summary["config"]["name"],
                           {**run.summary["config"], "update rule": run.summary.get("update_rule", NOT_RECORDED)})
        described.setdefault(run.summary.get("model", "lstm"), run.summary.get("model_description", ""))
    bench_only = sorted({row.config for row in results.bench or []} - set(configs))
    fields = list(dict.fromkeys(field for config in configs.values() for field in config if field != "name"))
    names = sorted(configs)
    return blocks.section(
        "Model, paper and code",
        *[blocks.paragraph(text, lead=f"{name}.") for name, text in sorted(described.items())],
        blocks.paragraph(
            "A variable read by rows (an embedding) has a sparse gradient, the looked-up rows only; every other "
            "gradient is dense: the mix on which parameter servers, allreduce and Parallax's hybrid differ. Every "
            "runner builds the model's one graph and applies its one update, seeded, so that the trained "
            "parameters can be compared bit for bit."),
        blocks.paragraph(
            "Code: this repository. run.py is the single-device reference, run_tf.py TensorFlow's parameter servers "
            "(between-graph replication), run_horovod.py Horovod's allreduce, run_parallax.py Parallax's hybrid "
            "architecture (Kim et al., EuroSys 2019, arXiv:1808.02621) rebuilt on TensorFlow's distributed runtime "
            "and Horovod: Parallax itself needs a TensorFlow 1.x fork and Python 3.6 and cannot be installed on a "
            "current Python."),
        blocks.table(["field", *names], [[field, *(configs[n].get(field, "-") for n in names)] for field in fields],
                     "The configs of the measured runs, as their summaries record them.")
        if configs else blocks.missing("no run summaries in the results: make verify"),
        blocks.paragraph(f"Configs benchmarked but not in any run summary: {', '.join(bench_only)}.")
        if bench_only else None)


def environment_section(results):
    recorded = [(run.name, run.summary.get("environment") or {}) for run in results.runs.values()]
    recorded += [(f"bench {row.name} W={row.workers}", row.environment) for row in results.bench or []
                 if row.environment]
    environments = {}
    for name, environment in recorded:
        described = tuple((label, value(environment)) for label, value in ENVIRONMENT_ROWS)
        if name not in environments.setdefault(described, []):
            environments[described].append(name)
    if not environments:
        return blocks.section("Environment", blocks.missing("no run summaries in the results: make verify"))
    columns = list(environments.items())
    header = ["", *(f"{len(names)} run{'s' * (len(names) > 1)}" if len(columns) > 1 else f"all {len(names)} runs"
                    for _, names in columns)]
    rows = [[label, *(dict(described)[label] for described, _ in columns)] for label, _ in ENVIRONMENT_ROWS]
    rows.append(["links", *(_links(results, names) for _, names in columns)])
    return blocks.section(
        "Environment",
        blocks.paragraph("Where the measured runs ran, as each run's summary records it (the chief's machine); "
                         "runs that ran in the same environment share a column."),
        blocks.table(header, rows, "The environment of the runs."),
        blocks.paragraph("Runs per column: " + "; ".join(f"{i + 1}: {', '.join(names)}"
                                                         for i, (_, names) in enumerate(columns)))
        if len(columns) > 1 else None)


def _gib(n):
    return f"{n / 2**30:.1f} GiB" if n else NOT_RECORDED


ENVIRONMENT_ROWS = [
    ("machines", lambda e: ", ".join(e.get("hostnames") or []) or NOT_RECORDED),
    ("CPU", lambda e: e.get("cpu_model") or NOT_RECORDED),
    ("cores", lambda e: str(e.get("cpu_cores") or NOT_RECORDED)),
    ("memory", lambda e: _gib(e.get("memory_bytes"))),
    ("GPU", lambda e: ", ".join(e["gpus"]) or "none" if "gpus" in e else f"{NOT_RECORDED} in the summaries"),
    ("OS", lambda e: e.get("platform") or NOT_RECORDED),
    ("Python", lambda e: e.get("python") or NOT_RECORDED),
    ("TensorFlow", lambda e: e.get("tensorflow") or NOT_RECORDED),
    ("Horovod", lambda e: e.get("horovod") or "not installed"),
    ("numpy", lambda e: e.get("numpy") or NOT_RECORDED),
    ("threads (intra-op / inter-op)", lambda e: f"{e.get('intra_op_threads')} / {e.get('inter_op_threads')}"),
]


def _links(results, run_names):
    """What joined the tasks: the verify runs' --hosts, the bench's emulated link rates, else loopback."""
    hosts = sorted({arg.split("=", 1)[1] for run in (results.verify or {}).get("runs", [])
                    if f"verify-{run['name']}" in run_names for arg in run["command"] if arg.startswith("--hosts=")})
    benched = [name for name in run_names if name.startswith("bench ")]
    rates = sorted({row.link for row in results.bench or [] if row.link})
    described = []
    if len(benched) < len(run_names):
        described.append(f"over ssh to {', '.join(hosts)}" if hosts else "one machine, loopback, unshaped")
    if benched:
        described.append(f"bench: emulated links of {', '.join(rates)}" if rates else "bench: loopback, unshaped")
    return "; ".join(described)


ARCHITECTURES = [
    ("Parameter servers, synchronous (run_tf.py).",
     "Every worker builds the same graph; the variables live on the parameter servers, greedy by size, the "
     "embedding optionally in parts. In step t each worker puts its gradient, tagged t, into a queue of its own on "
     "each parameter server; the chief takes exactly one from each worker in worker order, averages, applies the "
     "update and releases every worker for step t+1. One gradient per worker per step, none stale, summed in "
     "worker order: the reference's bits for any number of workers."),
    ("Parameter servers, asynchronous (run_tf.py --sync=false).",
     "Every worker applies its own gradient (of its share of the batch) to whatever the variables hold when it "
     "arrives. No worker waits, and the updates are stale: between a worker's read and its write, others update."),
    ("Allreduce (run_horovod.py).",
     "Every worker holds every variable. Dense gradients are averaged by Horovod's ring allreduce; the embedding's "
     "sparse gradient is allgathered (rows and indices), or with --sparse_as_dense summed into a dense tensor and "
     "allreduced. With two workers every sum is one commutative addition; with more, the ring adds in its own "
     "order."),
    ("Hybrid (run_parallax.py, Parallax's architecture).",
     "The kind of each variable's gradient decides where it lives: sparse ones (the embedding) on the parameter "
     "servers, aggregated there as in run_tf.py; dense ones replicated on the workers and allreduced as in "
     "run_horovod.py. With --local_aggregation the workers of one machine sum their sparse gradients first and "
     "send one per machine."),
]


def architecture_section(results, figure_path):
    verify = results.verify
    # The verify runs' config (the figure's worker and PS counts are theirs), else any run's.
    reference = results.verify_run("reference")
    summary = reference.summary if reference else next((run.summary for run in results.runs.values()), None)
    sizes = diagram.sizes(summary) if summary else None
    parts = [blocks.paragraph(text, lead=title) for title, text in ARCHITECTURES]
    if sizes is None:
        parts.append(blocks.missing("no figure of the architectures: no run summary records its variables"))
        return blocks.section("How each architecture synchronises", *parts)
    workers = verify["config"]["workers"] if verify else 2
    ps = verify["config"]["ps"] if verify else 1
    parallax = results.verify_run("parallax")
    rows = [r["sparse_rows_received"] for r in (parallax.steps if parallax else []) if "sparse_rows_received" in r]
    rows_per_step = statistics.median(rows) if rows else None
    diagram.architectures(sizes, workers, ps, rows_per_step, figure_path)
    rows_note = (f"the parameter servers received a median of {rows_per_step:.0f} sparse rows per step in the "
                 f"verify run of run_parallax.py" if rows_per_step
                 else "the sparse rows per step were not measured (no run_parallax.py verify run)")
    parts.append(blocks.figure(
        figure_path, f"Where the variables of the {sizes.config} config live and what one step moves, with "
        f"{workers} workers and {ps} PS as in the verify runs: dense variables {blocks.byte_count(sizes.dense_bytes)}, "
        f"sparse ({', '.join(sizes.sparse_names) or 'none'}) {blocks.byte_count(sizes.sparse_bytes)} "
        f"({blocks.byte_count(sizes.row_bytes)} a row); {rows_note}. Sizes from the variables the summaries record."))
    return blocks.section("How each architecture synchronises", *parts)
