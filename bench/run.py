"""make bench: each architecture's throughput on an emulated cluster, its bytes against the traffic model.

    python -m bench.run --net=100mbit                                         (make bench NET=100mbit)
    python -m bench.run --quick                                               (make bench BENCH=quick)

Sweeps runners x workers x configs x repeats, a machine per worker; each run adds a line to
<results_dir>/bench.jsonl (docs/outputs.md), the end prints a table per config. docs/bench.md explains it.
"""
import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not __package__:  # run as a file (python bench/run.py): the repository's packages are beside bench/
    sys.path.insert(0, REPO)
import harness.determinism  # (first: it fixes TensorFlow's kernels)
from harness import environment, experiments, flags, models, results
from launcher import preflight, tasks
from harness.experiments import RUNS
from launcher.machines import Emulated, Hosts, Loopback, define_flags
from launcher.starters import netns

from bench import costs, crossover, link_probe, predict, protocol_probe, traffic

HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
# Without root the machines cannot be emulated: every task runs on this machine's loopback.
NOT_EMULATED = ("links not emulated: every task on this machine's loopback, unshaped (network namespaces need "
                "root); no bytes counted, no model applied")
ASYNCHRONOUS = ("asynchronous: each worker steps at its own pace, so the step time does not compare with the "
                "model's synchronous step; the bytes are predicted for the workers' paces")
PEAK_RESIDENT = re.compile(rf"^launch: {tasks.TASKS_PEAK_MEMORY}: (.*)$", re.MULTILINE)


def parse_flags(argv=None):
    parser = flags.parser("bench", __doc__)
    # --hosts: the links between them measured first (bench.link_probe) and each host's bytes counted on its
    # interface; every host holds a worker, and what runs there write is copied back where not shared
    define_flags(parser, net="several")
    flags.DEFINE_names("configs", None, "configs to sweep (default: the model's BENCH_CONFIGS, or its first)",
                       parser)
    flags.DEFINE_names("runners", experiments.DISTRIBUTED, "runners to sweep", parser, known=experiments.DISTRIBUTED)
    flags.DEFINE_names("workers", ["1", "2", "4"], "worker counts to sweep", parser)
    flags.DEFINE_integer("ps", 0, "parameter-server tasks of every run; 0: one per machine (Parallax's setup)",
                         lower_bound=0, flag_values=parser)
    flags.DEFINE_enum("scaling", "weak", ["weak", "strong"], "weak: each worker keeps the config's batch (the "
                      "global batch grows with W); strong: the W workers share it", flag_values=parser)
    flags.DEFINE_integer("repeats", 1, "runs of each combination (3: about three times as long)", lower_bound=1,
                         flag_values=parser)
    flags.DEFINE_boolean("quick", False, "one repeat, W = 2 (W = 1 is run.py's one device), 16 steps of which 6 "
                         "warm-up, the model's first config unless --configs says otherwise: minutes",
                         flag_values=parser)
    flags.DEFINE_boolean("crossover", False, "the crossover sweep: the model's most sparse-heavy config, horovod "
                         "(allgather) against parallax (the hybrid) at W = 2, 4, 6, 8, unless --configs, --runners, "
                         "--workers say "
                         "otherwise; written to bench-crossover.jsonl, where the hybrid overtakes printed",
                         flag_values=parser)
    flags.DEFINE_integer("max_run_seconds", 300, "skip a run whose point estimate times its steps exceeds this",
                         lower_bound=1, flag_values=parser)
    # Short runs keep the default sweep within an hour (docs/bench.md, "Warm-up", for what longer runs show).
    parser.set_default("steps", 24)
    parser.set_default("warmup_steps", 4)
    args = flags.parse(parser, argv)
    if args.batch_size:
        raise harness.UsageError("--batch_size: the bench sets each run's (--scaling)")
    args.swept = swept_machines(args)
    model = models.load(args.model)
    if args.quick:
        args.repeats, args.workers, args.steps, args.warmup_steps = 1, ["2"], 16, 6
    args.configs = args.configs or ([next(iter(model.CONFIGS))] if args.quick else models.bench_configs(model))
    if len({machines.name for machines in args.swept}) < len(args.swept):
        raise harness.UsageError(f"--net: a rate named twice ({', '.join(m.name for m in args.swept)})")
    if args.crossover and len(args.swept) > 1:
        raise harness.UsageError("--crossover: one --net rate (the crossover of each rate is a sweep of its own)")
    if args.crossover:
        for name, value in (("runners", [crossover.ALLGATHER, crossover.HYBRID]), ("workers", ["2", "4", "6", "8"])):
            if not parser[name].present:
                setattr(args, name, value)
        if not parser["configs"].present:
            args.configs = [max(model.CONFIGS, key=lambda name: traffic.sparse_share(model, name, args))]
    for name in args.configs:
        if name not in model.CONFIGS:
            raise harness.UsageError(f"--configs: model {args.model} has no config {name!r} (it has "
                                     f"{', '.join(model.CONFIGS)})")
    if args.swept[0].slots and not parser["workers"].present:  # a worker a slot
        args.workers = [str(args.swept[0].slots)]
    if not all(w.isdigit() and int(w) >= 1 for w in args.workers):
        raise harness.UsageError(f"--workers={','.join(args.workers)}: expected worker counts, each at least 1")
    args.workers = [int(w) for w in args.workers]
    for machines in args.swept:
        machines.check_workers(args.workers)
    for name in args.configs:
        for w in args.workers:
            if args.scaling == "strong" and models.config(model, name).batch_size % w:
                raise harness.UsageError(f"--workers: {w} workers do not divide {name}'s batch of "
                                         f"{models.config(model, name).batch_size} rows")
    return args


def swept_machines(args):
    """The machines of --hosts or of each --net rate (launcher.machines), checked."""
    if args.hosts:  # their links are measured (main), not emulated
        if args.net or args.delay:
            raise harness.UsageError("--net, --delay: not with --hosts (the hosts' links are measured, not emulated)")
        if len({host for host, _ in args.hosts}) < 2:
            raise harness.UsageError("--hosts: two or more hosts (one host's tasks cross no link)")
        for flag in ("results_dir", "ckpt_dir"):  # the hosts write there; this machine reads it back
            if not os.path.abspath(getattr(args, flag)).startswith(os.path.join(os.getcwd(), "")):
                raise harness.UsageError(f"--{flag}={getattr(args, flag)}: with --hosts, a directory under this "
                                         f"working directory, which every host has at the same path")
        return [Hosts(hosts=tuple(args.hosts), ssh_config=args.ssh_config)]
    links = args.net or [netns.Link.parse("100mbit") if os.geteuid() == 0 else None]
    if args.net is None and links[0] is None:
        print(f"bench: not root, so {NOT_EMULATED}", flush=True)
    emulated = [link for link in links if link]
    if emulated and os.geteuid() != 0:
        raise harness.UsageError(f"--net={','.join(link.rate for link in emulated)}: emulated links need root "
                                 f"(network namespaces, tc); without root, --net=loopback")
    if args.delay:
        if len(emulated) < len(links):
            raise harness.UsageError("--delay: not with --net=loopback (nothing is emulated)")
        links = [dataclasses.replace(link, delay=args.delay) for link in links]
    return [Emulated(link=link) if link else Loopback() for link in links]


def common_flags(args, run_name):
    return [*flags.passed_on(args), f"--log_every={args.warmup_steps or args.steps}", f"--results_dir={args.runs_dir}",
            f"--run_name={run_name}", f"--ckpt_dir={os.path.join(args.ckpt_dir, run_name)}"]


def run_quietly(commands, what):
    """Run `commands` at once and return their output; if one fails, stop the rest and exit with its last lines.
    Stopping the bench stops the runs too, so that each launcher removes its machines."""
    processes, failed = [], None
    with contextlib.ExitStack() as files:
        logs = [(files.enter_context(tempfile.TemporaryFile("w+")), files.enter_context(tempfile.TemporaryFile("w+")))
                for _ in commands]
        try:
            for command, (out, err) in zip(commands, logs):
                processes.append(subprocess.Popen(command, stdout=out, stderr=err, text=True,
                                                  env={**os.environ, "PYTHONPATH": REPO}))
            while any(p.poll() is None for p in processes) and not any(p.poll() for p in processes):
                time.sleep(0.1)
            failed = next((i for i, p in enumerate(processes) if p.poll()), None)
        finally:
            for p in processes:
                if p.poll() is None:
                    p.terminate()
                    p.wait()
        outputs = []
        for out, err in logs:
            out.seek(0), err.seek(0)
            outputs.append(out.read() + err.read())
    if failed is not None:
        tail = "\n".join(outputs[failed].strip().splitlines()[-15:])
        raise SystemExit(f"bench: {what} failed (exit {processes[failed].returncode}):\n{tail}")
    return "".join(outputs)


def tasks_peak_resident_bytes(output):
    """The sum of the peak resident memory of the tasks (the launcher's line; not its own), or None."""
    peaks = [int(mib.replace(",", "")) * 2**20 for line in PEAK_RESIDENT.finditer(output)
             for mib in re.findall(r" ([\d,]+) MiB", line[1])]
    return sum(peaks) if peaks else None


def run_config(args, num_workers):
    """The config of a run of `num_workers` workers: weak scaling gives each worker the config's batch."""
    config = models.config(models.load(args.model), args.config)
    if args.scaling == "weak":
        return dataclasses.replace(config, batch_size=config.batch_size * num_workers)
    return config


def one_device(args, machines):
    """run.py's throughput on one device: the compute of the config's batch, and the base of every speed-up."""
    name, host = f"bench-{args.config}-one-device", machines.worker_hosts(1)[0]
    run_quietly([machines.command(host, [sys.executable, os.path.join(REPO, "run.py"), *common_flags(args, name),
                                         "--emulate_workers=1"])],
                f"run.py (the compute time of {args.config})")
    machines.fetch(host, [results.summary_path(args.runs_dir, name)])
    return results.read_json(results.summary_path(args.runs_dir, name), "summary")["throughput"]


def step_trace(args):
    """bench.step_trace's {"needed": {variable: fraction of the step}, "ready": {...}}, for the point's overlaps."""
    output = run_quietly([[sys.executable, "-m", "bench.step_trace", *flags.passed_on(args)]],
                         f"bench.step_trace (when {args.config}'s step reads its variables and has its gradients)")
    return next(json.loads(line) for line in output.splitlines() if line.startswith('{"needed"'))


def synchronous_compute(args, machines, num_workers, kind="compute"):
    """(compute seconds of a synchronous W-worker step, the runs' names): the median step of the slowest of W run.py
    at once on a worker's batch each, each where its worker runs. Measured, not scaled: copies at once on one
    machine run slower than one alone."""
    batch_size = run_config(args, num_workers).batch_size // num_workers
    names = [f"bench-{args.config}-{kind}-{machines.name}-w{num_workers}-{c}" for c in range(num_workers)]
    run_quietly([machines.command(host, [sys.executable, os.path.join(REPO, "run.py"), *common_flags(args, name),
                                         f"--batch_size={batch_size}"])
                 for name, host in zip(names, machines.worker_hosts(num_workers))],
                f"{num_workers} run.py at once (the compute of {args.config} at W={num_workers})")
    for name, host in zip(names, machines.worker_hosts(num_workers)):
        machines.fetch(host, [results.steps_path(args.runs_dir, name)])
    seconds = [[r["seconds"] for _, r in results.read_lines(results.steps_path(args.runs_dir, name), "step")
                if r["step"] >= args.warmup_steps] for name in names]
    for name in names:  # their final checkpoints (lm1b's are large) are never read
        shutil.rmtree(os.path.join(args.ckpt_dir, name), ignore_errors=True)
    return statistics.median(max(step) for step in zip(*seconds)), names


def compute_terms(args, machines, num_workers, dense_bytes):
    """(synchronous_compute's seconds, its runs' names, those seconds beside W Horovod ranks allreducing
    `dense_bytes` once a compute step): the last shows what communication on the shared cores takes."""
    period, names = synchronous_compute(args, machines, num_workers)
    # the ranks on the cores the workers compute on: this machine's (horovodrun here), or hosts of their own (the
    # probe's own launch over ssh; there the links, not the cores, may pace the allreduce). The probe says when it
    # is ready on its output; a file made where its first rank runs (that host's own /tmp) stops it.
    apart = machines.apart
    placed = machines.worker_hosts(num_workers)
    stop = os.path.join("/tmp", f"lstm-bench-beside-{os.getpid()}-{num_workers}")

    def where_rank_0(argv):
        return machines.command(placed[0], argv) if apart else argv
    with tempfile.NamedTemporaryFile("w") as log:
        probe = [sys.executable, "-m", "bench.protocol_probe", "--probe=beside", f"--sizes={dense_bytes}",
                 f"--period={period}", f"--stop_file={stop}"]
        hosts = ",".join(f"{host}:{placed.count(host)}" for host in dict.fromkeys(placed)) if apart else None
        job = subprocess.Popen([*probe, f"--hosts={hosts}"] if hosts else
                               [HOROVODRUN, "--gloo", "-np", str(num_workers), "-H", f"localhost:{num_workers}",
                                *probe],
                               stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                               env={**os.environ, "PYTHONPATH": REPO})
        seconds = None
        try:
            while protocol_probe.READY not in open(log.name).read() and job.poll() is None:
                time.sleep(0.1)
            if job.poll() is None:
                seconds = synchronous_compute(args, machines, num_workers, "beside")[0]
                subprocess.run(where_rank_0(["touch", stop]), check=True)
                job.wait(timeout=60 + period)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGTERM)
                job.wait()
            subprocess.run(where_rank_0(["rm", "-f", stop]))
        if job.returncode or seconds is None:
            tail = "\n".join(open(log.name).read().strip().splitlines()[-15:])
            raise SystemExit(f"bench: the allreduce beside the compute failed (exit {job.returncode}):\n{tail}")
    return period, names, seconds


def machine_of_tasks(addresses, workers, servers):
    index = {address: i for i, address in enumerate(addresses)}
    return {**{f"worker{w}": index[a] for w, a in enumerate(workers)},
            **{f"ps{p}": index[a] for p, a in enumerate(servers)}}


def estimate_costs(args, machines, num_workers):
    """The costs of the interval's fast end, its point and its slow end: bench.costs's measurements at the links'
    fast end, median and slow end (bytes only where none were measured: no root), plus the hosts' measured latency
    on every message (--hosts). The emulated machines all share this machine's cores; hosts their own unless they
    are one machine (measure_links)."""
    if args.measured_costs:
        measured = functools.partial(traffic.Costs.measured, args.measured_costs, num_workers,
                                     shared_cores=machines.shared_cores)
        estimates = {"lower": measured(quantile="p16"), "point": measured(quantile="median"),
                     "upper": measured(quantile="p84")}
    else:
        estimates = dict.fromkeys(("lower", "point", "upper"), traffic.Costs())
    estimates["upper"] = dataclasses.replace(estimates["upper"], serial=True)
    if machines.latency_seconds is not None:
        estimates = {name: with_latency(c, machines.latency_seconds) for name, c in estimates.items()}
    return estimates


def with_latency(costs, seconds):
    """`costs` with `seconds` more on every message of every transport."""
    transports = set(costs.transports.values())
    return dataclasses.replace(costs, message_seconds={t: costs.message_seconds.get(t, 0.0) + seconds
                                                       for t in transports | set(costs.message_seconds)})


def model_terms(args, machines, architecture, variables, rows, num_workers, num_ps, machine_of, partitions,
                compute_term, beside_seconds, alone_seconds, trace):
    """The traffic model's bytes per machine [(sent, received)] and the step-time terms (fields in docs/outputs.md).
    docs/bench.md, "The model: an interval and a point", explains the lower, point and upper estimates."""
    costs = estimate_costs(args, machines, num_workers)
    cores = machines.cores
    def protocol_cpu(architecture):
        return traffic.protocol_cpu_seconds(architecture, variables, rows, num_workers, num_ps, machine_of,
                                            partitions, costs=costs["upper"])
    # what the dense allreduce beside took, in proportion to this run's protocol CPU
    beside_cpu = protocol_cpu("allreduce-dense")
    interference = (max(0.0, beside_seconds - compute_term) * protocol_cpu(architecture) / beside_cpu
                    if beside_cpu else 0.0)
    # a worker's share of it: at most min(W, cores) of the W copies computed at any moment
    own_compute = alone_seconds + interference * min(num_workers, cores) / num_workers
    def network(estimate, **overlaps):
        return traffic.predict(architecture, variables, rows, num_workers, num_ps, machine_of,
                               machines.link.bits_per_second / 8, partitions, costs=costs[estimate], **overlaps)
    predicted, point_network, update = network("point", compute_seconds=own_compute, needed=trace["needed"],
                                               ready=trace["ready"])
    lower_network, upper_network = network("lower", overlap_phases=True)[1], network("upper")[1]
    # Horovod's background threads each take their share of a core all the time
    background = 0.0 if architecture == "ps" else own_compute * num_workers * costs["point"].background_share / cores
    path = own_compute + background + update + point_network
    lower_compute = alone_seconds * max(1.0, num_workers / cores)
    lower = max(lower_compute + update, lower_network)
    upper = compute_term + update + interference + background + upper_network
    return predicted, {"compute_seconds": compute_term, "lower_compute_seconds": lower_compute,
                       "compute_beside_seconds": beside_seconds, "interference_seconds": interference,
                       "own_compute_seconds": own_compute, "update_seconds": update, "background_seconds": background,
                       "network_seconds": point_network, "lower_network_seconds": lower_network,
                       "upper_network_seconds": upper_network, "path_seconds": path,
                       "point_seconds": min(max(compute_term + update, path, lower), upper),
                       "lower_seconds": lower, "upper_seconds": upper}


def one_run(args, machines, runner, num_workers, repeat, variables, rows, one_device_throughput, compute, trace):
    """Run one combination and return its bench.jsonl record (or a skip record); `compute` and `trace` are None
    on loopback, where no model applies."""
    run = RUNS[runner]
    architecture, runner_flags = run.architecture, list(run.flags)
    batch_size = run_config(args, num_workers).batch_size
    num_ps = args.ps or machines.default_ps(num_workers)
    # With parameter servers, every sparse variable in one part per server (round robin), as Parallax runs it.
    partitions = num_ps if architecture in ("tf", "parallax") else 1
    if partitions > 1:
        runner_flags = [*runner_flags, f"--partitions={partitions}"]
    record = {"runner": runner, "architecture": architecture, "runner_flags": runner_flags, "config": args.config,
              "scaling": args.scaling, "batch_size": batch_size,
              "words_per_step": models.units_per_step(models.load(args.model), run_config(args, num_workers)),
              "workers": num_workers, "ps": num_ps, "steps": args.steps, "warmup_steps": args.warmup_steps,
              "partitions": partitions, "machines": machines.count(num_workers), **machines.record(),
              "repeat": repeat, "one_device_words_per_sec": one_device_throughput["median"],
              "unit": one_device_throughput["unit"],
              "compute_seconds_one_device": one_device_throughput["median_step_seconds"],
              "cores_shared": num_workers > machines.cores}
    if machines.priced:
        machine_of = machine_of_tasks(*machines.placement(num_workers, num_ps))  # where the launcher puts them
        compute_term, compute_run_names, beside_seconds = compute
        # one worker's compute alone: one device's step, per row of a worker's batch (under strong scaling a worker
        # has fewer rows than one device, and fewer rows cost at least their share)
        alone = (one_device_throughput["median_step_seconds"] * batch_size / num_workers /
                 run_config(args, 1).batch_size)
        predicted, terms = model_terms(args, machines, run.traffic, variables, rows, num_workers, num_ps,
                                       machine_of, partitions, compute_term, beside_seconds, alone, trace)
        record.update(compute_run_names=compute_run_names,
                      predicted_bytes_per_step=[{"sent": s, "received": r} for s, r in predicted])
        point = terms["point_seconds"]
        if point * args.steps > args.max_run_seconds:
            return dict(record, skipped=f"its point estimate is {point:.1f} s a step, "
                                        f"{point * args.steps / 60:.0f} minutes for {args.steps} steps "
                                        f"(--max_run_seconds={args.max_run_seconds})")
    run_name = f"bench-{args.config}-{runner}-{machines.name}-w{num_workers}-r{repeat}"
    output = run_quietly([[sys.executable, "-m", "launcher", architecture, f"--workers={num_workers}",
                           f"--ps={num_ps}", *machines.bench_flags(),
                           "--", *common_flags(args, run_name), f"--batch_size={batch_size}", *runner_flags]],
                         f"{runner} at W={num_workers}")
    summary = results.read_json(results.summary_path(args.runs_dir, run_name), "summary")
    step = summary["throughput"]["median_step_seconds"]
    record = dict(record, run_name=run_name, throughput=summary["throughput"],
                  tasks_peak_resident_bytes=tasks_peak_resident_bytes(output))
    if not machines.priced:
        unmodelled = ("predicted_bytes_per_step", "measured_bytes_per_step", "bytes_measured_over_predicted",
                      "compute_seconds", "network_seconds", "point_seconds", "lower_seconds", "upper_seconds",
                      "step_over_point", "inside_interval")
        return dict(record, outside_the_model=NOT_EMULATED, **dict.fromkeys(unmodelled))
    counted = results.read_json(results.network_path(args.runs_dir, run_name))
    if counted is None:  # the launcher saw no counters of some host at the measured steps' ends
        raise SystemExit(f"bench: {runner} at W={num_workers}: its bytes were not counted over the measured steps "
                         f"({results.network_path(args.runs_dir, run_name)} is empty)")
    if machines.real:
        record["hosts"] = results.read_json(results.hosts_path(args.runs_dir, run_name), "hosts")["hosts"]
    measured = [(m["sent_bytes_per_step"], m["received_bytes_per_step"]) for m in counted["machines"]]
    record = dict(record, measured_bytes_per_step=[{"sent": s, "received": r} for s, r in measured],
                  measured_steps_counted=counted["steps"])
    if run.asynchronous:  # the workers' steps differ in number: no step of every worker to price
        paces = worker_paces(summary["updates_by_worker"], counted["from_step"], counted["to_step"])
        predicted = traffic.paced_link_bytes(run.traffic, variables, rows, num_workers, num_ps, machine_of, paces,
                                             partitions)
        unpriced = {key: None for key in terms if key != "compute_seconds"}
        return dict(record, outside_the_model=ASYNCHRONOUS, **{**terms, **unpriced}, worker_paces=paces,
                    predicted_bytes_per_step=[{"sent": s, "received": r} for s, r in predicted],
                    bytes_measured_over_predicted=bytes_ratio(measured, predicted),
                    step_over_point=None, inside_interval=None)
    return dict(record, bytes_measured_over_predicted=bytes_ratio(measured, predicted),
                **terms, step_over_point=step / point,
                inside_interval=terms["lower_seconds"] <= step <= terms["upper_seconds"])


def worker_paces(updates_by_worker, from_step, to_step):
    """Each worker's updates per chief step from from_step to to_step, from an asynchronous run's updates_by_worker."""
    counts = {entry["after_step"]: entry["counts"] for entry in updates_by_worker}
    return [(end - begin) / (to_step - from_step) for begin, end in zip(counts[from_step], counts[to_step])]


def measured(args, machines):
    """`machines` with their links measured (bench.link_probe), after the preflight, and their cores; as they are
    if nothing of theirs is measured (loopback, emulated links)."""
    if not machines.real:
        return machines
    starter = machines.starter
    preflight.check(starter, model=models.path_of(args.model))
    hosts = [host for host, _ in machines.hosts]
    print(f"bench: measuring the links between {', '.join(hosts)} (python -m bench.link_probe)", flush=True)
    links = link_probe.measure(starter, hosts)
    print(link_probe.describe(links), flush=True)
    found = [starter.environment(host) for host in hosts]
    if len({e["boot_id"] for e in found}) == 1 and found[0]["boot_id"]:  # one kernel: one machine's cores
        print(f"bench: {', '.join(hosts)} run on one machine (one kernel's boot): their tasks share its "
              f"{found[0]['cpu_cores']} cores", flush=True)
        return dataclasses.replace(machines, link=links, cores=found[0]["cpu_cores"],
                                   shared_cores=found[0]["cpu_cores"])
    return dataclasses.replace(machines, link=links, cores=sum(e["cpu_cores"] for e in found), shared_cores=0)


def protocol_costs(args):
    """bench.costs's measurements (results/bench-costs.json), measured first if none fit this machine and software."""
    found = costs.load(args.results_dir)
    if not found:
        print("bench: measuring the protocols' costs and the rows' CPU time (python -m bench.costs)", flush=True)
        run_quietly([[sys.executable, "-m", "bench.costs", f"--results_dir={args.results_dir}"]], "bench.costs")
        found = costs.load(args.results_dir)
    print(f"bench: costs beyond the bytes ({os.path.join(args.results_dir, costs.COSTS)}):\n{costs.describe(found)}",
          flush=True)
    return found


def bytes_ratio(measured, predicted):
    """All machines' measured bytes over the predicted; None where none are predicted."""
    return sum(map(sum, measured)) / sum(map(sum, predicted)) if sum(map(sum, predicted)) else None


def progress(i, total, record, started):
    left = (time.monotonic() - started) / i * (total - i)
    head = (f"bench [{i}/{total}] {record['link'] or 'loopback'} {record['config']} {record['runner']} W={record['workers']} "
            f"#{record['repeat']}")
    if "skipped" in record:
        print(f"{head}: skipped, {record['skipped']}", flush=True)
        return
    ratio = record["bytes_measured_over_predicted"]
    against = (f" = {record['step_over_point']:.2f} x point, "
               f"{'inside' if record['inside_interval'] else 'OUTSIDE'} [{record['lower_seconds']:.3f}, "
               f"{record['upper_seconds']:.3f}]"
               if record["step_over_point"] else f" (outside the model: {record['outside_the_model']})"
               if record["link"] else " (links not emulated)")
    print(f"{head}: {record['throughput']['median']:,.0f} {record['unit']}, "
          f"step {record['throughput']['median_step_seconds']:.3f} s{against}"
          f"{'' if ratio is None else f', bytes {ratio:.2f} x predicted'}"
          + (f", compute {record['compute_seconds'] / record['compute_seconds_one_device']:.2f} x one device's"
             if record.get("compute_seconds") else "") +
          f"{' (tasks outnumber the cores)' if record['cores_shared'] else ''}; "
          f"about {left / 60:.0f} min left", flush=True)


def table(records):
    """The end's table: per config and link, each runner and W's throughput, speed-up and fit to the model."""
    groups = {}
    for r in records:
        groups.setdefault((r["config"], r["link"]), []).append(r)
    return "\n".join(line for group in groups.values() for line in group_table(group))


def group_table(records):
    """table()'s lines for the records of one config and link."""
    base, unit = records[0]["one_device_words_per_sec"], records[0]["unit"]
    scaling = {"weak": "weak scaling (batch per worker fixed)", "strong": "strong scaling (global batch fixed)"}
    links = f"links of {records[0]['link']}" if records[0]["link"] else NOT_EMULATED
    lines = [f"\n{records[0]['config']}, {links}, {scaling[records[0]['scaling']]}; one "
             f"device (run.py): {base:,.0f} {unit}",
             f"{'runner':16s} {'W':>2s} {unit:>10s} {'central 68%':>17s} {'speed-up':>8s} {'eff.':>5s} "
             f"{'/best':>5s} {'bytes m/p':>9s} {'step/point':>10s} {'in interval':>11s}"]
    rows = {}
    for r in records:
        if "skipped" not in r:
            rows.setdefault((r["runner"], r["workers"]), []).append(r)
    median = {key: statistics.median(r["throughput"]["median"] for r in group) for key, group in rows.items()}
    for (runner, w), group in rows.items():
        best = max(m for (_, w2), m in median.items() if w2 == w)
        ratio = [r["bytes_measured_over_predicted"] for r in group if r["bytes_measured_over_predicted"]]
        low = statistics.median(r["throughput"]["p16"] for r in group)
        high = statistics.median(r["throughput"]["p84"] for r in group)
        speedup = median[(runner, w)] / base
        priced = [r for r in group if r["step_over_point"] is not None]  # none for an asynchronous run
        step_over_point = f"{statistics.median(r['step_over_point'] for r in priced):.2f}" if priced else "-"
        inside = f"{sum(r['inside_interval'] for r in priced)}/{len(priced)}" if priced else "-"
        lines.append(f"{runner:16s} {w:2d} {median[(runner, w)]:10,.0f} {f'[{low:,.0f}, {high:,.0f}]':>17s} "
                     f"{speedup:8.2f} {speedup / w:5.2f} {median[(runner, w)] / best:5.2f} "
                     f"{f'{statistics.median(ratio):.2f}' if ratio else '-':>9s} "
                     f"{step_over_point:>10s} {inside:>11s}")
    lines += [f"{r['runner']:16s} {r['workers']:2d} skipped: {r['skipped']}" for r in records if "skipped" in r]
    lines += sorted({f"  {r['runner']}: outside the model, {r['outside_the_model']}" for r in records
                     if r.get("outside_the_model") and r["link"]})
    return lines


def extrapolate(args, machines, prepared):
    """Write bench.predict's extrapolation of the most sparse-heavy config, with the compute measured here, on
    links as `machines`' (100mbit where none are priced)."""
    model = models.load(args.model)
    args.config = max(prepared, key=lambda name: traffic.sparse_share(model, name, args))
    compute = prepared[args.config][1]["median_step_seconds"]
    assumed = not machines.priced
    args.net = machines.link if machines.priced else netns.Link.parse("100mbit")
    records = predict.extrapolate(model, models.config(model, args.config), args, compute, predict.MACHINES)
    print(f"bench: extrapolated {args.config} to {', '.join(map(str, predict.MACHINES))} machines on links of "
          f"{args.net}{' (assumed: none was emulated)' if assumed else ''} "
          f"-> {predict.write(args.results_dir, records)} (python -m bench.predict --config={args.config})")


def main():
    args = parse_flags()
    model = models.load(args.model)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through run_quietly's stop of the run
    args.runs_dir = os.path.join(args.results_dir, "bench")
    os.makedirs(args.runs_dir, exist_ok=True)
    swept = [measured(args, machines) for machines in args.swept]
    combinations = [(machines, config, runner, w, repeat) for machines in swept for config in args.configs
                    for w in args.workers for repeat in range(1, args.repeats + 1) for runner in args.runners]
    priced = any(machines.priced for machines in swept)
    # the model's: measured on emulated links, so as root only (else the model prices bytes alone)
    args.measured_costs = protocol_costs(args) if priced and os.geteuid() == 0 else None
    output = os.path.join(args.results_dir, results.CROSSOVER if args.crossover else results.BENCH)
    open(output, "w").close()
    print(f"bench: {len(combinations)} runs ({', '.join(args.configs)} x {', '.join(args.runners)} x W "
          f"{', '.join(map(str, args.workers))} x {args.repeats}), {args.steps} steps of which {args.warmup_steps} "
          f"warm-up, links of {', '.join(map(str, swept))}"
          f"{'' if swept[0].added_latency() else ' (no added latency)'}, {swept[0].cores} cores", flush=True)
    records, started, prepared, computes = [], time.monotonic(), {}, {}
    for i, (machines, config, runner, w, repeat) in enumerate(combinations, 1):
        args.config = config
        if config not in prepared:
            variables = traffic.model_variables(model, models.config(model, config), args)
            prepared[config] = (variables, one_device(args, machines), {}, step_trace(args) if priced else None)
            trace = prepared[config][3]
            print(f"bench: {config}: one device (run.py) trains {prepared[config][1]['median']:,.0f} "
                  f"{prepared[config][1]['unit']}, "
                  f"{prepared[config][1]['median_step_seconds']:.3f} s a step (median)" + (
                      f"; it reads its last variable at {max(trace['needed'].values()):.2f} of the step and has its "
                      f"first gradient at {min(trace['ready'].values()):.2f}" if trace else ""), flush=True)
        variables, base, rows, trace = prepared[config]
        if w not in rows:
            rows[w] = traffic.touched_rows(model, run_config(args, w), args, variables, w,
                                           range(args.warmup_steps, args.steps))
        if machines.priced and (machines.name, config, w) not in computes:  # again at each rate: close to its runs
            computes[machines.name, config, w] = (
                (base["median_step_seconds"], [f"bench-{config}-one-device"], base["median_step_seconds"]) if w == 1
                else compute_terms(args, machines, w, sum(v.bytes for v in variables)))
        record = one_run(args, machines, runner, w, repeat, variables, rows[w], base,
                         computes.get((machines.name, config, w)), trace)
        record["environment"] = environment.describe(args, model, run_config(args, w), w)
        records.append(record)
        results.append_line(output, record, "bench")
        progress(i, len(combinations), record, started)
    print(table(records))
    print(f"\nbench: {len(records)} runs in {(time.monotonic() - started) / 60:.1f} min -> {output}")
    if args.crossover:
        print("\n".join(crossover.describe(records)))
    else:
        extrapolate(args, swept[0], prepared)
    return 0


if __name__ == "__main__":
    harness.main(main)
