"""The launcher's own duties: stopping tasks together, refusing an unusable Horovod before anything starts; and
bench-overhead's exit status."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, launcher_usage_error, run_module
from harness import events
from launcher import lifeline
from launcher.starters import local
from launcher.starters.local import LocalProcess
from launcher.starters.remote import HostByteCounter

# A task that ignores SIGTERM but says when it arrived (CLOCK_MONOTONIC: one clock for every process).
IGNORES_SIGTERM = """import signal, time
signal.signal(signal.SIGTERM, lambda *_: print(time.monotonic(), flush=True))
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def test_tasks_are_stopped_together_within_one_grace_period():
    """Three tasks that ignore SIGTERM: all get SIGTERM at once and SIGKILL one grace period later, so stopping
    them takes one grace period, not one each. Asserted by order, not by a deadline: every SIGTERM arrives
    before the first grace period ends (stopped one after another, the second would arrive 3 s after the
    first), and none is killed before its grace period."""
    tasks = [subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE, text=True,
                              start_new_session=True) for _ in range(3)]
    for task in tasks:
        assert task.stdout.readline() == "ready\n"
    started = time.monotonic()
    lifeline.stop_all(tasks, grace_seconds=3)
    ended = time.monotonic()
    assert [task.poll() for task in tasks] == [-9, -9, -9]
    terminated = [float(task.stdout.read()) for task in tasks]
    assert all(started <= at < started + 3 for at in terminated), (started, terminated)
    assert ended >= started + 3  # the grace period was given


# What the launcher does with a model (its flags checked, its configs and shapes read); then whether TensorFlow
# was loaded, and whether it loads once used.
READS_EVERY_MODEL = """import sys
import harness.determinism
from harness import models
from launcher import launch
for name in sys.argv[1:]:
    for config in models.load(name).CONFIGS:
        for architecture in launch.ARCHITECTURES:
            args = launch.parse_flags([architecture, "--workers=2", "--net=1gbit", "--", f"--model={name}",
                                       f"--config={config}"])
            launch.gloo_timeout_seconds(args.runner_args, 2, args.net)
print("tensorflow.python" in sys.modules)
import tensorflow as tf
print(int(tf.constant(7)), "tensorflow.python" in sys.modules)
"""


def test_the_launcher_reads_every_model_without_loading_tensorflow(tmp_path):
    """The built-in models and the tests' own keep TensorFlow inside their functions, so a launcher loads no
    TensorFlow (seconds of CPU and hundreds of MB a launch); the deferred module still loads it when used."""
    result = subprocess.run([sys.executable, "-c", READS_EVERY_MODEL, "lstm", "transformer",
                             os.path.join(REPO, "tests", "models", "bag_of_words.py")], cwd=tmp_path,
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "7", "True"]


def test_flags_checked_by_the_caller_are_not_checked_again_by_running_the_model(tmp_path):
    """verify's child has checked each launcher's flags (the model run to its configs): the launcher it then starts
    with --runner_flags_checked does not run the model file's code again; without it, the launcher does."""
    from harness import UsageError
    from launcher import launch
    for architecture in ("tf", "horovod", "parallax"):
        model = tmp_path / f"not_a_model_{architecture}.py"
        model.write_text("print('the model file ran')\n")  # no CONFIGS: loading it is a UsageError
        runner = ["--", f"--model={model}", f"--ckpt_dir={tmp_path}/c", f"--results_dir={tmp_path}/r"]
        args = launch.parse_flags([architecture, "--workers=2", "--runner_flags_checked", *runner])
        assert args.runner_args.model == str(model)
        with pytest.raises(UsageError, match="lacks CONFIGS"):
            launch.parse_flags([architecture, "--workers=2", *runner])


@pytest.mark.parametrize("architecture", ["horovod", "parallax"])
def test_without_a_usable_horovod_the_launcher_says_run_make_setup(tmp_path, assert_usage_error, architecture):
    broken = tmp_path / "broken" / "horovod"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('built against another TensorFlow')\n")
    process = subprocess.run([sys.executable, "-m", "launcher", architecture, "--", "--config=tiny"],
                             cwd=tmp_path, env={**os.environ, "PYTHONPATH": f"{broken.parent}:{REPO}"},
                             capture_output=True, text=True)
    assert_usage_error(process, "Horovod is not usable", "built against another TensorFlow", "make setup")
    assert process.stdout == ""


def test_the_launcher_names_an_unknown_architecture(tmp_path, assert_usage_error):
    assert_usage_error(launcher_usage_error("gossip", ["--", "--config=tiny"], tmp_path), "gossip")


@pytest.mark.parametrize("target, status, verdict", [(1000, 1, "MISSED"), (0.001, 0, "met")])
def test_bench_overhead_exits_by_whether_the_target_is_met(tmp_path, target, status, verdict):
    """The exit status says whether the target was met: one no run can reach, and one every run reaches."""
    result = run_module("bench.overhead", "--config=tiny", "--steps=12", "--warmup_steps=2", "--rounds=1",
                        f"--target={target}", cwd=tmp_path)
    assert result.returncode == status, result.stderr
    assert f": {verdict} -> " in result.stdout
    assert json.loads((tmp_path / "results" / "bench-overhead.json").read_text())["met"] == (status == 0)


def test_ports_given_to_tasks_are_distinct_and_outside_the_ephemeral_range():
    """An outgoing connection takes its port from the ephemeral range; a task's port never comes from there, so
    nothing takes it between the launcher's check and the task's bind."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
        ephemeral_start = int(ranges.read().split()[0])
    ports = LocalProcess().free_ports("127.0.0.1", 16)
    assert len(set(ports)) == 16 and all(1024 <= port < ephemeral_start for port in ports)


def test_no_two_tasks_of_a_run_get_the_same_port():
    """TensorFlow binds every interface, so a parameter server on 127.0.0.1 and a worker on 127.0.0.2 with one
    port collide; so do two tasks of one host drawn apart. Here the tasks take 45% of the range: drawn
    independently, some would share a port."""
    from launcher import launch
    n = len(local.listening_ports()) * 3 // 20
    ps, workers = launch.with_ports(["127.0.0.1"] * n, ["127.0.0.1"] * n + ["127.0.0.2"] * n, LocalProcess())
    ports = [int(address.rsplit(":", 1)[1]) for address in ps + workers]
    assert len(ports) == 3 * n and len(set(ports)) == 3 * n
    assert [address.rsplit(":", 1)[0] for address in ps + workers] == ["127.0.0.1"] * 2 * n + ["127.0.0.2"] * n


def test_gloo_waits_long_enough_for_the_first_broadcast_on_a_slow_link():
    """Horovod's first collective broadcasts every variable from rank 0: on an emulated 100 Mbit/s link,
    lm1b-sparse's tables (and their Adagrad slots) to 5 ranks outlast Gloo's 30 s (a W = 6 run failed so)."""
    from launcher import launch
    from launcher.starters import netns
    from harness import models, runner_flags
    config = models.load("lstm").CONFIGS["lm1b-sparse"]
    lm1b_sparse, tiny = (runner_flags.parse("run_horovod", "", [f"--config={c}"]) for c in ("lm1b-sparse", "tiny"))
    table_bytes = 4 * config.vocab_size * config.output_size
    for workers in (2, 6, 8):
        # both tables and their slots, sent once to each other rank over the link
        broadcast = 4 * table_bytes * (workers - 1) * 8 / 100e6
        assert launch.gloo_timeout_seconds(lm1b_sparse, workers, netns.Link.parse("100mbit")) > broadcast
    assert launch.gloo_timeout_seconds(lm1b_sparse, 6, None) == launch.GLOO_TIMEOUT_SECONDS  # no emulated link
    # a small model on a fast link: about the default
    assert launch.gloo_timeout_seconds(tiny, 8, netns.Link.parse("1gbit")) <= 31


def test_an_asynchronous_run_s_other_hosts_are_counted_when_the_chief_s_window_begins_and_ends():
    """make bench HOSTS= counts each host's bytes over the chief's measured steps (launch --count_bytes). An
    asynchronous run's other workers number their own steps: their host's counters are those last seen when the
    chief's events arrive, not those after a step of the same number; a synchronous run's are by step."""
    class TwoHosts:  # what the counter asks of its starter: the hosts, and the interface to a host
        hosts = [("127.0.0.1", 1), ("127.0.0.2", 1)]

        def interface_on(self, host, address):
            return ("lo", "127.0.0.0/8")

    def event(name, **fields):
        return events.MARKER + json.dumps({"event": name, "at": 0.0, **fields}) + "\n"
    # as the launcher reads them: worker1 runs ahead of the chief, whose window is after its steps 1 and 3
    lines = [("worker1", event("host_bytes", after_step=1, sent=10, received=1)),
             ("worker1", event("host_bytes", after_step=2, sent=20, received=2)),
             ("worker0", event("measured_steps_begin", after_step=1)),
             ("worker0", event("host_bytes", after_step=1, sent=1000, received=100)),
             *(("worker1", event("host_bytes", after_step=s, sent=10 * s, received=s)) for s in (3, 4, 5)),
             ("worker0", event("host_bytes", after_step=2, sent=2000, received=200)),
             ("worker0", event("measured_steps_end", after_step=3)),
             ("worker0", event("host_bytes", after_step=3, sent=3000, received=300))]
    for asynchronous, other in ((True, (15.0, 1.5)), (False, (10.0, 1.0))):
        counter = HostByteCounter(TwoHosts(), ["127.0.0.1", "127.0.0.2"], asynchronous)
        for task, line in lines:
            counter.watch(task, line, {})
        counted = counter.result([])
        assert (counted["from_step"], counted["to_step"], counted["steps"]) == (1, 3, 2)
        assert [(m["sent_bytes_per_step"], m["received_bytes_per_step"]) for m in counted["machines"]] == [
            (1000.0, 100.0), other]
