"""The registry of runs (harness/experiments.py): one name per run, read by verify, the bench, the prediction
and the report."""
import os

from conftest import REPO
from bench import run as bench_run, traffic
from harness import experiments
from harness.experiments import RUNS
import verify


def test_every_run_names_a_script_and_traffic_flows_that_exist():
    for run in RUNS.values():
        assert os.path.isfile(os.path.join(REPO, run.script)), run.name
        assert run.traffic in (*traffic.ARCHITECTURES, None) and (run.traffic is None) == (run.architecture is None)
        assert run.verify in ("reference", "identical", "different", None)
    assert len({run.colour for run in RUNS.values()}) == len(RUNS)


def test_verify_runs_every_run_with_a_verdict_by_its_registered_flags():
    args = verify.parse_flags(["--config=tiny"])
    assert args.runs == [name for name, run in RUNS.items() if run.verify and not run.fault]
    with_faults = verify.parse_flags(["--config=tiny", "--faults"])
    assert with_faults.runs == args.runs + ["tf-fault", "horovod-fault", "parallax-fault"]
    for name in with_faults.runs:
        command = verify.command(with_faults, name)
        assert all(flag in command for flag in RUNS[name].flags)
        assert (RUNS[name].architecture in command) == bool(RUNS[name].architecture)
        assert any(flag.startswith(f"--fault={RUNS[name].fault}:") for flag in command) == bool(RUNS[name].fault)


def test_the_bench_sweeps_every_distributed_run_and_predicts_every_synchronous_one():
    """Fault runs are verify's only."""
    ordinary = {name: run for name, run in RUNS.items() if not run.fault}
    assert bench_run.parse_flags([]).runners == [name for name, run in ordinary.items() if run.architecture]
    assert experiments.SYNCHRONOUS == [name for name, run in ordinary.items() if run.verify == "identical"]
    assert "tf-replicas" in experiments.DISTRIBUTED and "tf-replicas" not in experiments.VERIFIED
