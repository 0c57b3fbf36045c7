"""The parameter-server runners' cluster from TF_CONFIG (as Kubeflow's TFJob sets it) instead of the cluster
flags: tasks started by hand, each with its own TF_CONFIG, on the tiny config."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, bit_identical, checkpoint_tensors, free_ports, launch_and_wait, run_script
from harness import UsageError, runner_flags

TINY = ["--config=tiny", "--steps=20", "--warmup_steps=5", "--log_every=10"]




def test_tasks_given_tf_config_train_as_the_flag_given_cluster(tmp_path):
    """TFJob's layout with a chief: {"chief": [a], "worker": [b], "ps": [c]}. The chief is mapped to worker 0
    and TFJob's worker 0 to worker 1, so the run is the 2-worker run the launcher starts with flags."""
    launch_and_wait("tf", "--workers=2", "--", *TINY, "--ckpt_dir=ckpt/flags", "--run_name=flags", cwd=tmp_path)
    ps, chief, worker = (f"127.0.0.1:{port}" for port in free_ports(3))
    cluster = {"ps": [ps], "chief": [chief], "worker": [worker]}
    tasks = {}
    try:
        for job in ("ps", "chief", "worker"):
            tf_config = json.dumps({"cluster": cluster, "task": {"type": job, "index": 0}})
            tasks[job] = subprocess.Popen([sys.executable, os.path.join(REPO, "run_tf.py"), *TINY,
                                           "--ckpt_dir=ckpt/tf_config", "--run_name=tf_config"], cwd=tmp_path,
                                          env={**os.environ, "TF_CONFIG": tf_config}, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True)
        outputs = {job: task.communicate(timeout=300)[0] for job, task in tasks.items()}
    finally:
        for task in tasks.values():
            task.kill()
    assert all(task.returncode == 0 for task in tasks.values()), outputs
    assert "step 20/20" in outputs["chief"]  # the chief records: it is worker 0
    by_flags, by_tf_config = checkpoint_tensors(tmp_path / "ckpt/flags"), checkpoint_tensors(tmp_path / "ckpt/tf_config")
    assert sorted(by_flags) == sorted(by_tf_config)
    assert [name for name in by_flags if not bit_identical(by_flags[name], by_tf_config[name])] == []


CLUSTER = {"ps": ["127.0.0.1:5000"], "worker": ["127.0.0.1:5001", "127.0.0.1:5002"]}


@pytest.mark.parametrize("tf_config, named", [
    ("{not json", "TF_CONFIG: not JSON"),
    (json.dumps({"cluster": CLUSTER}), 'TF_CONFIG: expected {"cluster"'),
    (json.dumps({"cluster": CLUSTER, "task": {"type": "evaluator", "index": 0}}),
     'task type "evaluator" is refused'),
    (json.dumps({"cluster": {**CLUSTER, "master": ["127.0.0.1:5003"]}, "task": {"type": "worker", "index": 0}}),
     'job "master"'),
    (json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 2}}), 'task index 2: job "worker" has 2'),
    (json.dumps({"cluster": {**CLUSTER, "ps": ["127.0.0.1"]}, "task": {"type": "ps", "index": 0}}),
     'job "ps": expected host:port'),
    (json.dumps({"cluster": {"worker": CLUSTER["worker"]}, "task": {"type": "worker", "index": 0}}),
     "needs a ps job"),
])
def test_a_malformed_tf_config_is_named_by_the_flags_check(monkeypatch, tf_config, named):
    """run_tf.py's flags check, in this process; run_parallax.py's case below shows the one line and exit 2."""
    monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(UsageError) as error:
        runner_flags.parse("run_tf", "", ["--config=tiny"])
    assert named in str(error.value)


def test_run_parallax_reads_tf_config_too(tmp_path, assert_usage_error):
    """Both runners take their cluster from harness/cluster_spec.py: one case shows it for run_parallax.py."""
    tf_config = json.dumps({"cluster": CLUSTER, "task": {"type": "evaluator", "index": 0}})
    assert_usage_error(run_with_tf_config("run_parallax.py", tf_config, tmp_path), 'task type "evaluator" is refused')


def run_with_tf_config(runner, tf_config, cwd):
    return subprocess.run([sys.executable, os.path.join(REPO, runner), "--config=tiny"], cwd=cwd,
                          env={**os.environ, "TF_CONFIG": tf_config}, capture_output=True, text=True)


def test_the_cluster_flags_come_first_and_all_four_or_none(tmp_path, assert_usage_error):
    """A task given both the flags and TF_CONFIG uses the flags; some flags without the others are bad input."""
    env = {**os.environ, "TF_CONFIG": "{not json"}
    result = subprocess.run([sys.executable, os.path.join(REPO, "run_tf.py"), "--config=tiny", "--job_name=worker",
                             "--task_index=5", "--ps_hosts=127.0.0.1:5000", "--worker_hosts=127.0.0.1:5001"],
                            cwd=tmp_path, env=env, capture_output=True, text=True)
    assert_usage_error(result, "--task_index=5: there are only 1 worker tasks")
    result = run_script("run_tf.py", "--config=tiny", "--job_name=ps", cwd=tmp_path)
    assert_usage_error(result, "--task_index: required with --job_name")
    result = run_script("run_tf.py", "--config=tiny", cwd=tmp_path)
    assert_usage_error(result, "no cluster")
