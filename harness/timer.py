"""The throughput timer: per-step wall times, the warm-up left out, summarised as benchmarks report it."""
import math

import numpy as np


def throughput_summary(step_seconds, step_words, unit="words"):
    """Words/sec of the measured steps: median, p16 and p84 of the per-step rates, the mean with a nominal 95%
    interval (steps are not independent), aggregate (all words / all seconds) and the median step time."""
    seconds = np.asarray(step_seconds, dtype=np.float64)
    rates = np.asarray(step_words, dtype=np.float64) / seconds
    n = len(rates)
    mean = float(np.mean(rates))
    half_width = 1.96 * float(np.std(rates, ddof=1)) / math.sqrt(n) if n > 1 else None
    return {
        "unit": f"{unit}/sec",
        "measured_steps": n,
        "median": float(np.median(rates)),
        "p16": float(np.percentile(rates, 16)),
        "p84": float(np.percentile(rates, 84)),
        "mean": mean,
        "ci95": [mean - half_width, mean + half_width] if half_width is not None else None,
        "aggregate": float(np.sum(step_words) / np.sum(seconds)),
        "median_step_seconds": float(np.median(seconds)),
    }


class ThroughputTimer:
    """Collects (seconds, words) per step and leaves out the first `warmup_steps`: the first steps of a
    TensorFlow run include graph optimisation, memory allocation and connection set-up."""

    def __init__(self, warmup_steps, unit="words"):
        self.warmup_steps, self.unit = warmup_steps, unit
        self.steps_seen = 0
        self.seconds = []
        self.words = []

    def record(self, seconds, words):
        self.steps_seen += 1
        if self.steps_seen > self.warmup_steps:
            self.seconds.append(seconds)
            self.words.append(words)

    def keep(self, seconds, words):
        """A measured step recorded before a restart: counted, and not part of this start's warm-up."""
        self.seconds.append(seconds)
        self.words.append(words)

    def summary(self):
        if not self.seconds:
            return None
        return dict(throughput_summary(self.seconds, self.words, self.unit), warmup_steps=self.warmup_steps)
