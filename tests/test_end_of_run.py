"""Runs end cleanly at any speed: a model whose step takes microseconds (tests/models/instant.py), through every
distributed runner and mode many times over, so that a run's start, its steps and its end race each other."""
import os

import pytest

from conftest import REPO, launch_and_wait
from harness.experiments import DISTRIBUTED, RUNS

INSTANT = os.path.join(REPO, "tests", "models", "instant.py")
# Five in make test; END_OF_RUN_TIMES=20 for the bar (docs/measurements.md, "Runs end at any speed").
TIMES = int(os.environ.get("END_OF_RUN_TIMES", 5))


# horovod-dense and the exact reductions end as horovod and parallax do: only how gradients are averaged differs.
@pytest.mark.parametrize("name", [name for name in DISTRIBUTED
                                  if name not in ("horovod-dense", "horovod-exact", "parallax-exact")])
def test_a_microsecond_model_ends_cleanly_every_time(tmp_path, name):
    run = RUNS[name]
    for attempt in range(TIMES):  # each must exit 0 (launch_and_wait asserts it, with the run's output)
        launch_and_wait(run.architecture, "--workers=2", "--", *run.flags, f"--model={INSTANT}", "--steps=6",
                        "--warmup_steps=1", "--log_every=1", f"--ckpt_dir=ckpt/{attempt}", cwd=tmp_path)
