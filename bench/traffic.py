"""The traffic model: the bytes each machine sends and receives per training step, for each architecture, from
the variables' shapes, the kinds of their gradients and the rows each step touches. docs/bench.md derives the
formulas; here they are written as flows, (from task, to task, bytes, phase, operation: pull, push, allreduce
or allgather), and a flow counts on a machine's link only when its two tasks are on different machines. Flows
of one phase run at the same time; the phases of a step one after the other (a parameter-server worker pushes
its gradients only after it has pulled the variables and computed), so a step's network time is the sum over
phases of the busiest link direction's bytes in that phase divided by the rate; with measured Costs
(bench/costs.py), at the slower of the link and the protocol, plus each message's fixed cost.

    variables = model_variables(model, config, args)               # shapes and gradient kinds
    rows = touched_rows(model, config, args, variables, num_workers, steps)  # what sparse gradients touch
    flows("hybrid", variables, rows.steps[0], num_workers, num_ps)  # [(from, to, bytes, phase, operation)]
    predict("hybrid", variables, rows, num_workers, num_ps, machine_of, bytes_per_second, costs=Costs())
                          # ([(sent, received)] per machine, network seconds, update CPU seconds) per step
"""
import dataclasses
import functools

from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import numpy as np
import tensorflow as tf

from harness import data, placement
from harness.training import StepFeed
from harness.variables import Params, part_rows

FLOAT_BYTES = 4  # float32 values
INDEX_BYTES = 4  # int32 row indices (the word ids)

ARCHITECTURES = ("ps", "allreduce", "allreduce-dense", "hybrid", "hybrid-local")


@dataclasses.dataclass(frozen=True)
class Variable:
    name: str
    shape: tuple
    kind: str  # "sparse" (tf.IndexedSlices gradient) or "dense"

    @property
    def bytes(self):
        return int(np.prod(self.shape)) * FLOAT_BYTES

    @property
    def row_bytes(self):
        return int(np.prod(self.shape[1:])) * FLOAT_BYTES


def model_variables(model, config, args):
    """The model's variables with the kind of each gradient (from its type, as the runners and Parallax find
    it; args: seed, data_path)."""
    kinds = placement.variable_kinds(model, config, args.seed, model.data(config, args.data_path, args.seed))
    return [Variable(name, spec.shape, kinds[name]) for name, spec in model.variables(config).items()]


def sparse_share(model, config_name, args):
    """The fraction of config `config_name`'s variable bytes in sparse variables: how sparse-heavy it is."""
    variables = model_variables(model, model.CONFIGS[config_name], args)
    return sum(v.bytes for v in variables if v.kind == "sparse") / sum(v.bytes for v in variables)


@dataclasses.dataclass
class Rows:
    """Per step, on average over the sampled steps: for worker w and sparse variable v, `gathered[w][v]` row
    indices read (one per looked-up position: what a worker pulls from a parameter server) and `unique[w][v]`
    distinct rows (what its deduplicated gradient holds), each as an array of indices of one sampled step.
    `steps` lists the sampled steps' index arrays: steps[i][w][v] = (gathered indices, distinct indices)."""
    steps: list


def touched_rows(model, config, args, variables, num_workers, sample_steps):
    """The rows each worker's sparse gradients touch at the steps `sample_steps`, found by building a worker's
    gradients and evaluating their indices on the run's data (args: seed, data_path)."""
    sparse = [v.name for v in variables if v.kind == "sparse"]
    if not sparse:
        return Rows([])
    with tf.Graph().as_default():
        feed = StepFeed(model, config, model.data(config, args.data_path, args.seed),
                        data.shard(config.batch_size, 0, num_workers))
        params = Params(model, config, args.seed)
        objective, _ = feed.loss(params, args.seed)
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


def parts(variable, partitions, strategy="mod"):
    """The rows of each part of a sparse variable, as ranges (part_rows: round robin or contiguous); a dense
    variable is one part."""
    return part_rows(variable.shape[0], partitions if variable.kind == "sparse" else 1, strategy)


def _count(indices, rows):
    """How many of `indices` fall in the range `rows`."""
    inside = (indices >= rows.start) & (indices < rows.stop) & ((indices - rows.start) % rows.step == 0)
    return int(np.count_nonzero(inside))


COLLECTIVES = ("allreduce", "allgather")
COLLECTIVE_PROBE_RANKS = 2  # bench/costs.py times a collective of two ranks
PULL, EXCHANGE = "pull", "exchange"  # the phases: reading variables; then sending gradients (and collectives)


def _ring(num_workers, chunk_bytes):
    """Flows of a ring allreduce (reduce-scatter, then allgather) of `chunk_bytes` on every rank: each rank
    sends 2(N-1)/N of the tensor to the next rank."""
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


def flows(architecture, variables, step_rows, num_workers, num_ps, partitions=1, machine_groups=None,
          strategy="mod", only=None):
    """[(from task, to task, bytes, phase, operation)] of one step (`step_rows`: one element of Rows.steps), for:

    ps               run_tf.py: every variable on the parameter servers; each worker pulls the dense variables
                     whole and the rows it looks up, and pushes its dense gradients whole and its distinct
                     sparse rows with their indices (sync and async move the same bytes per worker step)
    allreduce        run_horovod.py: ring allreduce of the dense gradients, ring allgather of the sparse rows
    allreduce-dense  run_horovod.py --sparse_as_dense: ring allreduce of every gradient, sparse ones densified
    hybrid           run_parallax.py: sparse variables on the parameter servers as in ps, dense ones allreduced
    hybrid-local     run_parallax.py --local_aggregation: as hybrid, but each machine's first worker pushes the
                     union of its machine's rows (`machine_groups`: the workers of each machine)

    Sparse variables are split into `partitions` parts by `strategy` (harness.variables.part_rows) and the parts spread over
    the servers by size, as the runners place them. `only`: the names of the variables whose flows are wanted
    (None: all), placed as among all of them."""
    found = []
    wanted = set(only if only is not None else (v.name for v in variables))
    sparse = [v for v in variables if v.kind == "sparse"]
    dense = [v for v in variables if v.kind == "dense"]
    if architecture in ("allreduce", "allreduce-dense"):
        densified = dense + (sparse if architecture == "allreduce-dense" else [])
        found += _ring(num_workers, sum(v.bytes for v in densified if v.name in wanted))
        if architecture == "allreduce":
            # Horovod allreduces a tf.IndexedSlices as two allgathers, its values and its indices
            # (horovod/tensorflow/__init__.py, allreduce: "do two allgathers instead of an allreduce").
            for v in (v for v in sparse if v.name in wanted):
                for row_bytes in (v.row_bytes, INDEX_BYTES):
                    found += _ring_allgather([len(step_rows[w][v.name][1]) * row_bytes for w in range(num_workers)])
        return found
    on_ps = variables if architecture == "ps" else sparse
    if architecture in ("hybrid", "hybrid-local"):
        found += _ring(num_workers, sum(v.bytes for v in dense if v.name in wanted))
    placed_parts = [(v, part) for v in on_ps for part in parts(v, partitions, strategy)]
    greedy = placement.GreedyBySize(num_ps)  # the runners' placement
    servers = [greedy.add(len(rows) * v.row_bytes) for v, rows in placed_parts]
    groups = machine_groups if architecture == "hybrid-local" else [[w] for w in range(num_workers)]
    for (v, rows), p in ((part, p) for part, p in zip(placed_parts, servers) if part[0].name in wanted):
        ps = f"ps{p}"
        for w in range(num_workers):
            if v.kind == "dense":
                found += [(ps, f"worker{w}", v.bytes, PULL, "pull"), (f"worker{w}", ps, v.bytes, EXCHANGE, "push")]
            else:
                gathered = _count(step_rows[w][v.name][0], rows)
                found += [(f"worker{w}", ps, gathered * INDEX_BYTES, PULL, "pull"),
                          (ps, f"worker{w}", gathered * v.row_bytes, PULL, "pull")]
        for group in (groups if v.kind == "sparse" else []):
            distinct = np.unique(np.concatenate([step_rows[w][v.name][1] for w in group]))
            found.append((f"worker{group[0]}", ps, _count(distinct, rows) * (v.row_bytes + INDEX_BYTES),
                          EXCHANGE, "push"))
    return found


def paced_link_bytes(architecture, variables, rows, num_workers, num_ps, machine_of, paces, partitions=1,
                     strategy="mod"):
    """Each machine's (sent, received) bytes per chief step of an asynchronous run in which worker w takes
    paces[w] steps per chief step: each worker's own flows (every flow of a PS step is one worker's), in
    proportion, averaged over the sampled steps of `rows`."""
    per_step = []
    for step in rows.steps or [None]:
        found = flows(architecture, variables, step, num_workers, num_ps, partitions, strategy=strategy)
        own = [link_bytes([f for f in found if f"worker{w}" in f[:2]], machine_of) for w in range(num_workers)]
        per_step.append([tuple(sum(pace * worker[m][k] for pace, worker in zip(paces, own)) for k in (0, 1))
                         for m in range(len(own[0]))])
    return _mean_per_machine(per_step)


def _mean_per_machine(per_step):
    """[(sent, received)] of each machine, averaged over steps' [(sent, received)]."""
    return [tuple(float(np.mean([s[m][k] for s in per_step])) for k in (0, 1)) for m in range(len(per_step[0]))]


def link_bytes(step_flows, machine_of):
    """[(bytes sent, bytes received)] of each machine's link for `step_flows`; `machine_of[task]` is the
    machine index of each task. Flows between tasks of one machine stay on it (loopback)."""
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
    """What a step costs beyond its bytes over the links, as bench/costs.py measures it: per protocol ("grpc"
    between a worker and a parameter server; "gloo allreduce", "gloo allgather", "mpi allgather"... between
    Horovod's ranks: `transports` names each operation's) the rate it carries bytes at when the link does not
    limit it and its fixed seconds per message; and the CPU seconds per byte of rows to deduplicate a sparse
    gradient, to apply rows (and dense values) with the update rule, and to add dense gradients. Costs() is the
    bytes-only bound: every rate infinite, nothing fixed, no CPU work."""
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
    background_shares: dict = dataclasses.field(default_factory=dict)  # transport: the core share its library's
    #                                                                    background thread takes, all the time
    cpu_seconds_per_byte: dict = dataclasses.field(default_factory=dict)  # transport: CPU of both ends per byte

    @classmethod
    def measured(cls, costs, workers=2, collective="gloo", shared_cores=0, quantile="median"):
        """From bench/costs.py's record: gRPC's slower direction, the larger CPU per byte of its pull and push,
        and its cost of a message (a gRPC flow adds one tensor to a run); each collective operation's own rate,
        CPU per byte and fixed cost (a collective is a message of its own); each one's payload's share of a
        shaped link at `quantile` of its timings ("p16": the fast end, "median", "p84": the slow end), measured
        with the rank count nearest `workers` (ties: the fewer); the share of a core Horovod's background thread
        takes, for each collective."""
        protocols, rows = costs["protocols"], costs["rows"]
        grpc = [protocols["grpc"][operation] for operation in ("pull", "push")]
        rates, cpu = ({"grpc": min(op["bytes_per_second"] for op in grpc)},
                      {"grpc": max(op["cpu_seconds_per_byte"] for op in grpc)})
        messages, shares = {"grpc": protocols["grpc"]["message_seconds"]}, {}
        for name in ("gloo", "mpi", "mpi-local"):
            if name in protocols:
                for operation in COLLECTIVES:
                    fitted = protocols[name][operation]
                    rates[f"{name} {operation}"] = fitted["bytes_per_second"]
                    cpu[f"{name} {operation}"] = fitted["cpu_seconds_per_byte"]
                    messages[f"{name} {operation}"] = fitted["fixed_seconds"]
                    shares[f"{name} {operation}"] = protocols[name]["background_cpu_share"]
        return cls(rates, messages, {name: work["seconds_per_byte"] for name, work in rows.items()},
                   transports(collective), shared_cores,
                   payload_shares={transport: share[quantile] for transport, share in
                                   shares_nearest(costs["shaped_link"]["payload_shares"], workers).items()},
                   background_shares=shares, cpu_seconds_per_byte=cpu)

    def protocol_seconds(self, transport, size):
        """What `size` bytes cost `transport` when no link limits it: its rate, and one message."""
        return size / self.rates.get(transport, float("inf")) + self.message_seconds.get(transport, 0.0)


def shares_nearest(shares_by_ranks, workers):
    """{transport: shares} of `shares_by_ranks` ({rank count: {transport: shares}}), each transport's from the
    rank count nearest `workers` it was measured at (ties: the fewer)."""
    nearest = {}
    for ranks in sorted(shares_by_ranks, key=lambda ranks: (abs(int(ranks) - workers), int(ranks)), reverse=True):
        nearest.update(shares_by_ranks[ranks])
    return nearest


def phase_seconds(step_flows, phase, machine_of, bytes_per_second, costs=Costs()):
    """The time of one phase of the step's flows (None: all of them, as one phase): its busiest link direction's
    time, each flow's bytes at the slower of its payload's share of the link's rate (costs.payload_shares) and
    its protocol's rate (costs.serial: at the one, then the other), plus its protocol's cost of a message (a
    flow is one message). A flow within a machine is free, unless its transport has one of its own there
    (costs.local_transports: MPI through shared memory), whose work its sender does. Where every machine's tasks
    share this machine's cores (costs.shared_cores: the emulated cluster), the phase takes at least the
    protocols' work of all its flows, loopback ones included: their CPU (both ends, measured per byte) spread
    over the cores, plus their messages' fixed costs one after another (a collective's was measured with two
    ranks at once: each rank's flow takes half of it), and no less than its longest flow alone."""
    busiest, local, cpu, messages, longest = {}, {}, 0.0, 0.0, 0.0
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
                local[source] = local.get(source, 0.0) + costs.protocol_seconds(
                    costs.local_transports[transport], size)
            continue
        rates = (bytes_per_second * costs.payload_shares.get(transport, 1.0),
                 costs.rates.get(transport, float("inf")))
        seconds = (sum(size / rate for rate in rates) if costs.serial else size / min(rates)) + \
            costs.message_seconds.get(transport, 0.0)
        for direction in (("sent", machine_of[source]), ("received", machine_of[destination])):
            busiest[direction] = busiest.get(direction, 0.0) + seconds
    shared = max(messages + cpu / costs.shared_cores, longest) if costs.shared_cores else 0.0
    return max(max(busiest.values(), default=0.0), max(local.values(), default=0.0), shared)


def pull_before_compute(pull_seconds_of, names, needed, compute_seconds):
    """How long the compute waits for the pull when it starts as soon as the variables it reads first have
    arrived, variable v being first read at needed[v] of the compute (bench/step_trace.py: a worker's read of a
    variable on a server is a receive its first reader waits for), the variables arriving one after another in
    the order they are needed: the wait is the largest, over the variables, of the arrival of it and of every
    variable needed before it, less the compute done by the time it is needed. `pull_seconds_of(names)`: the
    pull phase's time for those variables' flows (None: all). Without `needed` (not measured), the compute
    waits for the whole pull."""
    if not needed:
        return pull_seconds_of(None)
    order = sorted(names, key=needed.get)
    return max(max(pull_seconds_of(order[:i + 1]) - needed[name] * compute_seconds for i, name in enumerate(order)),
               0.0)


def exchange_after_compute(exchange_seconds_of, names, ready, compute_seconds):
    """How long the exchange goes on after the compute when each gradient leaves as soon as the backward pass
    has made it, at ready[name] of the compute (bench/step_trace.py: Horovod allreduces a gradient when it
    is ready, and a worker's send to a server runs when its input is), the gradients one after another in the
    order they are ready: the exchange ends at the latest, over the gradients, of one's ready time plus the
    exchange of it and of every gradient ready after it (when the last of a queue's jobs leaves).
    `exchange_seconds_of(names)`: the exchange's time for those variables' gradients (None: all). Without
    `ready` (not measured), none of the exchange overlaps the compute."""
    if not ready:
        return exchange_seconds_of(None)
    order = sorted(names, key=ready.get)
    end = max(ready[name] * compute_seconds + exchange_seconds_of(order[i:]) for i, name in enumerate(order))
    return max(end - compute_seconds, 0.0)


def background_seconds(architecture, compute_seconds, num_workers, costs=Costs()):
    """What Horovod's background threads take from the compute on costs.shared_cores cores (the emulated
    cluster): every worker's thread takes its share of a core all the time (bench.costs), and the W computations
    share what is left. Zero for parameter servers' workers, which run no Horovod."""
    share = costs.background_shares.get(costs.transports["allreduce"], 0.0)
    if architecture == "ps" or not costs.shared_cores:
        return 0.0
    return compute_seconds * num_workers * share / costs.shared_cores


def update_seconds(architecture, variables, step_rows, num_workers, num_ps, partitions=1, strategy="mod",
                   costs=Costs(), machine_groups=None):
    """The CPU time of the update beyond one device's (which the compute term, run.py's step, holds), on the
    busiest task that applies it. A parameter server adds its workers' dense gradients, deduplicates the rows
    they push to it and applies them, part after part (costs.parallel_parts: each part on a core of its own);
    under local aggregation (hybrid-local) each machine's first worker first deduplicates its machine's rows
    (`machine_groups`: the workers of each machine; on its CPU even with accelerators, as Parallax's accumulator
    is) and the servers receive one union a machine; under allreduce every worker deduplicates every worker's
    rows and applies them all (a ring allreduce adds inside the collective, in the protocol's rate); under
    sparse-as-dense every worker densifies each sparse gradient into a whole table and applies the rule to all
    of it. With costs.accelerated_workers the workers' share runs on their accelerators, in the compute term."""
    sparse = [v for v in variables if v.kind == "sparse"]
    dense = [v for v in variables if v.kind == "dense"]
    work = functools.partial(_update_work, costs)

    def row_bytes(v, w):
        return len(step_rows[w][v.name][1]) * v.row_bytes
    own = 0.0 if costs.accelerated_workers else work(sum(row_bytes(v, 0) for v in sparse),
                                                     sum(row_bytes(v, 0) for v in sparse),
                                                     dense_applied=sum(v.bytes for v in dense))
    if architecture in ("allreduce", "allreduce-dense") and costs.accelerated_workers:
        return 0.0
    if architecture == "allreduce-dense":  # added in the collective, then every table updated whole
        tables = sum(v.bytes for v in sparse) * sum(costs.row_seconds_per_byte.get(name, 0.0)
                                                    for name in ("densify", "apply_dense"))
        return max(tables + work(0, 0, dense_applied=sum(v.bytes for v in dense)) - own, 0.0)
    if architecture == "allreduce":
        union = sum(len(np.unique(np.concatenate([step_rows[w][v.name][1] for w in range(num_workers)])))
                    * v.row_bytes for v in sparse)
        busiest = work(sum(row_bytes(v, w) for v in sparse for w in range(num_workers)), union,
                       dense_applied=sum(v.bytes for v in dense))
        return max(busiest - own, 0.0)
    if architecture == "hybrid-local":  # a machine's first worker sends the union of its machine's rows
        local = max(work(sum(row_bytes(v, w) for v in sparse for w in group), 0) for group in machine_groups)
        pushed = {v.name: [np.unique(np.concatenate([step_rows[w][v.name][1] for w in group]))
                           for group in machine_groups] for v in sparse}
    else:  # every worker sends its rows as they are
        local, pushed = 0.0, {v.name: [step_rows[w][v.name][1] for w in range(num_workers)] for v in sparse}
    replicated = 0.0 if architecture == "ps" or costs.accelerated_workers else \
        work(0, 0, dense_applied=sum(v.bytes for v in dense))
    return max(local + _server_seconds(architecture, variables, pushed, num_workers, num_ps, partitions, strategy,
                                       costs) + replicated - own, 0.0)


def _update_work(costs, rows_in, distinct, dense_added=0, dense_applied=0):
    """CPU seconds to deduplicate `rows_in` bytes of rows, apply `distinct` bytes of rows and `dense_applied`
    bytes of dense values, and add `dense_added` bytes of dense gradients."""
    per_byte = costs.row_seconds_per_byte
    return (rows_in * per_byte.get("deduplicate", 0.0) + (distinct + dense_applied) * per_byte.get("apply", 0.0)
            + dense_added * per_byte.get("add", 0.0))


def _server_seconds(architecture, variables, pushed, num_workers, num_ps, partitions, strategy, costs):
    """The busiest parameter server's update: it adds the workers' dense gradients and deduplicates and applies
    the rows `pushed[variable]` (one array a sender) of its parts."""
    work = functools.partial(_update_work, costs)
    on_ps = variables if architecture == "ps" else [v for v in variables if v.kind == "sparse"]
    placed_parts = [(v, part) for v in on_ps for part in parts(v, partitions, strategy)]
    greedy = placement.GreedyBySize(num_ps)  # the runners' placement
    per_server = [[] for _ in range(num_ps)]
    for v, rows in placed_parts:
        p = greedy.add(len(rows) * v.row_bytes)
        if v.kind == "dense":
            per_server[p].append(work(0, 0, (num_workers - 1) * v.bytes, v.bytes))
        else:
            per_server[p].append(work(sum(_count(u, rows) for u in pushed[v.name]) * v.row_bytes,
                                      _count(np.unique(np.concatenate(pushed[v.name])), rows) * v.row_bytes))
    return max((max(work_of_parts, default=0.0) if costs.parallel_parts else sum(work_of_parts))
               for work_of_parts in per_server)


def predict(architecture, variables, rows, num_workers, num_ps, machine_of, bytes_per_second, partitions=1,
            strategy="mod", costs=Costs(), compute_seconds=0.0, needed=None, ready=None, overlap_phases=False):
    """(each machine's (sent, received) bytes per step, the step's network seconds beyond the compute, the
    update's CPU seconds beyond one device's), averaged over the sampled steps of `rows`; `machine_of[task]`:
    the machine index of every task. The pull overlaps the compute's forward pass by `needed`
    (pull_before_compute: {variable: fraction of `compute_seconds` at which the step first reads it}), and the
    exchange its backward pass by `ready` (exchange_after_compute: {variable: fraction at which its gradient is
    ready}); without them, the pull comes before the compute and the exchange after it. `overlap_phases`: the
    pull and the exchange at once, one phase. With Costs() and neither, the bytes-only network time and no CPU
    time."""
    groups = {}
    for w in range(num_workers):
        groups.setdefault(machine_of[f"worker{w}"], []).append(w)
    steps = rows.steps or [None]

    def step_flows(step, only=None):
        return flows(architecture, variables, step, num_workers, num_ps, partitions, list(groups.values()), strategy,
                     only)

    def seconds(step, found, phase, only):
        return phase_seconds(found if only is None else step_flows(step, only), phase, machine_of, bytes_per_second,
                             costs)
    names, per_machine, network = [v.name for v in variables], [], []
    for step in steps:
        found = step_flows(step)
        per_machine.append(link_bytes(found, machine_of))
        if overlap_phases:
            network.append(phase_seconds(found, None, machine_of, bytes_per_second, costs))
        else:
            network.append(
                pull_before_compute(functools.partial(seconds, step, found, PULL), names, needed, compute_seconds)
                + exchange_after_compute(functools.partial(seconds, step, found, EXCHANGE), names, ready,
                                         compute_seconds))
    update = [update_seconds(architecture, variables, step, num_workers, num_ps, partitions, strategy, costs,
                             list(groups.values()))
              for step in steps]
    return _mean_per_machine(per_machine), float(np.mean(network)), float(np.mean(update))
