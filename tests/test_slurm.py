"""The sbatch templates in slurm/ and the launcher's srun starter, against a real one-node Slurm cluster of the
tests' own (tests/slurm_cluster.py: munged, slurmctld, slurmd), on the tiny config."""
import os
import signal
import subprocess
import sys
import time

import pytest

import slurm_cluster
from conftest import (REPO, bit_identical, checkpoint_tensors, launcher_usage_error, missing, no_process_left,
                      processes_with, train_reference)

TINY = "--config=tiny --steps=20 --warmup_steps=5 --log_every=10"
FOREVER = "--config=tiny --steps=1000000 --log_every=10"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The environment (SLURM_CONF) of a running one-node cluster, stopped after the module's tests."""
    if slurm_cluster.missing():
        missing(slurm_cluster.missing())
    with slurm_cluster.one_node_cluster(tmp_path_factory.mktemp("slurm")) as environment:
        yield environment


@pytest.fixture(scope="module")
def reference(slurm, tmp_path_factory):
    work = tmp_path_factory.mktemp("slurm-runs")
    train_reference(TINY.split()[:3], 2, "reference", work)  # the flags that set the checkpoint
    return work


def submit(template, slurm, cwd, args, **variables):
    """sbatch of slurm/<template> from `cwd` (the submit directory, where outputs go) with ARGS=`args`; returns
    the job's id. Its output is in cwd/<job id>.out."""
    environment = {**slurm, "REPO": REPO, "ARGS": args, **variables}
    result = subprocess.run(["sbatch", "--parsable", "--output=%j.out", os.path.join(REPO, "slurm", template)],
                            cwd=cwd, env=environment, capture_output=True, text=True, check=True)
    return result.stdout.strip().split(";")[0]


def job_state(job, slurm):
    """(state, exit code) of `job`, from slurmctld (this cluster keeps no accounting for sacct)."""
    fields = dict(item.split("=", 1) for item in subprocess.run(
        ["scontrol", "show", "job", "-o", job], env=slurm, capture_output=True, text=True, check=True).stdout.split()
        if "=" in item)
    return fields["JobState"], fields["ExitCode"]


def wait_for_end(job, slurm, seconds):
    deadline = time.monotonic() + seconds
    while (state := job_state(job, slurm))[0] in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING"):
        assert time.monotonic() < deadline, f"job {job} still {state[0]} after {seconds} s"
        time.sleep(0.5)
    return state


def wait_for_step_10(job, slurm, output):
    while not (os.path.exists(output) and " step 10/" in open(output).read()):
        assert job_state(job, slurm)[0] in ("PENDING", "RUNNING"), open(output).read()
        time.sleep(0.5)


@pytest.mark.parametrize("template, variables", [("run_tf.sbatch", {}), ("run_horovod.sbatch", {}),
                                                 ("run_horovod.sbatch", {"MPI": "1"}),
                                                 ("run_parallax.sbatch", {})],
                         ids=["tf", "horovod", "horovod-mpi", "parallax"])
def test_an_sbatch_template_with_2_workers_matches_the_reference(slurm, reference, template, variables):
    name = template.split(".")[0] + "".join(variables)
    job = submit(template, slurm, reference, f"{TINY} --ckpt_dir={name} --run_name={name}", **variables)
    state = wait_for_end(job, slurm, 300)
    output = open(reference / f"{job}.out").read()
    assert state == ("COMPLETED", "0:0"), output
    assert "step 20/20" in output
    expected, trained = checkpoint_tensors(reference / "reference"), checkpoint_tensors(reference / name)
    assert sorted(expected) == sorted(trained)
    assert [n for n in expected if not bit_identical(expected[n], trained[n])] == []


def test_srun_alone_gives_run_tf_its_cluster_from_the_step(slurm, reference):
    """No launcher, no cluster flags: `srun --ntasks=3 python run_tf.py --ps_tasks=1`, each task's cluster
    from the step's environment (SlurmClusterResolver: task 0 is ps0 at port 8888, tasks 1 and 2 the workers)."""
    script = reference / "step.sbatch"
    script.write_text(f"#!/bin/bash\nexec srun --label {sys.executable} {REPO}/run_tf.py --ps_tasks=1 {TINY} "
                      f"--ckpt_dir=srun_step --run_name=srun_step\n")
    job = subprocess.run(["sbatch", "--parsable", "--ntasks=3", "--output=%j.out", str(script)], cwd=reference,
                         env=slurm, capture_output=True, text=True, check=True).stdout.strip()
    state = wait_for_end(job, slurm, 300)
    output = open(reference / f"{job}.out").read()
    assert state == ("COMPLETED", "0:0"), output
    assert "1: [run_tf] step 20/20" in output  # task 1 is worker 0, the chief
    expected, trained = checkpoint_tensors(reference / "reference"), checkpoint_tensors(reference / "srun_step")
    assert [n for n in expected if not bit_identical(expected[n], trained[n])] == []


def test_scancel_leaves_no_process(slurm, tmp_path):
    marker = f"slurm-scancel-{os.getpid()}"
    job = submit("run_parallax.sbatch", slurm, tmp_path, f"{FOREVER} --run_name={marker}")
    wait_for_step_10(job, slurm, tmp_path / f"{job}.out")
    assert len(processes_with(marker)) >= 3  # ps0, worker0, worker1 and their srun clients
    subprocess.run(["scancel", job], env=slurm, check=True)
    assert wait_for_end(job, slurm, 60)[0] == "CANCELLED"
    assert no_process_left(marker, seconds=30)


def test_a_task_killed_in_the_allocation_fails_the_job_naming_it(slurm, tmp_path):
    marker = f"slurm-kill-{os.getpid()}"
    job = submit("run_tf.sbatch", slurm, tmp_path, f"{FOREVER} --run_name={marker}")
    wait_for_step_10(job, slurm, tmp_path / f"{job}.out")
    argv = {pid: open(f"/proc/{pid}/cmdline").read().split("\0") for pid in processes_with(marker)}
    victims = [pid for pid, a in argv.items() if a[0] != "srun" and "--job_name=worker" in a and "--task_index=1" in a]
    assert len(victims) == 1, argv
    os.kill(victims[0], signal.SIGKILL)
    assert wait_for_end(job, slurm, 60) == ("FAILED", "1:0")
    assert "launch: task worker1 was killed by signal 9" in open(tmp_path / f"{job}.out").read()
    assert no_process_left(marker, seconds=30)
    assert not os.path.exists(tmp_path / "results" / f"{marker}.json")


@pytest.mark.parametrize("flags, named", [
    (["--slurm", "--", "--config=tiny"], "--slurm: not inside a Slurm allocation"),
    (["--slurm", "--hosts=127.0.0.1:2", "--", "--config=tiny"], "--hosts: not with --slurm"),
    (["--slurm", "--machines=2", "--", "--config=tiny"], "--machines"),
])
def test_bad_slurm_flags_are_one_line_and_exit_2(tmp_path, assert_usage_error, monkeypatch, flags, named):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert_usage_error(launcher_usage_error("tf", flags, tmp_path), named)


def test_verify_slurm_outside_an_allocation_is_one_line_and_exit_2(tmp_path, assert_usage_error, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    result = subprocess.run([sys.executable, os.path.join(REPO, "verify.py"), "--config=tiny", "--slurm"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert_usage_error(result, "--slurm: not inside a Slurm allocation")


def test_a_requeued_job_resumes_from_its_checkpoint_and_ends_as_the_reference(slurm, tmp_path):
    """scontrol requeue, as a preemption or a lost node does it: the template runs again with
    SLURM_RESTART_COUNT=1, resumes from the latest checkpoint, and ends bit for bit as the reference."""
    steps = "--config=tiny --steps=40 --warmup_steps=5 --log_every=1"
    train_reference(steps.split(), 2, "reference", tmp_path)
    job = submit("run_tf.sbatch", slurm, tmp_path, f"{steps} --ckpt_dir=requeued --run_name=requeued",
                 SAVE_EVERY="10")
    output = tmp_path / f"{job}.out"
    while not (output.exists() and " step 15/" in output.read_text()):
        assert job_state(job, slurm)[0] in ("PENDING", "RUNNING"), output.read_text()
        time.sleep(0.5)
    subprocess.run(["scontrol", "requeue", job], env=slurm, check=True)
    state = wait_for_end(job, slurm, 400)
    log = output.read_text()
    assert state == ("COMPLETED", "0:0"), log
    assert "resume: from requeued/model.ckpt-" in log and "step 40/40" in log
    expected, trained = checkpoint_tensors(tmp_path / "reference"), checkpoint_tensors(tmp_path / "requeued")
    assert [n for n in expected if not bit_identical(expected[n], trained[n])] == []
