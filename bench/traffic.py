"""The traffic model: the bytes each machine's link carries per step under each architecture, as flows (from task,
to task, bytes, phase, operation) in two phases, pull then exchange, and their network and update seconds with the
Costs bench/costs.py measures. docs/bench.md ("The traffic model", "The model") derives it."""
import collections
import dataclasses
import functools

from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import numpy as np
import tensorflow as tf

from harness import data, models, placement, reduction, runner_flags
from harness.training import StepFeed, worker_objective
from harness.partitioning import part_rows
from harness.variables import Params

FLOAT_BYTES = 4  # float32 values
INDEX_BYTES = 4  # int32 row indices (the word ids)

ARCHITECTURES = ("ps", "allreduce", "allreduce-dense", "allreduce-exact", "hybrid", "hybrid-local", "hybrid-exact")
ALLREDUCE = ("allreduce", "allreduce-dense", "allreduce-exact")  # every gradient between the workers
HYBRID = ("hybrid", "hybrid-local", "hybrid-exact")  # the dense gradients between the workers, the sparse by servers


@dataclasses.dataclass(frozen=True)
class Variable:
    name: str
    shape: tuple
    kind: str  # "sparse" (tf.IndexedSlices gradient) or "dense"
    whole_update: bool = False  # the rule updates every row of it, whatever rows its gradient has (Adam)
    declared: bool = True  # in the model's variables(), not made by a layer: only those are split into parts

    @property
    def bytes(self):
        return int(np.prod(self.shape)) * FLOAT_BYTES

    @property
    def row_bytes(self):
        return int(np.prod(self.shape[1:])) * FLOAT_BYTES


def model_variables(model, config, args):
    """The model's variables, each with its gradient's kind as the runners find it."""
    found = placement.model_variables(model, config, args.seed, model.data(config, args.data_path, args.seed))
    whole = getattr(models.update_rule(model, config).optimizer, "updates_every_row", False)
    declared = models.declared_variables(model, config)
    return [Variable(name, shape, kind, whole, name in declared) for name, (shape, kind) in found.items()]


def sparse_share(model, config_name, args):
    """The fraction of config `config_name`'s variable bytes in sparse variables: how sparse-heavy it is."""
    variables = model_variables(model, model.CONFIGS[config_name], args)
    return sum(v.bytes for v in variables if v.kind == "sparse") / sum(v.bytes for v in variables)


@dataclasses.dataclass
class Rows:
    """The rows sparse gradients touch: steps[i][w][v] = (gathered, distinct) indices of sampled step i, worker w
    and variable v; gathered has one per looked-up position (what the worker pulls)."""
    steps: list


def touched_rows(model, config, args, variables, num_workers, sample_steps):
    """The rows each worker's sparse gradients touch at `sample_steps`, evaluated on the run's data."""
    sparse = [v.name for v in variables if v.kind == "sparse"]
    if not sparse:
        return Rows([])
    with tf.Graph().as_default():
        feed = StepFeed(model, config, model.data(config, args.data_path, args.seed),
                        data.shard(config.batch_size, 0, num_workers))
        params = Params(model, config, args.seed)
        objective = worker_objective(feed.loss(params, args.seed)[0])
        raw = tf.compat.v1.gradients(objective, [params.variables[name] for name in sparse])
        indices = dict(zip(sparse, (g.indices for g in raw)))
        found = []
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for step in sample_steps:
                per_worker = []
                for rank in range(num_workers):
                    feed.rows = data.shard(config.batch_size, rank, num_workers)
                    got = session.run(indices, feed(step, None))
                    per_worker.append({name: (got[name], np.unique(got[name])) for name in sparse})
                found.append(per_worker)
    return Rows(found)


def parts(variable, partitions):
    """The rows of each part of a variable, as ranges: round robin, as the bench runs; a dense variable, or one a
    layer made, is one part."""
    return part_rows(variable.shape[0], partitions if variable.kind == "sparse" and variable.declared else 1, "mod")


def _placed(architecture, variables, num_ps, partitions):
    """[(variable, rows, server)] of every part on the parameter servers, placed as the runners place them."""
    greedy = placement.GreedyBySize(num_ps)
    return [(v, rows, greedy.add(len(rows) * v.row_bytes)) for v in variables
            if architecture == "ps" or v.kind == "sparse" for rows in parts(v, partitions)]


def _count(indices, rows):
    """How many of `indices` fall in the range `rows`."""
    inside = (indices >= rows.start) & (indices < rows.stop) & ((indices - rows.start) % rows.step == 0)
    return int(np.count_nonzero(inside))


COLLECTIVES = ("allreduce", "allgather", "alltoall")
COLLECTIVE_PROBE_RANKS = 2  # bench/costs.py times a collective of two ranks
PULL, EXCHANGE = "pull", "exchange"  # the phases: reading variables; then sending gradients (and collectives)


def _ring(num_workers, chunk_bytes):
    """Flows of a ring allreduce of `chunk_bytes` on every rank: each sends 2(N-1)/N of it to the next."""
    if num_workers == 1 or not chunk_bytes:
        return []
    return [(f"worker{r}", f"worker{(r + 1) % num_workers}", 2 * (num_workers - 1) / num_workers * chunk_bytes,
             EXCHANGE, "allreduce") for r in range(num_workers)]


def _ring_allgather(chunks):
    """Flows of a ring allgather of one chunk per rank: rank r passes on every chunk but its successor's."""
    n = len(chunks)
    if n == 1:
        return []
    return [(f"worker{r}", f"worker{(r + 1) % n}", sum(chunks) - chunks[(r + 1) % n], EXCHANGE, "allgather")
            for r in range(n)]


def _exact(num_workers, sizes):
    """Flows of the exact reduction (harness/reduction.py) of dense gradients of `sizes` bytes, in its groups, each a
    buffer padded to N chunks: each rank sends chunk k to rank k (alltoall), then a ring allgather of the N sums;
    2(N-1)/N of the buffer a rank, as a ring's."""
    found = []
    for group in reduction.groups(sizes, runner_flags.EXACT_GROUP_BYTES):
        chunk = -(-sum(sizes[i] for i in group) // (num_workers * FLOAT_BYTES)) * FLOAT_BYTES
        found += [(f"worker{r}", f"worker{k}", chunk, EXCHANGE, "alltoall") for r in range(num_workers)
                  for k in range(num_workers) if k != r] + _ring_allgather([chunk] * num_workers)
    return found


def exact(architecture, num_workers):
    """Whether the dense gradients go by the exact reduction: with up to two workers it is Horovod's own ring."""
    return architecture.endswith("-exact") and num_workers > 2


def dense_reduction(architecture, num_workers, variables):
    """The flows of `variables`' dense gradients between the workers: the exact reduction's, or a ring's."""
    if num_workers == 1 or not variables:
        return []
    sizes = [v.bytes for v in variables]
    return _exact(num_workers, sizes) if exact(architecture, num_workers) else _ring(num_workers, sum(sizes))


def flows(architecture, variables, step_rows, num_workers, num_ps, partitions=1, machine_groups=None, only=None):
    """[(from task, to task, bytes, phase, operation)] of one step (`step_rows`: one of Rows.steps) under an
    ARCHITECTURES entry, as docs/bench.md ("The traffic model") lists them; `machine_groups`: each machine's workers
    (hybrid-local). `only`: the variables whose flows are wanted (None: all), placed as among all of them."""
    found = []
    wanted = set(only if only is not None else (v.name for v in variables))
    sparse = [v for v in variables if v.kind == "sparse"]
    dense = [v for v in variables if v.kind == "dense"]
    if architecture in ALLREDUCE:
        densified = dense + (sparse if architecture == "allreduce-dense" else [])
        found += dense_reduction(architecture, num_workers, [v for v in densified if v.name in wanted])
        if architecture != "allreduce-dense":
            # Horovod allreduces a tf.IndexedSlices as two allgathers, its values and its indices.
            for v in (v for v in sparse if v.name in wanted):
                for row_bytes in (v.row_bytes, INDEX_BYTES):
                    found += _ring_allgather([len(step_rows[w][v.name][1]) * row_bytes for w in range(num_workers)])
        return found
    if architecture in HYBRID:
        found += dense_reduction(architecture, num_workers, [v for v in dense if v.name in wanted])
    groups = machine_groups if architecture == "hybrid-local" else [[w] for w in range(num_workers)]
    # each group's distinct rows of each sparse variable, found once for all its parts
    pushed = {v.name: [np.unique(np.concatenate([step_rows[w][v.name][1] for w in group])) for group in groups]
              for v in sparse if v.name in wanted}
    for v, rows, p in (part for part in _placed(architecture, variables, num_ps, partitions)
                       if part[0].name in wanted):
        ps = f"ps{p}"
        for w in range(num_workers):
            if v.kind == "dense":
                found += [(ps, f"worker{w}", v.bytes, PULL, "pull"), (f"worker{w}", ps, v.bytes, EXCHANGE, "push")]
            else:
                gathered = _count(step_rows[w][v.name][0], rows)
                found += [(f"worker{w}", ps, gathered * INDEX_BYTES, PULL, "pull"),
                          (ps, f"worker{w}", gathered * v.row_bytes, PULL, "pull")]
        for group, distinct in zip(groups, pushed.get(v.name, [])):
            found.append((f"worker{group[0]}", ps, _count(distinct, rows) * (v.row_bytes + INDEX_BYTES),
                          EXCHANGE, "push"))
    return found


def paced_link_bytes(architecture, variables, rows, num_workers, num_ps, machine_of, paces, partitions=1):
    """Each machine's (sent, received) bytes per chief step of an asynchronous run in which worker w takes
    paces[w] steps per chief step, averaged over the sampled steps."""
    per_step = []
    for step in rows.steps or [None]:
        found = flows(architecture, variables, step, num_workers, num_ps, partitions)
        own = [link_bytes([f for f in found if f"worker{w}" in f[:2]], machine_of) for w in range(num_workers)]
        per_step.append([tuple(sum(pace * worker[m][k] for pace, worker in zip(paces, own)) for k in (0, 1))
                         for m in range(len(own[0]))])
    return _mean_per_machine(per_step)


def _mean_per_machine(per_step):
    """[(sent, received)] of each machine, averaged over steps' [(sent, received)]."""
    return [tuple(float(np.mean([s[m][k] for s in per_step])) for k in (0, 1)) for m in range(len(per_step[0]))]


def link_bytes(step_flows, machine_of):
    """[(bytes sent, bytes received)] of each machine's link; flows within a machine stay on it (loopback)."""
    machines = max(machine_of.values()) + 1
    sent, received = [0.0] * machines, [0.0] * machines
    for source, destination, size, _, _ in step_flows:
        if machine_of[source] != machine_of[destination]:
            sent[machine_of[source]] += size
            received[machine_of[destination]] += size
    return list(zip(sent, received))


def transports(collective="gloo"):
    """The protocol of each operation: gRPC between workers and parameter servers; `collective`'s allreduce and
    its allgather for Horovod, each costed on its own (an allreduce also adds, an allgather only copies)."""
    return {"pull": "grpc", "push": "grpc", **{operation: f"{collective} {operation}" for operation in COLLECTIVES}}


@dataclasses.dataclass(frozen=True)
class Costs:
    """What a step costs beyond its bytes, per transport ("grpc", "gloo allreduce", ...) and per byte of the rows'
    work, as bench/costs.py measures it. Costs() is the bytes-only model: infinite rates, nothing fixed, no CPU."""
    rates: dict = dataclasses.field(default_factory=dict)  # transport: bytes per second (absent: infinite)
    message_seconds: dict = dataclasses.field(default_factory=dict)  # transport: seconds per message
    # work: CPU seconds per byte to "deduplicate", "apply" and "add" rows; per byte of a table, to "densify" a
    # sparse gradient into it (sparse-as-dense) and "apply_dense" the rule to all of it (absent: free)
    row_seconds_per_byte: dict = dataclasses.field(default_factory=dict)
    transports: dict = dataclasses.field(default_factory=transports)  # a flow's operation: its transport
    shared_cores: int = 0  # the cores every machine's tasks share (the emulated cluster: this machine's); 0: none
    local_transports: dict = dataclasses.field(default_factory=dict)  # transport: its own within a machine
    parallel_parts: bool = False  # a server updates its parts at once, each on a core of its own
    accelerated_workers: bool = False  # the workers' own update runs on accelerators (in the compute term)
    payload_shares: dict = dataclasses.field(default_factory=dict)  # transport: its payload's share of a link
    serial: bool = False  # a flow's protocol work and its time on the link one after the other, not overlapped
    background_share: float = 0.0  # the core share Horovod's background thread takes, all the time
    cpu_seconds_per_byte: dict = dataclasses.field(default_factory=dict)  # transport: CPU of both ends per byte

    @classmethod
    def measured(cls, costs, workers=2, collective="gloo", shared_cores=0, quantile="median"):
        """From bench/costs.py's record: gRPC's slower direction, each collective's own figures, and the payload's
        shares of a shaped link at `quantile` ("p16", "median", "p84") with the rank count nearest `workers`."""
        protocols, rows = costs["protocols"], costs["rows"]
        grpc = [protocols["grpc"][operation] for operation in ("pull", "push")]
        fitted = {f"{name} {operation}": protocols[name][operation] for name in ("gloo", "mpi", "mpi-local")
                  if name in protocols for operation in COLLECTIVES}
        rates = {"grpc": min(op["bytes_per_second"] for op in grpc),
                 **{transport: fit["bytes_per_second"] for transport, fit in fitted.items()}}
        cpu = {"grpc": max(op["cpu_seconds_per_byte"] for op in grpc),
               **{transport: fit["cpu_seconds_per_byte"] for transport, fit in fitted.items()}}
        messages = {"grpc": protocols["grpc"]["message_seconds"],
                    **{transport: fit["fixed_seconds"] for transport, fit in fitted.items()}}
        # each transport's share from the rank count nearest `workers` that has it (ties: the fewer)
        by_ranks = sorted(costs["shaped_link"]["payload_shares"].items(), reverse=True,
                          key=lambda item: (abs(int(item[0]) - workers), int(item[0])))
        return cls(rates, messages, {name: work["seconds_per_byte"] for name, work in rows.items()},
                   transports(collective), shared_cores,
                   payload_shares={transport: share[quantile] for _, shares in by_ranks
                                   for transport, share in shares.items()},
                   background_share=protocols.get(collective, {}).get("background_cpu_share", 0.0),
                   cpu_seconds_per_byte=cpu)

    def work(self, rows_in, distinct, dense_added=0, dense_applied=0, tables=0):
        """CPU seconds to deduplicate `rows_in` bytes of rows, apply `distinct` bytes of rows and `dense_applied`
        bytes of dense values, add `dense_added` bytes of dense gradients, and densify rows into `tables` bytes of
        tables and update them whole (a rule that updates every row)."""
        per_byte = self.row_seconds_per_byte
        return (rows_in * per_byte.get("deduplicate", 0.0) + (distinct + dense_applied) * per_byte.get("apply", 0.0)
                + dense_added * per_byte.get("add", 0.0)
                + tables * sum(per_byte.get(name, 0.0) for name in ("densify", "apply_dense")))

    def protocol_seconds(self, transport, size):
        """What `size` bytes cost `transport` when no link limits it: its rate, and one message."""
        return size / self.rates.get(transport, float("inf")) + self.message_seconds.get(transport, 0.0)


def phase_seconds(step_flows, phase, machine_of, bytes_per_second, costs=Costs()):
    """The seconds of `phase` of the flows (None: all, as one phase), as docs/bench.md ("Network") prices them; flows
    within a machine are free unless costs.local_transports names a transport there."""
    busiest, local, cpu, messages, longest = collections.Counter(), collections.Counter(), 0.0, 0.0, 0.0
    for source, destination, size, flow_phase, operation in step_flows:
        if phase not in (None, flow_phase):
            continue
        transport = costs.transports[operation]
        cpu += size * costs.cpu_seconds_per_byte.get(transport, 0.0)
        messages += costs.message_seconds.get(transport, 0.0) / (COLLECTIVE_PROBE_RANKS if operation in
                                                                 COLLECTIVES else 1)
        longest = max(longest, costs.protocol_seconds(transport, size))
        if machine_of[source] == machine_of[destination]:
            if transport in costs.local_transports:
                local[source] += costs.protocol_seconds(costs.local_transports[transport], size)
            continue
        rates = (bytes_per_second * costs.payload_shares.get(transport, 1.0),
                 costs.rates.get(transport, float("inf")))
        seconds = (sum(size / rate for rate in rates) if costs.serial else size / min(rates)) + \
            costs.message_seconds.get(transport, 0.0)
        busiest["sent", machine_of[source]] += seconds
        busiest["received", machine_of[destination]] += seconds
    shared = max(messages + cpu / costs.shared_cores, longest) if costs.shared_cores else 0.0
    return max(max(busiest.values(), default=0.0), max(local.values(), default=0.0), shared)


def pull_before_compute(pull_seconds_of, names, needed, compute_seconds):
    """How long the compute waits for the pull (`pull_seconds_of(names)`, None: all), v arriving in the order needed
    and first read at needed[v] of the compute (bench/step_trace.py); without `needed`, the whole pull."""
    if not needed:
        return pull_seconds_of(None)
    order = sorted(names, key=needed.get)
    return max(max(pull_seconds_of(order[:i + 1]) - needed[name] * compute_seconds for i, name in enumerate(order)),
               0.0)


def exchange_after_compute(exchange_seconds_of, names, ready, compute_seconds):
    """How long the exchange (`exchange_seconds_of(names)`, None: all) goes on after the compute, each gradient
    leaving in turn once ready, at ready[v] of the compute (bench/step_trace.py); without `ready`, all of it."""
    if not ready:
        return exchange_seconds_of(None)
    order = sorted(names, key=ready.get)
    end = max(ready[name] * compute_seconds + exchange_seconds_of(order[i:]) for i, name in enumerate(order))
    return max(end - compute_seconds, 0.0)


def protocol_cpu_seconds(architecture, variables, rows, num_workers, num_ps, machine_of, partitions=1, costs=Costs()):
    """The protocols' CPU seconds of a step's flows, both ends, loopback included, averaged over the sampled steps."""
    groups = machine_groups(machine_of, num_workers)
    return float(np.mean([sum(size * costs.cpu_seconds_per_byte.get(costs.transports[operation], 0.0)
                              for _, _, size, _, operation in flows(architecture, variables, step, num_workers, num_ps,
                                                                    partitions, groups))
                          for step in rows.steps or [None]]))


def machine_groups(machine_of, num_workers):
    """The workers of each machine, [[w, ...], ...]."""
    groups = {}
    for w in range(num_workers):
        groups.setdefault(machine_of[f"worker{w}"], []).append(w)
    return list(groups.values())


def update_seconds(architecture, variables, step_rows, num_workers, num_ps, partitions=1, costs=Costs(),
                   machine_groups=None):
    """The update's CPU seconds beyond one device's (in the compute term), on the busiest task that applies it, as
    docs/bench.md ("Update") says; hybrid-local's first worker of a machine also deduplicates its machine's rows."""
    sparse = [v for v in variables if v.kind == "sparse"]
    dense_bytes = sum(v.bytes for v in variables if v.kind == "dense")

    def sent(v, workers):  # the distinct rows of v each of `workers` sends
        return [step_rows[w][v.name][1] for w in workers]

    def sent_bytes(workers, updated_by_rows=False):  # (only those whose rule updates the rows it is given)
        return sum(len(rows) * v.row_bytes for v in sparse if not (updated_by_rows and v.whole_update)
                   for rows in sent(v, workers))

    tables = sum(v.bytes for v in sparse if v.whole_update)
    own = 0.0 if costs.accelerated_workers else costs.work(sent_bytes([0]), sent_bytes([0], True),
                                                           dense_applied=dense_bytes, tables=tables)
    if architecture in ALLREDUCE and costs.accelerated_workers:
        return 0.0
    # the exact reduction adds its chunk's W copies in TensorFlow; Horovod's ring adds in Gloo, at Gloo's rate
    summed = costs.work(0, 0, dense_added=(num_workers - 1) / num_workers * dense_bytes) \
        if exact(architecture, num_workers) else 0.0
    if architecture == "allreduce-dense":  # added in the collective, then every table updated whole
        tables = sum(v.bytes for v in sparse) * sum(costs.row_seconds_per_byte.get(name, 0.0)
                                                    for name in ("densify", "apply_dense"))
        return max(tables + costs.work(0, 0, dense_applied=dense_bytes) - own, 0.0)
    everyone = range(num_workers)
    if architecture in ("allreduce", "allreduce-exact"):  # every worker deduplicates and applies every worker's rows
        union = sum(len(np.unique(np.concatenate(sent(v, everyone)))) * v.row_bytes for v in sparse
                    if not v.whole_update)
        return max(costs.work(sent_bytes(everyone), union, dense_applied=dense_bytes, tables=tables) + summed - own,
                   0.0)
    if architecture == "hybrid-local":  # a machine's first worker sends the union of its machine's rows
        local = max(costs.work(sent_bytes(group), 0) for group in machine_groups)
        pushed = {v.name: [np.unique(np.concatenate(sent(v, group))) for group in machine_groups] for v in sparse}
    else:  # every worker sends its rows as they are
        local, pushed = 0.0, {v.name: sent(v, everyone) for v in sparse}
    # the busiest server adds the workers' dense gradients, deduplicates and applies the rows of its parts
    union = {v.name: np.unique(np.concatenate(pushed[v.name])) for v in sparse}
    per_server = [[] for _ in range(num_ps)]
    for v, rows, p in _placed(architecture, variables, num_ps, partitions):
        per_server[p].append(costs.work(0, 0, (num_workers - 1) * v.bytes, v.bytes) if v.kind == "dense" else
                             costs.work(sum(_count(u, rows) for u in pushed[v.name]) * v.row_bytes,
                                        0 if v.whole_update else _count(union[v.name], rows) * v.row_bytes,
                                        tables=len(rows) * v.row_bytes if v.whole_update else 0))
    server = max((max(work, default=0.0) if costs.parallel_parts else sum(work)) for work in per_server)
    replicated = 0.0 if architecture == "ps" or costs.accelerated_workers else \
        costs.work(0, 0, dense_applied=dense_bytes)
    return max(local + server + replicated + summed - own, 0.0)


def predict(architecture, variables, rows, num_workers, num_ps, machine_of, bytes_per_second, partitions=1,
            costs=Costs(), compute_seconds=0.0, needed=None, ready=None, overlap_phases=False):
    """(each machine's (sent, received) bytes, network seconds beyond the compute, update CPU seconds beyond one
    device's) per sampled step, averaged. `needed`/`ready` overlap the pull/exchange with the compute,
    `overlap_phases` runs both as one phase; with Costs() and none of them, the bytes-only model."""
    groups = machine_groups(machine_of, num_workers)
    steps = rows.steps or [None]

    def seconds(step, found, phase, only=None):  # found: the step's flows, all of them
        some = found if only is None else flows(architecture, variables, step, num_workers, num_ps, partitions,
                                                groups, only)
        return phase_seconds(some, phase, machine_of, bytes_per_second, costs)
    names, per_machine, network = [v.name for v in variables], [], []
    for step in steps:
        found = flows(architecture, variables, step, num_workers, num_ps, partitions, groups)
        per_machine.append(link_bytes(found, machine_of))
        network.append(seconds(step, found, None) if overlap_phases else
                       pull_before_compute(functools.partial(seconds, step, found, PULL), names, needed,
                                           compute_seconds)
                       + exchange_after_compute(functools.partial(seconds, step, found, EXCHANGE), names, ready,
                                                compute_seconds))
    update = [update_seconds(architecture, variables, step, num_workers, num_ps, partitions, costs, groups)
              for step in steps]
    return _mean_per_machine(per_machine), float(np.mean(network)), float(np.mean(update))
