import numpy as np
import pytest

from harness.timer import ThroughputTimer, throughput_summary


def test_statistics_of_known_step_times():
    # 100 words per step; step k of 1..100 takes 1/k seconds, so its rate is 100k words/sec.
    seconds = [1.0 / k for k in range(1, 101)]
    summary = throughput_summary(seconds, [100] * 100)
    rates = 100.0 * np.arange(1, 101)
    assert summary["measured_steps"] == 100
    assert summary["median"] == pytest.approx(5050.0)
    assert summary["p16"] == pytest.approx(1684.0)  # numpy's linear interpolation: rank 15.84
    assert summary["p84"] == pytest.approx(8416.0)
    assert summary["mean"] == pytest.approx(5050.0)
    half_width = 1.96 * rates.std(ddof=1) / 10
    assert summary["ci95"] == pytest.approx([5050.0 - half_width, 5050.0 + half_width])
    assert summary["aggregate"] == pytest.approx(10000 / sum(seconds))
    assert summary["median_step_seconds"] == pytest.approx((1 / 50 + 1 / 51) / 2)


def test_the_warmup_is_left_out():
    timer = ThroughputTimer(warmup_steps=3)
    for seconds in [10.0, 10.0, 10.0, 0.5, 0.25]:
        timer.record(seconds, 100)
    summary = timer.summary()
    assert summary["measured_steps"] == 2 and summary["warmup_steps"] == 3
    assert summary["median"] == pytest.approx(300.0)  # rates 200 and 400


def test_no_warmup_and_one_step():
    timer = ThroughputTimer(warmup_steps=0)
    timer.record(2.0, 100)
    summary = timer.summary()
    assert summary["median"] == summary["mean"] == summary["aggregate"] == 50.0
    assert summary["ci95"] is None  # one sample has no spread
