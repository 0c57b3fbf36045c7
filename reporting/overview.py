"""Sections 1-3: the model and its configs, the environment of the measured runs, the architectures; and, for a
report of several models, the comparison across them that comes first."""
import statistics

from reporting import analysis, blocks, diagram

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


def comparison_section(found):
    """Several models side by side ([(model, Results)]): each one's variables, verify's verdict and, in its bench,
    the three architectures' throughput at the most workers measured, fastest first."""
    rows = []
    for model, results in found:
        reference = results.verify_run("reference")
        summary = reference.summary if reference else next((run.summary for run in results.runs.values()), None)
        sizes = diagram.sizes(summary) if summary else None
        verify = results.verify
        measured = [row for row in analysis.combine_repeats(results.bench or [])
                    if row.name in ("tf", "horovod", "parallax") and row.median]
        most = max((row.workers for row in measured), default=None)
        at_most = sorted((row for row in measured if row.workers == most), key=lambda row: -row.median)
        rows.append([model, summary["config"]["name"] if summary else "-",
                     f"{blocks.byte_count(sizes.dense_bytes)} / {blocks.byte_count(sizes.sparse_bytes)}" if sizes
                     else "-",
                     ("PASSED" if verify["passed"] else "FAILED") + f", W = {verify['config']['workers']}" if verify
                     else "not run",
                     f"W = {most}: " + ", ".join(f"{row.name} {blocks.rate(row.median)}" for row in at_most)
                     if at_most else "not run"])
    return blocks.section(
        "The models compared",
        blocks.paragraph("Each model's own sections follow, titled by its name. Here, side by side: the bytes of "
                         "its dense and its sparse variables (what the architectures move differently), make "
                         "verify's verdict, and the bench's median throughput of each architecture at the most "
                         "workers it measured, fastest first, in the model's own unit."),
        blocks.table(["model", "config", "dense / sparse variables", "verify", "bench"], rows,
                     "The models of this report."))


def environment_section(results):
    recorded = []
    for run in results.runs.values():  # each host the launcher recorded, else the chief's, as the summary has it
        summary = run.summary.get("environment") or {}
        recorded += [(run.name, {**summary, **host["environment"],
                                 "hostnames": [host["environment"].get("hostname", host["host"])]})
                     for host in run.hosts or []] or [(run.name, summary)]
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
        blocks.paragraph("Where the measured runs ran: every host of a distributed run, as the launcher recorded "
                         "it (<run>.hosts.json), else the chief's machine, as the run's summary records it; runs "
                         "that ran in the same environment share a column."),
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
    ("OS", lambda e: " ".join(filter(None, (e.get("os"), e.get("platform") and f"({e['platform']})")))
     or NOT_RECORDED),
    ("Python", lambda e: e.get("python") or NOT_RECORDED),
    ("TensorFlow", lambda e: e.get("tensorflow") or NOT_RECORDED),
    ("Horovod", lambda e: e.get("horovod") or "not installed"),
    ("MPI", lambda e: e.get("mpi") or ("none" if "mpi" in e else NOT_RECORDED)),
    ("numpy", lambda e: e.get("numpy") or NOT_RECORDED),
    ("threads (intra-op / inter-op)", lambda e: f"{e.get('intra_op_threads')} / {e.get('inter_op_threads')}"),
]


def _links(results, run_names):
    """What joined the tasks: the verify runs' --hosts, the bench's emulated link rates, else loopback."""
    hosts = sorted({arg.split("=", 1)[1] for run in (results.verify or {}).get("runs", [])
                    if f"verify-{run['name']}" in run_names for arg in run["command"] if arg.startswith("--hosts=")})
    benched = [name for name in run_names if name.startswith("bench ")]
    rates = sorted({row.link for row in results.bench or [] if row.links == "emulated"})
    real = sorted({row.link for row in results.bench or [] if row.links == "real"})
    described = []
    if len(benched) < len(run_names):
        described.append(f"over ssh to {', '.join(hosts)}" if hosts else "one machine, loopback, unshaped")
    if benched:
        described.append(f"bench: emulated links of {', '.join(rates)}" if rates else
                         f"bench: real hosts ({'; '.join(real)})" if real else
                         "bench: loopback, unshaped (links not emulated)")
    return "; ".join(described)


def architecture_paragraphs(sizes, tied=()):
    """(title, text) of each architecture, saying what moves for this model's variables: its sparse ones by name,
    none where it has none; `tied`: variables looked up by rows but also read whole, so with dense gradients."""
    sparse = " and ".join(sizes.sparse_names) if sizes and sizes.sparse_names else None
    whole = (f" ({' and '.join(tied)}: looked up by rows, but also read whole, as a tied output layer reads it, so "
             f"{'its' if len(tied) == 1 else 'their'} gradient is dense)" if tied else "")
    ring = ("With two workers every sum is one commutative addition; with more, the ring adds in its own order. "
            "Runs named \"exact reduction\" (--reduction=exact) add the workers' dense gradients in rank order "
            "instead, Horovod only moving bytes (an alltoall, then an allgather): identical to the reference at "
            "any W; every other Horovod run in this report is Horovod's own allreduce.")
    if sparse:
        allreduce = (f"Every worker holds every variable. Dense gradients are averaged by Horovod's ring allreduce; "
                     f"the sparse gradient of {sparse} is allgathered (rows and indices), or with --sparse_as_dense "
                     f"summed into a dense tensor and allreduced{whole}. {ring}")
        hybrid = (f"The kind of each variable's gradient decides where it lives: the sparse ones ({sparse}) on the "
                  f"parameter servers, aggregated there as in run_tf.py; the dense ones replicated on the workers "
                  f"and allreduced as in run_horovod.py{whole}. With --local_aggregation the workers of one machine "
                  f"sum their sparse gradients first and send one per machine.")
    else:
        allreduce = (f"Every worker holds every variable, and every gradient of this model is dense{whole}: all are "
                     f"averaged by Horovod's ring allreduce, and --sparse_as_dense changes nothing. {ring}")
        hybrid = (f"The kind of each variable's gradient decides where it lives, and this model has no sparse "
                  f"gradient{whole}: every variable is replicated on the workers and allreduced, as in "
                  f"run_horovod.py, and the parameter servers hold nothing; --local_aggregation has nothing to sum.")
    return [
        ("Parameter servers, synchronous (run_tf.py).",
         f"Every worker builds the same graph; the variables live on the parameter servers, greedy by size"
         f"{f', {sparse} optionally in parts' if sparse else ''}. In step t each worker puts its gradient, tagged t, "
         f"into a queue of its own on each parameter server; the chief takes exactly one from each worker in "
         f"worker order, averages, applies the update and releases every worker for step t+1. One gradient per "
         f"worker per step, none stale, summed in worker order: the reference's bits for any number of workers."),
        ("Parameter servers, asynchronous (run_tf.py --sync=false).",
         "Every worker applies its own gradient (of its share of the batch) to whatever the variables hold when it "
         "arrives. No worker waits, and the updates are stale: between a worker's read and its write, others "
         "update."),
        ("Allreduce (run_horovod.py).", allreduce),
        ("Hybrid (run_parallax.py, Parallax's architecture).", hybrid),
    ]


def architecture_section(results, figure_path):
    verify = results.verify
    # The verify runs' config (the figure's worker and PS counts are theirs), else any run's.
    reference = results.verify_run("reference")
    summary = reference.summary if reference else next((run.summary for run in results.runs.values()), None)
    sizes = diagram.sizes(summary) if summary else None
    tied = [name for name, v in (summary or {}).get("variables", {}).items() if v["kind"] == "dense"
            and v.get("looked_up")]
    parts = [blocks.paragraph(text, lead=title) for title, text in architecture_paragraphs(sizes, tied)]
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
        + (f"sparse ({', '.join(sizes.sparse_names)}) {blocks.byte_count(sizes.sparse_bytes)} "
           f"({blocks.byte_count(sizes.row_bytes)} a row); {rows_note}" if sizes.sparse_names
           else "no sparse variable") + ". Sizes from the variables the summaries record."))
    return blocks.section("How each architecture synchronises", *parts)
