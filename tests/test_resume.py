"""Periodic checkpoints and --resume (harness/checkpoints.py): a run killed at a step the test picks and resumed
ends bit for bit where the uninterrupted run ends; what cannot be resumed is refused in one line."""
import argparse
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, bit_identical, missing, checkpoint_tensors, read_jsonl, run_script
from harness.checkpoints import FAULT_ENV, KEEP, STAGES, Checkpoints
from harness.events import FAULT_STEP

TINY = ["--config=tiny", "--steps=30", "--warmup_steps=5", "--log_every=10", "--emulate_workers=2"]


def run_py(*flags, cwd):
    return subprocess.run([sys.executable, os.path.join(REPO, "run.py"), *TINY, *flags], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def killed_after(steps_done, work, save_every=10):
    """run.py with a checkpoint every `save_every` steps, killed (SIGKILL) as soon as it announces
    `steps_done` steps done (an @event line, every step here; it waits there), as the launcher's --fault kills a
    task."""
    run = subprocess.Popen([sys.executable, os.path.join(REPO, "run.py"), *TINY, "--log_every=1", "--events",
                            "--ckpt_dir=ckpt", f"--save_every={save_every}"], cwd=work, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, env={**os.environ, FAULT_STEP: str(steps_done)})
    for line in run.stdout:
        if line.startswith("@event ") and json.loads(line[len("@event "):]).get("steps_done") == steps_done:
            run.kill()
            break
    assert run.wait(timeout=60) == -9
    assert not (work / "results/run.json").exists()  # nothing looks finished


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    work = tmp_path_factory.mktemp("uninterrupted")
    assert run_py("--ckpt_dir=ckpt", cwd=work).returncode == 0
    return work


@pytest.fixture(scope="module")
def killed_copy(tmp_path_factory):
    """killed_copy(steps_done, work): a copy in `work` of the run killed_after(steps_done), killed once a module
    (it is deterministic, so a copy is what killing it again would leave)."""
    killed = {}

    def copy(steps_done, work):
        if steps_done not in killed:
            killed[steps_done] = tmp_path_factory.mktemp(f"killed-{steps_done}")
            killed_after(steps_done, killed[steps_done])
        shutil.copytree(killed[steps_done], work, dirs_exist_ok=True)
    return copy


def test_a_run_killed_and_resumed_ends_bit_identical(uninterrupted, tmp_path, killed_copy):
    killed_copy(23, tmp_path)
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("*.run.json")) == ["model.ckpt-10.run.json",
                                                                               "model.ckpt-20.run.json"]
    resumed = run_py("--ckpt_dir=ckpt", "--save_every=10", "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resume: from ckpt/model.ckpt-20 (after step 20)" in resumed.stdout
    reference, other = checkpoint_tensors(uninterrupted / "ckpt"), checkpoint_tensors(tmp_path / "ckpt")
    assert sorted(reference) == sorted(other)
    assert all(bit_identical(reference[name], other[name]) for name in reference)
    # every step once, in order, with the uninterrupted run's loss; the summary says where it resumed
    steps = read_jsonl(tmp_path / "results/run.jsonl")
    uninterrupted_steps = read_jsonl(uninterrupted / "results/run.jsonl")
    assert [r["step"] for r in steps] == list(range(30))
    assert [r["loss"] for r in steps] == [r["loss"] for r in uninterrupted_steps]
    summary = json.loads((tmp_path / "results/run.json").read_text())
    assert summary["resumed_at_step"] == 20
    # measured: steps 5-19 from before the kill, and 25-29 after the restart's own 5 warm-up steps
    assert summary["throughput"]["measured_steps"] == 15 + 5


def test_a_checkpoint_without_its_marker_is_not_used(uninterrupted, tmp_path, killed_copy):
    """A kill while the checkpoint after step 20 was written: its marker, written last, is missing, and the
    resumed run starts from the one after step 10, and says so."""
    killed_copy(23, tmp_path)
    (tmp_path / "ckpt/model.ckpt-20.run.json").unlink()
    resumed = run_py("--ckpt_dir=ckpt", "--save_every=10", "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resume: from ckpt/model.ckpt-10 (after step 10)" in resumed.stdout
    reference, other = checkpoint_tensors(uninterrupted / "ckpt"), checkpoint_tensors(tmp_path / "ckpt")
    assert all(bit_identical(reference[name], other[name]) for name in reference)


def test_a_resume_within_the_warm_up_measures_the_steps_there_are(tmp_path, killed_copy):
    """Killed after step 13 of 30 with a warm-up of 25: nothing was measured before, and the restart at step
    10 has 20 steps left, fewer than the warm-up: the last of them is measured, and the summary says so."""
    flags = ["--ckpt_dir=ckpt", "--save_every=10", "--warmup_steps=25"]
    killed_copy(13, tmp_path)
    resumed = run_py(*flags, "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    throughput = json.loads((tmp_path / "results/run.json").read_text())["throughput"]
    assert throughput["warmup_steps"] == 19 and throughput["measured_steps"] == 1


@pytest.mark.parametrize("stage", STAGES)
def test_a_run_killed_writing_a_checkpoint_resumes_from_the_one_before(uninterrupted, tmp_path, stage):
    """The chief killed (SIGKILL) at each stage of writing the checkpoint after step 20, as the launcher's
    --fault=checkpoint:20:STAGE asks: that checkpoint is not taken as complete, whatever it had written, and the
    run resumed from the one after step 10 ends as the uninterrupted run."""
    killed = subprocess.run([sys.executable, os.path.join(REPO, "run.py"), *TINY, "--ckpt_dir=ckpt",
                             "--save_every=10"], cwd=tmp_path, env={**os.environ, FAULT_ENV: f"20:{stage}"},
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    written = {"state": ["state.npy"], "variables": ["state.npy", "index"],
               "marker": ["state.npy", "index", "run.json.partial"]}[stage]
    assert all((tmp_path / f"ckpt/model.ckpt-20.{suffix}").exists() for suffix in written)
    assert not (tmp_path / "ckpt/model.ckpt-20.run.json").exists()
    resumed = run_py("--ckpt_dir=ckpt", "--save_every=10", "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resume: from ckpt/model.ckpt-10 (after step 10)" in resumed.stdout
    reference, other = checkpoint_tensors(uninterrupted / "ckpt"), checkpoint_tensors(tmp_path / "ckpt")
    assert all(bit_identical(reference[name], other[name]) for name in reference)


def test_old_and_incomplete_checkpoints_are_pruned_whichever_run_wrote_them(tmp_path):
    """A run restarted many times keeps KEEP complete checkpoints: older ones go, and so does an incomplete one
    older than the newest complete, though no Saver of this process wrote them. A newer incomplete one stays (it
    is being written)."""
    def checkpoint(steps, complete=True):
        for suffix in ("index", "data-00000-of-00001", "state.npy") + (("run.json",) if complete else ()):
            (tmp_path / f"model.ckpt-{steps}.{suffix}").write_text(json.dumps({"steps_done": steps}))
    for steps in (10, 20, 30, 40, 50):
        checkpoint(steps)
    checkpoint(25, complete=False)
    checkpoint(60, complete=False)
    (tmp_path / "model.ckpt-35_temp").mkdir()  # what a Saver killed mid-write leaves
    Checkpoints(argparse.Namespace(ckpt_dir=str(tmp_path), save_every=10), None, 2).prune()
    kept = sorted({int(path.name.split("-")[1].split(".")[0].split("_")[0]) for path in tmp_path.iterdir()})
    assert kept == [30, 40, 50, 60][-KEEP - 1:]


def test_the_save_step_s_checkpoint_is_due_and_kept(tmp_path):
    """--save_step=1 (verify's first step at W > 2) writes a checkpoint after step 1 beside the periodic ones, and
    pruning keeps it."""
    checkpoints = Checkpoints(argparse.Namespace(ckpt_dir=str(tmp_path), save_every=10, save_step=1), None, 2)
    assert [steps for steps in range(1, 61) if checkpoints.due(steps, 60)] == [1, 10, 20, 30, 40, 50]
    for steps in (1, 10, 20, 30, 40, 50):
        for suffix in ("index", "state.npy", "run.json"):
            (tmp_path / f"model.ckpt-{steps}.{suffix}").write_text(json.dumps({"steps_done": steps}))
    checkpoints.prune()
    assert sorted({int(path.name.split("-")[1].split(".")[0]) for path in tmp_path.iterdir()}) == \
        [1, *[30, 40, 50][-KEEP:]]


def test_an_unreadable_checkpoint_is_passed_over_and_named(uninterrupted, tmp_path, killed_copy):
    killed_copy(23, tmp_path)
    (tmp_path / "ckpt/model.ckpt-20.index").write_bytes(b"not a checkpoint index")
    resumed = run_py("--ckpt_dir=ckpt", "--save_every=10", "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resume: ckpt/model.ckpt-20 cannot be read" in resumed.stdout
    assert "resume: from ckpt/model.ckpt-10 (after step 10)" in resumed.stdout
    reference, other = checkpoint_tensors(uninterrupted / "ckpt"), checkpoint_tensors(tmp_path / "ckpt")
    assert all(bit_identical(reference[name], other[name]) for name in reference)


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 100 KiB: one of tiny's checkpoints (45 KB of variables, 57 KB in pages) fits, a second
    does not."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "small_disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=100k", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode:
        missing(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


def test_a_full_disk_ends_the_run_in_one_line_and_the_checkpoints_before_serve(uninterrupted, tmp_path,
                                                                               small_disk):
    full = run_py(f"--ckpt_dir={small_disk}", "--save_every=5", cwd=tmp_path)
    assert full.returncode == 1
    assert f"checkpoint: cannot write {small_disk}/model.ckpt-10" in full.stderr, full.stderr
    assert f"the latest complete one is {small_disk}/model.ckpt-5" in full.stderr
    assert "Traceback" not in full.stderr
    shutil.copytree(small_disk, tmp_path / "ckpt")  # room again
    resumed = run_py("--ckpt_dir=ckpt", "--save_every=5", "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resume: from ckpt/model.ckpt-5 (after step 5)" in resumed.stdout
    reference, other = checkpoint_tensors(uninterrupted / "ckpt"), checkpoint_tensors(tmp_path / "ckpt")
    assert all(bit_identical(reference[name], other[name]) for name in reference)


@pytest.mark.parametrize("flags, named", [(["--seed=2"], "--seed=2"), (["--emulate_workers=1"], "--emulate_workers=1"),
                                          (["--config=small"], "--config=small")])
def test_resuming_with_a_flag_that_changes_the_result_is_refused(tmp_path, assert_usage_error, flags, named,
                                                                 killed_copy):
    killed_copy(13, tmp_path)
    result = run_py("--ckpt_dir=ckpt", "--resume", *flags, cwd=tmp_path)
    assert_usage_error(result, named, "after step 10")
    assert not (tmp_path / "results/run.json").exists()


def test_resuming_without_a_checkpoint_is_refused(tmp_path, assert_usage_error):
    assert_usage_error(run_script("run.py", *TINY, "--ckpt_dir=nothing_here", "--resume", cwd=tmp_path),
                       "--resume: no complete checkpoint in nothing_here")
    assert not (tmp_path / "results").exists()


def launch(architecture, *flags, cwd, launcher_flags=()):
    return subprocess.run([sys.executable, "-m", "launcher", architecture, "--workers=2", *launcher_flags,
                           "--", *[f for f in TINY if not f.startswith("--emulate_workers")], *flags],
                          cwd=cwd, env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True,
                          timeout=600)


def killed_and_resumed(architecture, fault, resumed_from, reference, work, launcher_flags=()):
    """Runs `architecture` with a checkpoint every 10 steps until the launcher kills task `fault` ("ps1:24"),
    then resumes it with the same launcher flags: it must say it resumed after step `resumed_from` and end
    bit for bit as the `reference` run's checkpoint. Returns the resumed run."""
    task = fault.split(":")[0]
    killed = launch(architecture, "--ckpt_dir=ckpt", "--save_every=10", "--log_every=1", cwd=work,
                    launcher_flags=[*launcher_flags, f"--fault={fault}"])
    assert killed.returncode == 1 and f"task {task} was killed by signal 9" in killed.stderr, killed.stderr
    assert "Traceback" not in killed.stdout + killed.stderr  # the others stop in a line each
    assert not (work / f"results/run_{architecture}.json").exists()
    resumed = launch(architecture, "--ckpt_dir=ckpt", "--save_every=10", "--resume", cwd=work,
                     launcher_flags=launcher_flags)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resume: from ckpt/model.ckpt-{resumed_from} (after step {resumed_from})" in resumed.stdout
    expected, other = checkpoint_tensors(reference), checkpoint_tensors(work / "ckpt")
    assert all(bit_identical(expected[name], other[name]) for name in expected)
    return resumed


@pytest.mark.parametrize("fault, named", [("ps0:3", "--fault=ps0:3: no such task"),
                                          ("worker2:3", "--fault=worker2:3: no such task"),
                                          ("worker1", "--fault=worker1"), ("launcher:soon", "launcher:soon"),
                                          ("checkpoint:20:halfway", "checkpoint:20:halfway"),
                                          ("ps0:-1s", "ps0:-1s")])
def test_a_bad_fault_is_one_line_and_exit_2(tmp_path, assert_usage_error, fault, named):
    assert_usage_error(launch("horovod", cwd=tmp_path, launcher_flags=[f"--fault={fault}"]), named)


def test_parameter_servers_killed_in_one_worker_and_resumed_end_as_the_reference(uninterrupted, tmp_path):
    """run_tf.py with the second of two parameter servers killed (verify's faults kill the only one, a Horovod
    worker and Parallax's chief: test_verify): the chief gathers the workers' states through queues on the
    first server for its checkpoints, and hands each its rows on resume."""
    killed_and_resumed("tf", "ps1:24", 20, uninterrupted / "ckpt", tmp_path, launcher_flags=["--ps=2"])


def test_asynchronous_parameter_servers_resume_and_train_on(tmp_path):
    """Asynchronous updates are not exact by nature: a resumed run continues from the checkpoint and trains
    to the end, every step logged once, but is not compared with anything."""
    async_flags = ["--ckpt_dir=ckpt", "--save_every=10", "--log_every=1", "--sync=false"]
    killed = launch("tf", *async_flags, cwd=tmp_path, launcher_flags=["--fault=worker1:15"])
    assert killed.returncode == 1, killed.stderr
    resumed = launch("tf", *async_flags, "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # the chief waits after step 15 until the fault comes, though no worker waits for another
    assert json.loads((tmp_path / "results/run_tf.json").read_text())["resumed_at_step"] == 10
    assert "resume: from ckpt/model.ckpt-10 " in resumed.stdout
    assert [r["step"] for r in read_jsonl(tmp_path / "results/run_tf.jsonl")] == list(range(30))


def test_sync_replicas_does_not_resume(tmp_path, assert_usage_error):
    assert_usage_error(launch("tf", "--resume", "--sync_replicas", cwd=tmp_path), "--resume", "--sync_replicas")


def test_the_launcher_refuses_to_resume_before_any_task_starts(tmp_path, assert_usage_error):
    result = launch("tf", "--ckpt_dir=nothing_here", "--resume", cwd=tmp_path)
    assert_usage_error(result, "--resume: no complete checkpoint in nothing_here")
    assert "[worker0]" not in result.stdout


def test_parameter_servers_at_four_workers_resume_bit_identical(tmp_path):
    """Our synchronous protocol sums the workers' gradients in worker order at any W: killed and resumed at
    W = 4, run_tf.py still ends exactly as run.py's four emulated workers."""
    four = [f for f in TINY if not f.startswith("--emulate_workers")]
    reference = run_script("run.py", *four, "--emulate_workers=4", "--ckpt_dir=reference", cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr
    killed_and_resumed("tf", "worker3:20", 10, tmp_path / "reference", tmp_path, launcher_flags=["--workers=4"])


def test_a_run_resumed_in_the_emulated_cluster_measures_its_bytes_after_the_restart(uninterrupted, tmp_path):
    """Under --net (every machine a network namespace, tc-shaped links): ps0 is killed after step 16 and the run
    resumed from step 10 in a new cluster. It ends as the reference, and its byte window is the steps measured
    after the restart: from the end of the restart's own 5 warm-up steps to the last."""
    killed_and_resumed("tf", "ps0:16", 10, uninterrupted / "ckpt", tmp_path, launcher_flags=["--net=1gbit"])
    network = json.loads((tmp_path / "results/run_tf.network.json").read_text())
    assert (network["from_step"], network["to_step"]) == (15, 30)
    assert all(machine["sent_bytes_per_step"] > 0 for machine in network["machines"])
