"""The traffic model (bench/traffic.py), make bench's sweep (bench/run.py) and the extrapolation
(bench/predict.py)."""
import argparse
import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO, pdf_text, read_jsonl, run_module, run_script, without_spaces
from bench import crossover, predict, traffic, validate
from bench import run as bench_run
from harness import UsageError, experiments, placement, reduction, runner_flags
from launcher.starters import netns
from reporting import blocks
from harness import models

LSTM = models.load("lstm")
ARGS = argparse.Namespace(seed=1, data_path="")

DENSE = traffic.Variable("kernel", (10, 10), "dense")         # 400 bytes
TABLE = traffic.Variable("table", (100, 5), "sparse")         # rows of 20 bytes


def one_step(*per_worker):
    """Rows of one step: per worker, the gathered indices of TABLE (their distinct ones follow)."""
    return [{"table": (np.array(g), np.unique(g))} for g in per_worker]


def machines(*groups):
    return {task: m for m, tasks in enumerate(groups) for task in tasks}


def network_seconds(step_flows, machine_of, bytes_per_second, costs=traffic.Costs()):
    """The step's flows' time on the network, the pull and then the exchange."""
    return sum(traffic.phase_seconds(step_flows, phase, machine_of, bytes_per_second, costs)
               for phase in (traffic.PULL, traffic.EXCHANGE))


@pytest.mark.parametrize("config, sparse", [("tiny", {"embedding"}),
                                            ("lm1b-tiny", {"embedding", "softmax_w", "softmax_b"})])
def test_the_model_s_variables_keep_their_shapes_and_kinds(config, sparse):
    variables = traffic.model_variables(LSTM, LSTM.CONFIGS[config], ARGS)
    assert [(v.name, v.shape) for v in variables] == [(name, v.shape) for name, v in
                                                      LSTM.variables(LSTM.CONFIGS[config]).items()]
    assert {v.name for v in variables if v.kind == "sparse"} == sparse


def test_ring_allreduce_moves_2_n_minus_1_over_n_of_the_dense_bytes():
    for n in (2, 4):
        flows = traffic.flows("allreduce-dense", [DENSE], one_step(*[[0]] * n), n, 1)
        per_machine = traffic.link_bytes(flows, machines(*[[f"worker{w}"] for w in range(n)]))
        assert per_machine == [(2 * (n - 1) / n * 400, 2 * (n - 1) / n * 400)] * n


def test_the_exact_reduction_moves_a_ring_s_bytes_as_an_alltoall_and_an_allgather():
    """harness/reduction.py's exact reduction of 400 dense bytes: chunk k (padded to whole floats) sent to rank k,
    the sums allgathered; a ring's 2(N-1)/N of the buffer each way; the sparse rows allgathered as Horovod's."""
    for n in (3, 4):
        flows = traffic.flows("allreduce-exact", [DENSE], one_step(*[[0]] * n), n, 1)
        chunk = -(-100 // n) * 4
        assert sorted({f[4] for f in flows}) == ["allgather", "alltoall"]
        assert sum(f[2] for f in flows if f[4] == "alltoall") == n * (n - 1) * chunk
        per_machine = traffic.link_bytes(flows, machines(*[[f"worker{w}"] for w in range(n)]))
        assert per_machine == [(2 * (n - 1) * chunk, 2 * (n - 1) * chunk)] * n
        ring = traffic.link_bytes(traffic.flows("allreduce", [DENSE], one_step(*[[0]] * n), n, 1),
                                  machines(*[[f"worker{w}"] for w in range(n)]))
        assert np.ravel(per_machine) == pytest.approx(np.ravel(ring), rel=0.03)  # the padding's few bytes
    two = one_step([0], [0])  # with two workers the exact reduction is Horovod's own ring (harness/reduction.py)
    assert traffic.flows("allreduce-exact", [DENSE], two, 2, 1) == traffic.flows("allreduce", [DENSE], two, 2, 1)
    step = one_step([1, 2, 2], [3], [4, 5, 6])
    assert traffic.flows("allreduce-exact", [TABLE], step, 3, 1) == traffic.flows("allreduce", [TABLE], step, 3, 1)
    hybrid = traffic.flows("hybrid-exact", [DENSE, TABLE], step, 3, 1)
    assert [f for f in hybrid if f[4] not in ("alltoall", "allgather")] == [
        f for f in traffic.flows("hybrid", [DENSE, TABLE], step, 3, 1) if f[4] != "allreduce"]


def test_the_exact_reduction_groups_from_the_last_gradient_and_prices_each_group():
    """Groups of at least the limit, from the last gradient (backpropagation's first); each its own alltoall and
    allgather, chunks padded within it."""
    assert reduction.groups([10, 10, 10], 15) == [[2, 1], [0]]
    assert reduction.groups([10, 10, 10], 30) == [[2, 1, 0]]
    assert reduction.groups([40, 4, 4], 8) == [[2, 1], [0]]
    big = traffic.Variable("big", (runner_flags.EXACT_GROUP_BYTES // 4 + 1,), "dense")  # a group of its own
    flows = traffic.flows("allreduce-exact", [DENSE, big], one_step(*[[0]] * 4), 4, 1)
    assert sorted({f[2] for f in flows if f[4] == "alltoall"}) == [100, -(-big.bytes // 16) * 4]


def test_the_exact_reduction_adds_its_chunk_s_copies_in_the_update():
    """Each rank adds W copies of its chunk in TensorFlow: (W - 1) / W of the dense bytes at the "add" rate,
    beyond Horovod's ring (which adds inside Gloo, at its rate)."""
    costs = traffic.Costs(row_seconds_per_byte={"add": 0.5, "apply": 0.0})
    step = one_step(*[[0]] * 4)
    assert traffic.update_seconds("allreduce-exact", [DENSE], step, 4, 1, costs=costs) - traffic.update_seconds(
        "allreduce", [DENSE], step, 4, 1, costs=costs) == pytest.approx(3 / 4 * 400 * 0.5)
    assert traffic.update_seconds("hybrid-exact", [DENSE], step, 4, 1, costs=costs) - traffic.update_seconds(
        "hybrid", [DENSE], step, 4, 1, costs=costs) == pytest.approx(3 / 4 * 400 * 0.5)


def test_allgather_passes_on_every_rank_s_rows_but_the_next_one_s():
    step = one_step([1, 2, 2], [3], [4, 5, 6])  # distinct rows: 2, 1, 3
    flows = traffic.flows("allreduce", [TABLE], step, 3, 1)
    # two allgathers, as Horovod sends a tf.IndexedSlices: the rows' values (20 bytes each), then their indices
    assert sorted(f[:3] for f in flows) == sorted([("worker0", "worker1", (2 + 3) * size) for size in (20, 4)]
                                                  + [("worker1", "worker2", (2 + 1) * size) for size in (20, 4)]
                                                  + [("worker2", "worker0", (1 + 3) * size) for size in (20, 4)])


def test_a_parameter_server_worker_pulls_what_it_gathers_and_pushes_its_distinct_rows():
    step = one_step([7, 7, 8], [9])
    flows = traffic.flows("ps", [DENSE, TABLE], step, 2, 1)
    sent = {}
    for source, destination, size, *_ in flows:
        sent[source, destination] = sent.get((source, destination), 0) + size
    assert sent[("ps0", "worker0")] == 400 + 3 * 20             # the dense variable, and every gathered row
    assert sent[("worker0", "ps0")] == 400 + 3 * 4 + 2 * 24     # its gradient; the ids; two distinct rows
    assert sent[("worker1", "ps0")] == 400 + 1 * 4 + 1 * 24


def test_asynchronous_bytes_weigh_each_worker_s_flows_by_its_pace():
    """Every flow of a PS step is one worker's: at equal paces the bytes are a synchronous step's, and a worker
    that took no step in the window moved nothing."""
    rows = traffic.Rows([one_step([7, 7, 8], [9])])
    placement_of = machines(["worker0", "ps0"], ["worker1", "ps1"])
    synchronous, _, _ = traffic.predict("ps", [DENSE, TABLE], rows, 2, 2, placement_of, 100.0, partitions=2)
    assert traffic.paced_link_bytes("ps", [DENSE, TABLE], rows, 2, 2, placement_of, [1, 1], 2) == synchronous
    worker0 = [f for f in traffic.flows("ps", [DENSE, TABLE], rows.steps[0], 2, 2, 2) if "worker0" in f[:2]]
    alone = traffic.link_bytes(worker0, placement_of)
    assert traffic.paced_link_bytes("ps", [DENSE, TABLE], rows, 2, 2, placement_of, [3, 0], 2) == [
        (3 * s, 3 * r) for s, r in alone] != synchronous


def test_validation_scores_each_set_by_its_interval_and_its_median_error():
    def cell(set_name, step, lower, point, upper):
        return {"set": set_name, "model": "m", "config": "small", "runner": "tf", "workers": 2, "link": "1gbit",
                "step_seconds": step,
                "lower_seconds": lower, "point_seconds": point, "upper_seconds": upper}
    cells = [cell("developed", 1.0, 0.5, 1.0, 2.0), cell("held-out", 1.1, 0.5, 1.0, 2.0),
             cell("held-out", 0.9, 0.95, 1.0, 2.0), cell("held-out", 2.0, 0.5, 1.0, 2.0)]
    lines = validate.score(cells)
    assert [line.split()[-1] for line in lines[1:5]] == ["yes", "yes", "NO", "yes"]
    assert lines[-2] == "developed: 1 of 1 inside their interval; median |log(measured / point)| 0.000"
    assert lines[-1] == (f"held-out: 2 of 3 inside their interval; median |log(measured / point)| "
                         f"{abs(np.log(0.9)):.3f}")


def test_worker_paces_are_each_worker_s_updates_per_chief_step_in_the_window():
    counts = [{"after_step": 1, "counts": [1, 0]}, {"after_step": 2, "counts": [2, 3]},
              {"after_step": 4, "counts": [4, 4]}]
    assert bench_run.worker_paces(counts, 2, 4) == [1.0, 0.5]


def test_round_robin_parts_spread_the_frequent_low_ids_over_every_server():
    """Words 0-3, the most frequent of a frequency-sorted vocabulary: round robin parts (Parallax's) put two on
    each server, where contiguous ones would put all four on the first."""
    flows = traffic.flows("ps", [TABLE], one_step([0, 1, 2, 3]), 1, 2, partitions=2)
    assert sorted((f[1], f[2]) for f in flows if f[0] == "worker0" and f[3] == traffic.EXCHANGE) == [
        ("ps0", 2 * 24), ("ps1", 2 * 24)]
    assert [list(rows) for rows in traffic.parts(TABLE, 2)] == [list(range(0, 100, 2)), list(range(1, 100, 2))]


def test_the_hybrid_allreduces_dense_and_local_aggregation_pushes_a_machine_s_union_once():
    step = one_step([1, 2], [2, 3], [1, 9], [9])
    plain = traffic.flows("hybrid", [DENSE, TABLE], step, 4, 2)
    local = traffic.flows("hybrid-local", [DENSE, TABLE], step, 4, 2, machine_groups=[[0, 1], [2, 3]])

    def pushes(flows):  # (sender, bytes) of the gradients the parameter servers receive
        return sorted((f[0], f[2]) for f in flows if f[1].startswith("ps") and f[3] == traffic.EXCHANGE)
    assert pushes(plain) == [("worker0", 2 * 24), ("worker1", 2 * 24), ("worker2", 2 * 24), ("worker3", 1 * 24)]
    assert pushes(local) == [("worker0", 3 * 24), ("worker2", 2 * 24)]  # {1, 2, 3} and {1, 9}, once a machine
    ring = [f for f in plain if f[0].startswith("worker") and f[1].startswith("worker")]
    assert len(ring) == 4 and all(f[2] == 2 * 3 / 4 * DENSE.bytes for f in ring)  # dense: allreduced only


def test_phases_add_up_the_busiest_direction_of_each():
    step = one_step([1], [2])
    flows = traffic.flows("ps", [DENSE], step, 2, 1)
    placement = machines(["worker0", "ps0"], ["worker1"])
    assert traffic.link_bytes(flows, placement) == [(400.0, 400.0), (400.0, 400.0)]
    assert network_seconds(flows, placement, 100.0) == 4.0 + 4.0  # pull, then push: one after the other


def test_each_gradient_s_exchange_starts_when_the_backward_pass_has_made_it():
    """PS at 100 bytes/s, worker1 across the link: the pull (4.2 s) comes before the compute; the exchange pushes
    the kernel (4 s) and the table's row (0.24 s). With the kernel's gradient ready at half of a 2 s compute and
    the table's at its end, the pushes run from 1 s, queued one behind the other, and end 3.24 s after it.
    With a long compute only the last gradient's push is left after it; with nothing measured, or every gradient
    ready at the end, none of the exchange overlaps the compute."""
    step = one_step([1], [2])
    placement_of = machines(["worker0", "ps0"], ["worker1"])
    rows = traffic.Rows([step])
    flows = traffic.flows("ps", [DENSE, TABLE], step, 2, 1)
    pull, push = (traffic.phase_seconds(flows, phase, placement_of, 100.0)
                  for phase in (traffic.PULL, traffic.EXCHANGE))
    assert (pull, push) == pytest.approx((4.0 + 0.2, 4.0 + 0.24))  # a row: 20 bytes, and a 4-byte index pushed

    def network(compute, ready):
        return traffic.predict("ps", [DENSE, TABLE], rows, 2, 1, placement_of, 100.0, compute_seconds=compute,
                               ready=ready)[1]
    assert network(2.0, None) == network(2.0, {"kernel": 1.0, "table": 1.0}) == pytest.approx(pull + push)
    assert network(2.0, {"kernel": 0.5, "table": 1.0}) == pytest.approx(pull + 1.0 + push - 2.0)
    assert network(100.0, {"kernel": 0.5, "table": 1.0}) == pytest.approx(pull + 0.24)  # the table's push alone
    assert network(100.0, {"kernel": 1.0, "table": 0.5}) == pytest.approx(pull + 4.0)  # the kernel's push alone


def test_the_compute_waits_only_for_the_variables_it_has_not_yet_needed():
    """PS at 100 bytes/s, worker1 across the link: the pull sends the table's row (0.2 s, with its index) and
    the kernel (4 s). With the table read at the start of a 2 s compute and the kernel at its middle, the kernel
    arrives 4.2 s into the step, 1 s of compute after the start: the compute waits 3.2 s, not the whole pull.
    With a long compute it waits only for the table; with nothing measured, the whole pull comes first."""
    step = one_step([1], [2])
    placement_of = machines(["worker0", "ps0"], ["worker1"])
    rows = traffic.Rows([step])
    pull = traffic.phase_seconds(traffic.flows("ps", [DENSE, TABLE], step, 2, 1), traffic.PULL, placement_of, 100.0)

    def network(compute, needed):
        return traffic.predict("ps", [DENSE, TABLE], rows, 2, 1, placement_of, 100.0, compute_seconds=compute,
                               needed=needed, ready={"kernel": 1.0, "table": 1.0})[1] - 4.24  # less the push
    assert network(2.0, None) == network(2.0, {"kernel": 0.0, "table": 0.0}) == pytest.approx(pull)
    assert network(2.0, {"kernel": 0.5, "table": 0.0}) == pytest.approx(pull - 1.0)
    assert network(100.0, {"kernel": 0.5, "table": 0.0}) == pytest.approx(0.2)  # the table's row alone
    assert network(100.0, {"kernel": 0.0, "table": 0.5}) == pytest.approx(4.0)  # the kernel before anything


def test_the_step_reads_its_variables_in_forward_order_and_has_their_gradients_in_backward_order(tmp_path):
    """Traced on tiny: the step first reads every variable within it, the embedding and the LSTM's before the
    output layer's (the forward pass ends at the output); every gradient is ready within the step, after every
    variable is read, the output layer's before the LSTM's and the embedding's (the backward pass starts at the
    output; the LSTM's and the embedding's gradients are sums over every time step, finished together at its
    end, in either order)."""
    result = run_module("bench.step_trace", "--config=tiny", "--warmup_steps=2", "--traced_steps=3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout.splitlines()[0])
    needed, ready = measured["needed"], measured["ready"]
    assert set(needed) == set(ready) == set(LSTM.variables(LSTM.CONFIGS["tiny"]))
    assert all(0 <= fraction < 1 for fraction in needed.values()) and measured["traced_step_seconds"] > 0
    assert all(0 < fraction <= 1 for fraction in ready.values()) and max(needed.values()) < min(ready.values())
    assert max(f for name, f in needed.items() if "softmax" not in name) < min(needed["softmax_w"], needed["softmax_b"])
    assert max(ready["softmax_w"], ready["softmax_b"]) < min(f for name, f in ready.items() if "softmax" not in name)


def test_the_costed_model_reduces_to_the_bytes_only_model_without_costs():
    """Infinite protocol rates, no fixed cost and no CPU work per byte give the bytes-only model, term by term."""
    protocols = set(traffic.transports().values())
    free = traffic.Costs(rates=dict.fromkeys(protocols, float("inf")), message_seconds=dict.fromkeys(protocols, 0.0),
                         cpu_seconds_per_byte=dict.fromkeys(protocols, 0.0), shared_cores=2)
    step = one_step([1, 2, 2], [2, 7])
    placement_of = machines(["worker0", "ps0"], ["worker1", "ps1"])
    for architecture in traffic.ARCHITECTURES:
        rows = traffic.Rows([step])
        plain = traffic.predict(architecture, [DENSE, TABLE], rows, 2, 2, placement_of, 100.0, partitions=2)
        assert traffic.predict(architecture, [DENSE, TABLE], rows, 2, 2, placement_of, 100.0, partitions=2,
                               costs=free) == plain
        assert plain[2] == 0.0  # no CPU term


def test_the_costed_model_adds_each_protocol_s_rate_and_messages_and_the_servers_work():
    """PS, one dense variable of 400 bytes on ps0 (worker0's machine): worker1 pulls it, then pushes its
    gradient. gRPC carries 50 bytes/s, slower than the 100 of the link, and costs 1 s a message: each phase
    takes 400 / 50 + 1 s. The server adds the other worker's gradient (400 bytes at 0.01 s a byte) beyond what
    one device does; deduplicating and applying cost the same on both."""
    costs = traffic.Costs(rates={"grpc": 50.0}, message_seconds={"grpc": 1.0},
                          row_seconds_per_byte={"add": 0.01, "apply": 0.001})
    flows = traffic.flows("ps", [DENSE], one_step([1], [2]), 2, 1)
    placement_of = machines(["worker0", "ps0"], ["worker1"])
    assert network_seconds(flows, placement_of, 100.0, costs) == 2 * (400 / 50 + 1)
    assert traffic.update_seconds("ps", [DENSE], one_step([1], [2]), 2, 1, costs=costs) == pytest.approx(400 * 0.01)
    # On one machine's 2 cores (the emulated cluster) every flow's protocol work counts, the local one's too:
    # 2 flows of 400 bytes a phase at 0.05 CPU seconds a byte (both ends), spread over the cores, and their 2
    # messages one after another: 800 * 0.05 / 2 + 2 s, more than the link direction's 9 s.
    shared = dataclasses.replace(costs, shared_cores=2, cpu_seconds_per_byte={"grpc": 0.05})
    assert network_seconds(flows, placement_of, 100.0, shared) == pytest.approx(2 * (800 * 0.05 / 2 + 2))
    # With little CPU a byte, a phase still takes as long as its longest flow alone, 400 / 50 + 1 s.
    light = dataclasses.replace(shared, cpu_seconds_per_byte={"grpc": 0.001}, rates={"grpc": 20.0})
    assert network_seconds(flows, placement_of, 100.0, light) == pytest.approx(2 * (400 / 20 + 1))
    # Allgather: every worker deduplicates both workers' rows and applies their union; one device, its own.
    costs = traffic.Costs(row_seconds_per_byte={"deduplicate": 1.0, "apply": 10.0})
    step = one_step([1, 2, 2], [2, 7])  # distinct: {1, 2} and {2, 7}, union {1, 2, 7}; rows of 20 bytes
    assert traffic.update_seconds("allreduce", [TABLE], step, 2, 1, costs=costs) == pytest.approx(
        (4 * 20 * 1.0 + 3 * 20 * 10.0) - (2 * 20 * 1.0 + 2 * 20 * 10.0))


def test_local_aggregation_deduplicates_a_machine_s_rows_before_its_server_does():
    """Rows {1, 2}, {2, 3} on machine 0 and {1, 9}, {9} on machine 1, one server, rows of 20 bytes,
    deduplicating at 1 s a byte and applying at 10. Without local aggregation the server deduplicates all 7
    rows pushed and applies their union {1, 2, 3, 9}. With it, machine 0's first worker deduplicates its 4
    rows (the busier machine), then the server the 5 rows of the unions {1, 2, 3} and {1, 9}. One device's own
    update (2 rows in, 2 applied) is in the compute term either way."""
    costs = traffic.Costs(row_seconds_per_byte={"deduplicate": 1.0, "apply": 10.0})
    step = one_step([1, 2], [2, 3], [1, 9], [9])
    own = 2 * 20 * 1.0 + 2 * 20 * 10.0
    assert traffic.update_seconds("hybrid", [TABLE], step, 4, 1, costs=costs) == pytest.approx(
        7 * 20 * 1.0 + 4 * 20 * 10.0 - own)
    assert traffic.update_seconds("hybrid-local", [TABLE], step, 4, 1, costs=costs,
                                  machine_groups=[[0, 1], [2, 3]]) == pytest.approx(
        4 * 20 * 1.0 + 5 * 20 * 1.0 + 4 * 20 * 10.0 - own)


def test_sparse_as_dense_densifies_and_updates_every_table_whole_on_every_worker():
    """TABLE (2,000 bytes) densified at 0.001 s a byte and updated whole at 0.002 s a byte on each worker, where
    one device updates only the 2 distinct rows (20 bytes each) of its gradient at 0.01 s a byte; the dense
    kernel is applied the same either way."""
    costs = traffic.Costs(row_seconds_per_byte={"densify": 0.001, "apply_dense": 0.002, "apply": 0.01})
    step = one_step([1, 2, 2], [2, 7])
    assert traffic.update_seconds("allreduce-dense", [DENSE, TABLE], step, 2, 1, costs=costs) == pytest.approx(
        2000 * 0.003 - 2 * 20 * 0.01)
    assert traffic.update_seconds("allreduce-dense", [DENSE, TABLE], step, 2, 1,
                                  costs=dataclasses.replace(costs, accelerated_workers=True)) == 0.0


def test_a_rule_that_updates_every_row_is_priced_as_a_whole_table_wherever_it_runs():
    """Adam updates every row of TABLE (2,000 bytes; densified at 0.001 s a byte, updated whole at 0.002) however
    few its gradient has, on one device as on any runner: beyond one device's update only the rows' deduplication
    is left (0.01 s a byte: 4 rows of 20 bytes pushed or gathered, against one device's 2), where a rule of the
    rows (Adagrad) applies the union of 3 rows against 2 at 10 s a byte."""
    costs = traffic.Costs(row_seconds_per_byte={"deduplicate": 0.01, "apply": 10.0, "densify": 0.001,
                                                "apply_dense": 0.002})
    adam = dataclasses.replace(TABLE, whole_update=True)
    step = one_step([1, 2, 2], [2, 7])
    for architecture in ("allreduce", "ps", "hybrid"):
        assert traffic.update_seconds(architecture, [adam], step, 2, 1, costs=costs) == pytest.approx(
            4 * 20 * 0.01 - 2 * 20 * 0.01)
        assert traffic.update_seconds(architecture, [TABLE], step, 2, 1, costs=costs) == pytest.approx(
            4 * 20 * 0.01 + 3 * 20 * 10.0 - (2 * 20 * 0.01 + 2 * 20 * 10.0))
    assert traffic.update_seconds("allreduce-dense", [adam], step, 2, 1, costs=costs) == 0.0


def test_a_flow_carries_its_payload_at_its_share_of_the_link():
    """A shaped link's headers and acknowledgements take part of its rate: 100 bytes from one machine to another
    over a 100 bytes/s link whose payload gets 0.8 of it take 1.25 s; a protocol slower than that share limits
    instead."""
    flows = [("worker0", "ps0", 100, traffic.PULL, "pull")]
    two = {"worker0": 0, "ps0": 1}
    shared = traffic.Costs(payload_shares={"grpc": 0.8})
    assert network_seconds(flows, two, 100.0, shared) == pytest.approx(1.25)
    assert network_seconds(flows, two, 100.0, dataclasses.replace(shared, rates={"grpc": 50.0})) == \
        pytest.approx(2.0)
    assert network_seconds(flows, two, 100.0) == pytest.approx(1.0)  # the bytes-only model: all of it
    # nothing overlapped (the upper estimate): the link's time, then the protocol's
    assert network_seconds(flows, two, 100.0, dataclasses.replace(shared, rates={"grpc": 50.0}, serial=True)) \
        == pytest.approx(1.25 + 2.0)


def test_the_lower_estimate_overlaps_the_pull_with_the_exchange():
    """A pull of 100 bytes from ps0 to worker0, then an exchange of 100 bytes back, over a 100 bytes/s link:
    one after the other 2 s; as one phase each direction carries 100 bytes, 1 s."""
    placement_of, rows = machines(["worker0"], ["ps0"]), traffic.Rows([[{}]])
    dense = traffic.Variable("w", (25,), "dense")
    after = traffic.predict("ps", [dense], rows, 1, 1, placement_of, 100.0)[1]
    together = traffic.predict("ps", [dense], rows, 1, 1, placement_of, 100.0, overlap_phases=True)[1]
    assert (after, together) == (pytest.approx(2.0), pytest.approx(1.0))


def test_the_protocols_cpu_counts_every_flow_loopback_ones_too_at_its_transport_s_cost():
    """A ring of two ranks allreduces 400 bytes: each sends 400 at Gloo's 0.01 s a byte, 8 s. Under PS, worker0
    and ps0 share a machine: their flows cross no link and still cost gRPC's CPU (0.001 s a byte)."""
    costs = traffic.Costs(cpu_seconds_per_byte={"gloo allreduce": 0.01, "grpc": 0.001})
    rows = traffic.Rows([one_step([7, 7, 8], [9])])
    ring = machines(["worker0"], ["worker1"])
    assert traffic.protocol_cpu_seconds("allreduce-dense", [DENSE], rows, 2, 1, ring, costs=costs) == pytest.approx(8)
    shared = machines(["worker0", "ps0"], ["worker1"])
    ps_bytes = sum(f[2] for f in traffic.flows("ps", [DENSE, TABLE], rows.steps[0], 2, 1))
    assert traffic.protocol_cpu_seconds("ps", [DENSE, TABLE], rows, 2, 1, shared, costs=costs) == pytest.approx(
        ps_bytes * 0.001)


def test_a_transport_of_its_own_within_a_machine_prices_the_flows_there():
    """Two ranks on one machine allgather their rows (2 and 2 distinct rows of 24 bytes with the index, in two
    collectives: values, then indices): over MPI between machines it would cross no link and cost nothing; MPI's
    shared memory (10 bytes/s, 0.5 s a message) makes each rank pass its predecessor's rows itself."""
    flows = traffic.flows("allreduce", [TABLE], one_step([1, 2], [2, 7]), 2, 1)
    one_machine = machines(["worker0", "worker1"])
    mpi = traffic.Costs(transports=traffic.transports("mpi"))
    assert network_seconds(flows, one_machine, 100.0, mpi) == 0.0
    local = dataclasses.replace(mpi, rates={"mpi-local allgather": 10.0}, message_seconds={"mpi-local allgather": 0.5},
                                local_transports={"mpi allgather": "mpi-local allgather"})
    assert network_seconds(flows, one_machine, 100.0, local) == 2 * 24 / 10.0 + 2 * 0.5


def test_the_cost_benchmark_measures_every_protocol_in_sane_units(measured_costs, tmp_path):
    """bench.costs on small sizes: gRPC, Gloo and MPI (over TCP, and through shared memory) between two ranks,
    each a rate in bytes per second and a fixed cost in seconds; the rows' CPU time in seconds per byte; kept
    with the machine's description."""
    measured = json.loads((measured_costs / "bench-costs.json").read_text())
    assert set(measured["protocols"]) == {"grpc", "gloo", "mpi", "mpi-local"}
    fits = [measured["protocols"]["grpc"]["pull"], measured["protocols"]["grpc"]["push"],
            *[measured["protocols"][name][operation] for name in ("gloo", "mpi", "mpi-local")
              for operation in traffic.COLLECTIVES]]
    for fitted in fits:
        assert 1e6 < fitted["bytes_per_second"] and 0 <= fitted["fixed_seconds"] < 1
        assert all(0 < p["p16"] <= p["median"] <= p["p84"] < 5 for p in fitted["points"])
    assert 0 <= measured["protocols"]["grpc"]["message_seconds"] < 0.1
    # over a shaped link the payload gets most of its rate, never more (headers and acknowledgements); the
    # fast end of the delivery at least its middle, the slow end at most; Gloo's at each rank count
    shares = measured["shaped_link"]["payload_shares"]
    assert {ranks: set(of_ranks) for ranks, of_ranks in shares.items()} == {
        "2": {"grpc", "gloo allreduce", "gloo allgather", "gloo alltoall"},
        "4": {"gloo allreduce", "gloo allgather", "gloo alltoall"}}
    for share in (share for of_ranks in shares.values() for share in of_ranks.values()):
        assert 0.2 < share["p84"] <= share["median"] <= share["p16"] <= 1.0, shares
    for name in ("gloo", "mpi", "mpi-local"):  # a share of one core: the thread wakes every millisecond
        assert 0 < measured["protocols"][name]["background_cpu_share"] < 1
    for fitted in fits:  # the machine's CPU per byte sent: a flow costs some, and less than 1 s per MB
        assert 0 <= fitted["cpu_seconds_per_byte"] < 1e-6
    assert set(measured["rows"]) == {"deduplicate", "apply", "add", "densify", "apply_dense"}
    for work in measured["rows"].values():
        assert 1e-13 < work["seconds_per_byte"] < 1e-6
    from bench import costs
    assert costs.load(str(measured_costs)) == measured  # this machine's: a bench run reuses it
    costed = traffic.Costs.measured(measured)
    assert costed.rates["grpc"] > 1e6 and costed.message_seconds["grpc"] >= 0
    for operation in traffic.COLLECTIVES:  # each collective costed as measured, not as the other
        fitted = measured["protocols"]["gloo"][operation]
        assert costed.rates[f"gloo {operation}"] == fitted["bytes_per_second"]
        assert costed.message_seconds[f"gloo {operation}"] == fitted["fixed_seconds"]
        assert costed.cpu_seconds_per_byte[f"gloo {operation}"] == fitted["cpu_seconds_per_byte"]
    assert costed.payload_shares == {name: share["median"] for name, share in shares["2"].items()}
    four = traffic.Costs.measured(measured, workers=5)  # the nearest rank count measured
    assert four.payload_shares == {"grpc": shares["2"]["grpc"]["median"],
                                   **{name: share["median"] for name, share in shares["4"].items()}}
    assert costed.background_share == measured["protocols"]["gloo"]["background_cpu_share"]
    older = tmp_path / costs.COSTS  # (a copy: the session's costs are read by the other group meanwhile)
    older.write_text(json.dumps(dict(measured, format=costs.FORMAT - 1)))
    assert costs.load(str(tmp_path)) is None  # measured again: it lacks what the code now reads


def test_greedy_placement_is_the_runners_placement():
    variables = traffic.model_variables(LSTM, LSTM.CONFIGS["small"], ARGS)
    # run_tf.py's placement of the small config on 2 servers (printed by the runner, tested in test_tf.py)
    greedy = placement.GreedyBySize(2)
    assert [greedy.add(v.bytes) for v in variables] == [0, 1, 1, 1, 1, 1, 0]


def test_tasks_of_one_machine_cost_no_link_bytes():
    step = one_step([1, 2], [3])
    flows = traffic.flows("ps", [DENSE, TABLE], step, 2, 1)
    assert traffic.link_bytes(flows, machines(["worker0", "worker1", "ps0"])) == [(0.0, 0.0)]


def test_touched_rows_are_the_run_s_word_ids():
    config = LSTM.CONFIGS["tiny"]
    variables = traffic.model_variables(LSTM, config, ARGS)
    rows = traffic.touched_rows(LSTM, config, ARGS, variables, 2, [3])
    from harness import data
    inputs, _ = LSTM.data(config, "", 1)(3)
    for rank in range(2):
        gathered, distinct = rows.steps[0][rank]["embedding"]
        ids = inputs[data.shard(config.batch_size, rank, 2)]
        assert sorted(gathered.tolist()) == sorted(ids.ravel().tolist())
        assert distinct.tolist() == sorted(set(ids.ravel().tolist()))


def test_a_sampled_softmax_touches_the_targets_and_the_step_s_candidates():
    config = LSTM.CONFIGS["lm1b-tiny"]
    rows = traffic.touched_rows(LSTM, config, ARGS, traffic.model_variables(LSTM, config, ARGS), 1, [2])
    _, targets = LSTM.data(config, "", 1)(2)
    gathered, distinct = rows.steps[0][0]["softmax_w"]
    assert set(targets.ravel().tolist()) <= set(distinct.tolist())
    assert len(gathered) == targets.size + config.num_sampled  # one read per target and per candidate


@pytest.mark.parametrize("flags, named", [(["--configs=nope"], "--configs"), (["--runners=mpi"], "--runners"),
                                          (["--configs=small", "--scaling=strong", "--workers=3"], "--workers"),
                                          (["--batch_size=40"], "--batch_size"),
                                          (["--net=fast"], "--net"), (["--delay=soon"], "--delay=soon"),
                                          (["--workers=2,0"], "--workers=2,0"), (["--net=1gbit,x"], "--net"),
                                          (["--crossover", "--net=1gbit,10gbit"], "--crossover"),
                                          (["--net=1gbit,1000mbit"], "--net"), (["--runners="], "--runners=: empty"),
                                          (["--configs="], "--configs=: empty"), (["--workers="], "--workers=: empty"),
                                          (["--runners=tf,tf"], "tf named twice")])
def test_bench_bad_input_is_named_by_the_flags_check(tmp_path, monkeypatch, flags, named):
    """bench.run's flags check, in this process: the next test shows how the command reports it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as error:
        bench_run.parse_flags(flags)
    assert named in str(error.value)


def test_bench_bad_input_is_one_line_and_exit_2(tmp_path, assert_usage_error):
    assert_usage_error(run_module("bench.run", "--runners=mpi", cwd=tmp_path), "--runners")


def test_the_bench_run_as_a_file_checks_its_flags_as_the_module_does(tmp_path, assert_usage_error):
    """python bench/run.py, as a student types it (no PYTHONPATH): the same one-line error."""
    # named by its path, not taken for the reference's run.py
    assert_usage_error(run_script("bench/run.py", "--workers=0", cwd=tmp_path), "bench/run.py: error:", "--workers")


@pytest.mark.parametrize("flags, named", [(["--machines=0"], "--machines"), (["--machines=8,x"], "--machines"),
                                          (["--machines="], "--machines=: empty"),
                                          (["--compute_seconds=-1"], "--compute_seconds"),
                                          (["--compute_seconds=nan"], "--compute_seconds")])
def test_predict_bad_input_is_one_line_and_exit_2(tmp_path, assert_usage_error, flags, named):
    result = subprocess.run([sys.executable, "-m", "bench.predict", "--config=tiny", *flags], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True, timeout=300)
    assert_usage_error(result, named)
    assert not (tmp_path / "results").exists()


def test_validate_bad_input_is_one_line_and_exit_2(tmp_path, assert_usage_error):
    assert_usage_error(run_module("bench.validate", "--sets=developed,nope", cwd=tmp_path), "--sets")
    assert_usage_error(run_module("bench.validate", "--sets=", cwd=tmp_path), "--sets=: empty")


def test_a_stopped_validation_stops_its_child_and_leaves_no_machine(tmp_path):
    """SIGTERM to bench.validate while its bench.costs runs an emulated cluster: both end, and the cluster's
    namespaces go with them."""
    if os.geteuid() != 0:
        pytest.skip("bench.costs' emulated cluster needs root")
    validation = subprocess.Popen([sys.executable, "-m", "bench.validate", f"--results_dir={tmp_path}"], cwd=REPO,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def children():  # the processes this validation started
        pids = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
        return [p for p in pids if int(p) != validation.pid]

    def namespaces(owners):
        return [n for n in netns._our_namespaces() if n.split("-")[1] in owners]
    deadline = time.monotonic() + 300
    while not namespaces(children()) and validation.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    owners = children()
    assert namespaces(owners), "bench.costs never made its emulated cluster"
    time.sleep(2)  # the cluster being built
    validation.send_signal(signal.SIGTERM)
    assert validation.wait(timeout=60) != 0
    deadline = time.monotonic() + 60
    while (children() or namespaces(owners)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert children() == [] and namespaces(owners) == []


def test_protocol_probe_bad_input_is_one_line_and_exit_2(tmp_path, assert_usage_error):
    """bench.costs starts it; a person may too."""
    assert_usage_error(run_module("bench.protocol_probe", cwd=tmp_path), "--probe")
    assert_usage_error(run_module("bench.protocol_probe", "--probe=grpc", "--sizes=", cwd=tmp_path), "--sizes=: empty")


def test_costs_bad_input_is_one_line_and_exit_2(tmp_path, assert_usage_error):
    assert_usage_error(run_module("bench.costs", "--repeats=1", cwd=tmp_path), "--repeats")
    assert not (tmp_path / "results").exists()


def test_warmup_bad_input_is_one_line_and_exit_2(tmp_path, assert_usage_error):
    assert_usage_error(run_module("bench.warmup", "--steps=30", cwd=tmp_path), "--steps")
    assert_usage_error(run_module("bench.warmup", "--runners=tf,nope", cwd=tmp_path), "--runners=tf,nope", "nope")
    assert_usage_error(run_module("bench.warmup", "--runners=", cwd=tmp_path), "--runners=: empty")
    assert not (tmp_path / "results").exists()


def test_the_kept_validation_records_score(tmp_path):
    """Every figure docs/bench.md states of the validation comes from docs/validation.jsonl; scoring it needs
    nothing else."""
    result = run_module("bench.validate", "--score", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    kept = read_jsonl(os.path.join(REPO, "docs", "validation.jsonl"))
    assert set(validate.SETS) <= {c["set"] for c in kept}  # the current rounds, beside the spent ones
    for set_name in {c["set"] for c in kept}:
        assert f"{set_name}: " in result.stdout
    assert len(result.stdout.splitlines()) == 1 + len(kept) + len({c["set"] for c in kept})


def test_runs_at_once_stop_together_when_one_fails():
    # the synchronous compute runs W run.py at once: one failing must stop the others and name itself
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    failing = [sys.executable, "-c", "import sys; print('out of memory', file=sys.stderr); sys.exit(3)"]
    started = time.monotonic()
    with pytest.raises(SystemExit, match=r"bench: 2 copies failed \(exit 3\):\nout of memory"):
        bench_run.run_quietly([sleeper, failing], "2 copies")
    assert time.monotonic() - started < 30
    assert bench_run.run_quietly([[sys.executable, "-c", "print('a')"], [sys.executable, "-c", "print('b')"]],
                                 "two") == "a\nb\n"


def test_parallax_s_count_leaves_out_the_calibration_point_and_allows_the_reading_error():
    def point(architecture, machines, ratio):
        return {"architecture": architecture, "machines": machines, "predicted_words_per_sec": ratio * 1000,
                "published_words_per_sec": 1000}
    records = [point("hybrid", 1, 1.0), point("ps", 1, 1.4), point("ps", 2, 0.64), point("allreduce", 2, 1.52),
               point("allreduce", 4, 1.7)]
    assert predict.parallax_count(records).startswith(
        "within 1.5x of the published figure: 1 of 4 points (the hybrid at 1 machine, the calibration point, not "
        "counted); 3 of 4 allowing the bars' +-5% reading")


def test_predict_holds_the_model_against_parallax_s_twelve_points(measured_costs):
    result = run_module("bench.predict", "--parallax", f"--results_dir={measured_costs}", cwd=measured_costs.parent)
    assert result.returncode == 0, result.stderr
    points = read_jsonl(measured_costs / "bench-parallax.jsonl")
    assert [(p["architecture"], p["machines"]) for p in points] == [
        (a, m) for a in ("ps", "allreduce", "hybrid") for m in (1, 2, 4, 8)]
    printed = [line for line in result.stdout.splitlines() if line.split()[:1] in (["ps"], ["allreduce"], ["hybrid"])]
    assert len(printed) == 12
    hybrid_1 = points[8]
    assert hybrid_1["predicted_words_per_sec"] == pytest.approx(88_000)  # the calibration point
    assert hybrid_1["bytes_only_words_per_sec"] == pytest.approx(88_000)
    for p in points:  # every point: 6 GPUs x machines x 128 x 20 words over the step's three terms
        assert p["predicted_words_per_sec"] == pytest.approx(
            6 * p["machines"] * 2560 / (p["compute_seconds"] + p["network_seconds"] + p["update_seconds"]))
    # Horovod's sparse path: every rank passes on every other rank's rows but its successor's, as gathered
    # (repeats included, as Horovod 0.11 sent them); the rank that ends a machine's block of the ring over MPI's
    # TCP, at the rate measured here (below the 100 Gbit/s link), the others through MPI's shared memory.
    mpi = traffic.Costs.measured(json.loads((measured_costs / "bench-costs.json").read_text()), collective="mpi")
    p = predict.PARALLAX_LM1B
    rows = predict.parallax_lm1b_rows(p, 48).steps[0]
    row_bytes = {"embedding": 4 * p["embedding"] + 4, "softmax_w": 4 * p["projection"] + 4, "softmax_b": 4 + 4}
    gathered = [sum(len(rows[k][name][1]) * size for name, size in row_bytes.items()) for k in range(48)]

    def passed_on(ranks):
        return max(sum(g for k, g in enumerate(gathered) if k != (r + 1) % 48) for r in ranks)
    crossing = passed_on([6 * m + 5 for m in range(8)]) / mpi.rates["mpi allgather"]
    within = passed_on([r for r in range(48) if r % 6 != 5]) / mpi.rates["mpi-local allgather"]
    assert crossing <= points[7]["network_seconds"] <= max(crossing, within) + 1.0


def test_a_small_sweep_writes_one_line_per_run_and_a_table(tmp_path, measured_costs):
    # the protocols' costs of this machine, measured already: the bench reuses them
    (tmp_path / "results").mkdir()
    shutil.copy(measured_costs / "bench-costs.json", tmp_path / "results")
    measured = json.loads((measured_costs / "bench-costs.json").read_text())
    result = run_module("bench.run", "--configs=tiny", "--runners=tf,horovod", "--workers=2",
                        "--repeats=1", "--steps=12", "--warmup_steps=4", "--net=100mbit,1gbit", cwd=tmp_path,
                        timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    records = read_jsonl(tmp_path / "results/bench.jsonl")
    assert [(r["link"], r["runner"], r["workers"], r["ps"], r["machines"]) for r in records] == [
        (link, runner, 2, 2, 2) for link in ("100mbit", "1gbit") for runner in ("tf", "horovod")]
    for record in records:
        assert record["scaling"] == "weak" and record["batch_size"] == 2 * LSTM.CONFIGS["tiny"].batch_size
        summary = json.loads((tmp_path / "results/bench" / (record["run_name"] + ".json")).read_text())
        assert summary["config"]["batch_size"] == record["batch_size"]  # the runners trained that batch
        assert record["measured_steps_counted"] == 8 and record["throughput"]["measured_steps"] == 8
        assert len(record["measured_bytes_per_step"]) == len(record["predicted_bytes_per_step"]) == 2
        # the model's compute: two run.py at once, each on one worker's batch; per timed step the slower of them
        copies = [[r["seconds"] for r in read_jsonl(tmp_path / "results/bench" / (name + ".jsonl")) if r["step"] >= 4]
                  for name in record["compute_run_names"]]
        assert len(copies) == 2 and all(len(c) == 8 for c in copies)
        # the copies' checkpoints are removed; the run's own stays beside where theirs were
        root = next(tmp_path.glob(f"checkpoints/**/{record['run_name']}")).parent
        assert not any((root / name).exists() for name in record["compute_run_names"])
        assert record["compute_seconds"] == pytest.approx(statistics.median(map(max, *copies)))
        # each of Horovod's two background threads takes its measured share of a core all the time, from the
        # worker's own compute on the shared cores; TF-PS's workers run no Horovod
        share = measured["protocols"]["gloo"]["background_cpu_share"] if record["runner"] == "horovod" else 0.0
        assert record["background_seconds"] == pytest.approx(
            record["own_compute_seconds"] * 2 * share / len(os.sched_getaffinity(0)))
        assert (record["background_seconds"] > 0) == (record["runner"] == "horovod")
        # what two ranks allreducing the variables once a compute step took from the copies beside them, scaled by
        # the run's protocol CPU: none where it took nothing, or where the protocol's CPU measured none (/proc/stat's
        # ticks of 10 ms, against the tiny sizes bench.costs times here); a worker's share of it slows its compute
        protocol = (measured["protocols"]["grpc"][op] for op in ("pull", "push")) if record["runner"] == "tf" else (
            measured["protocols"]["gloo"][op] for op in ("allreduce", "allgather"))
        protocol_cpu = sum(fitted["cpu_seconds_per_byte"] for fitted in protocol)
        beside_cpu = measured["protocols"]["gloo"]["allreduce"]["cpu_seconds_per_byte"]
        assert record["compute_beside_seconds"] > 0 and record["interference_seconds"] >= 0
        assert (record["interference_seconds"] > 0) == (
            record["compute_beside_seconds"] > record["compute_seconds"] and protocol_cpu > 0 and beside_cpu > 0)
        shared = max(1, 2 / len(os.sched_getaffinity(0)))
        assert record["own_compute_seconds"] == pytest.approx(record["compute_seconds_one_device"]
                                                              + record["interference_seconds"] / shared)
        assert record["path_seconds"] == pytest.approx(record["own_compute_seconds"] + record["background_seconds"]
                                                       + record["update_seconds"] + record["network_seconds"])
        # the interval: everything overlapped and the cores shared perfectly (one device's step, a worker's batch
        # under weak scaling, W of them over the cores), and nothing; the point, the longer of the W copies'
        # compute and one worker's path, between them
        assert record["lower_compute_seconds"] == pytest.approx(record["compute_seconds_one_device"] * shared)
        assert record["lower_seconds"] == pytest.approx(max(record["lower_compute_seconds"] + record["update_seconds"],
                                                            record["lower_network_seconds"]))
        assert record["upper_seconds"] == pytest.approx(
            record["compute_seconds"] + record["update_seconds"] + record["interference_seconds"] +
            record["background_seconds"] + record["upper_network_seconds"])
        longer = max(record["compute_seconds"] + record["update_seconds"], record["path_seconds"],
                     record["lower_seconds"])
        assert record["point_seconds"] == pytest.approx(min(longer, record["upper_seconds"]))
        assert record["lower_network_seconds"] <= record["upper_network_seconds"] * (1 + 1e-9)
        assert record["lower_seconds"] <= record["point_seconds"] <= record["upper_seconds"] * (1 + 1e-9)
        assert record["inside_interval"] == (record["lower_seconds"] <= record["throughput"]["median_step_seconds"]
                                             <= record["upper_seconds"])
        # the busiest link direction's bytes at the link's full rate: less than even the lower estimate's
        # network (the payload's share, the protocols' rates and messages only add to it), and the pull, then
        # the exchange, each at most that, hold the upper's; the point's overlaps end with the worker's own compute
        busiest = (max(max(m["sent"], m["received"]) for m in record["predicted_bytes_per_step"]) * 8
                   / record["bits_per_second"])
        assert busiest < record["lower_network_seconds"] and busiest < record["upper_network_seconds"]
        assert record["own_compute_seconds"] + record["network_seconds"] > busiest
        assert 0.5 < record["bytes_measured_over_predicted"] < 2
        assert record["words_per_step"] == record["batch_size"] * LSTM.CONFIGS["tiny"].num_steps
        # four tasks (two workers, two servers), each a Python with TensorFlow loaded: hundreds of MiB each
        assert 4 * 100 * 2**20 < record["tasks_peak_resident_bytes"] < 4 * 4 * 2**30
    assert "bench [4/4] 1gbit tiny horovod W=2" in result.stdout
    assert "tiny, links of 100mbit" in result.stdout and "tiny, links of 1gbit" in result.stdout  # a table each
    assert "step/point" in result.stdout and "in interval" in result.stdout and "weak scaling" in result.stdout
    assert "bench: measuring the protocols' costs" not in result.stdout
    predictions = read_jsonl(tmp_path / "results/bench-predict.jsonl")
    assert {(p["runner"], p["machines"]) for p in predictions} == {
        (name, m) for name in experiments.SYNCHRONOUS for m in (8, 16, 32, 48)}
    words_per_batch = models.units_per_step(LSTM, LSTM.CONFIGS["tiny"])
    for p in predictions:  # every worker computes tiny's batch in the step run.py measured here, then waits
        assert p["config"] == "tiny" and p["compute_seconds"] == records[0]["compute_seconds_one_device"]
        assert p["link"] == "100mbit"  # the first rate swept
        assert p["words_per_sec"] == pytest.approx(
            p["workers"] * words_per_batch / (p["compute_seconds"] + p["network_seconds"]))
    assert_reported(tmp_path, records)


def assert_reported(tmp_path, records):
    """make report reads what the bench wrote: every run in the bench's table, the extrapolation drawn, and a
    step/point figure per link rate."""
    report = run_module("reporting", f"--results_dir={tmp_path / 'results'}", f"--out_dir={tmp_path / 'report'}",
                        cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    text = pdf_text(tmp_path / "report/report.pdf")
    cells = without_spaces(text)
    for r in records:
        row = (f"{r['runner']} tiny 2 2 2 {r['link']} 1 {blocks.rate(r['throughput']['median'])} "
               f"{blocks.interval(r['throughput']['p16'], r['throughput']['p84'])}")
        assert without_spaces(row) in cells
    assert "bench not run" not in text and "extrapolation not run" not in text
    drawn = {path.name for path in (tmp_path / "report/figures").iterdir()}
    assert {"bench-model-0.svg", "bench-model-1.svg"} <= drawn
    assert "Step time against its point estimate, links of 1gbit" in text


def bench_record(runner, workers, measured, model):
    """A measured bench record with `measured` words/sec and a point estimate giving the model's `model` words/sec."""
    return {"runner": runner, "workers": workers, "throughput": {"median": measured}, "words_per_step": 100.0,
            "point_seconds": 100.0 / model, "tasks_peak_resident_bytes": workers * 2**30}


def test_the_crossover_is_the_first_w_at_which_the_hybrid_is_faster():
    records = [bench_record("horovod", 2, 100, 100), bench_record("parallax", 2, 90, 110),
               bench_record("horovod", 4, 100, 90), bench_record("parallax", 4, 120, 130),
               bench_record("horovod", 6, 100, 80), bench_record("parallax", 6, 95, 140),
               {"runner": "parallax", "workers": 8, "skipped": "too long"}]
    repeats = [bench_record("horovod", 2, measured, model) for measured, model in ((100, 100), (80, 120), (120, 110))]
    assert crossover.points(crossover.runs_of(repeats)) == {"horovod": {2: (100, 110)}}  # the medians of three
    found = crossover.points(crossover.runs_of(records))
    rows = crossover.ratios(found["parallax"], found["horovod"])
    assert rows == [(2, 0.9, 1.1), (4, 1.2, pytest.approx(130 / 90)), (6, 0.95, 1.75)]
    assert (crossover.crossover(rows, 1), crossover.crossover(rows, 2)) == (4, 2)
    assert "measured W = 4; predicted W = 2, the sweep's smallest" in crossover.describe(records)[-1]


def test_the_crossover_sweep_writes_its_own_file_and_says_where_it_crosses(tmp_path, measured_costs):
    (tmp_path / "results").mkdir()
    shutil.copy(measured_costs / "bench-costs.json", tmp_path / "results")
    result = run_module("bench.run", "--crossover", "--configs=lm1b-tiny", "--workers=2", "--steps=8",
                        "--warmup_steps=3", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    records = read_jsonl(tmp_path / "results/bench-crossover.jsonl")
    assert [(r["runner"], r["workers"], r["link"]) for r in records] == [("horovod", 2, "100mbit"),
                                                                         ("parallax", 2, "100mbit")]
    assert "crossover (the hybrid faster than allgather from): measured " in result.stdout
    # make bench's own sweep and extrapolation are left as they were
    assert not (tmp_path / "results/bench.jsonl").exists()
    assert not (tmp_path / "results/bench-predict.jsonl").exists()


def test_a_model_without_sparse_variables_is_extrapolated_too():
    """No sparse variable, no rows to sample: every runner's step on 8 machines still has its network seconds;
    the allreduce runners' and the hybrid's are one ring, the parameter servers' a pull and a push, more."""
    variables = [traffic.Variable("tied_embedding", (1000, 64), "dense"), traffic.Variable("bias", (1000,), "dense")]
    rows = predict.repeat_rows(traffic.Rows([]), 8)
    seconds = {name: predict.step_terms(experiments.RUNS[name].traffic, variables, rows, 8, 1,
                                        netns.Link.parse("1gbit"))[0] for name in experiments.SYNCHRONOUS}
    assert all(s > 0 for s in seconds.values())
    assert seconds["horovod"] == seconds["horovod-dense"] == seconds["parallax"]
    assert seconds["tf"] > seconds["horovod"]
