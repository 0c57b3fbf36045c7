"""Parallax's search for the number of partitions of the sparse variables (Kim et al. 2019, section 5.3): time
n = 1, 2, 4, ... while it gets faster, fit t(n) = b/n + a(n - 1) + c and take the n that minimises the fit.
docs/architecture.md ("Partition search") explains it."""
import os

import numpy as np

from harness import results


def fit(partitions, seconds):
    """(a, b, c) of t(n) = b/n + a(n - 1) + c, least squares; None with fewer than 3 points."""
    if len(partitions) < 3:
        return None
    n = np.asarray(partitions, dtype=np.float64)
    design = np.stack([n - 1, 1 / n, np.ones_like(n)], axis=1)
    (a, b, c), *_ = np.linalg.lstsq(design, np.asarray(seconds, dtype=np.float64), rcond=None)
    return float(a), float(b), float(c)


def best_partitions(partitions, seconds):
    """The integer n in [1, max measured] with the smallest fitted time (the fastest measured n when there
    are too few points to fit)."""
    coefficients = fit(partitions, seconds)
    if coefficients is None:
        return partitions[int(np.argmin(seconds))]
    a, b, c = coefficients
    candidates = np.arange(1, max(partitions) + 1)
    return int(candidates[np.argmin(b / candidates + a * (candidates - 1) + c)])


def search(trial, results_dir, max_partitions):
    """Run trial(n) -> median step seconds for n = 1, 2, 4, ... while it improves; return the best n and write
    <results_dir>/partition-search.json."""
    partitions, seconds = [], []
    n = 1
    while n <= max_partitions:
        partitions.append(n)
        seconds.append(trial(n))
        print(f"partition search: {n} partitions: {seconds[-1]:.4f} s per step", flush=True)
        if len(seconds) > 1 and seconds[-1] >= seconds[-2]:
            break
        n *= 2
    best = best_partitions(partitions, seconds)
    coefficients = fit(partitions, seconds)
    if coefficients:
        print("partition search: fit t(n) = {1:.4g}/n + {0:.4g}(n-1) + {2:.4g}".format(*coefficients))
    print(f"partition search: best {best} partitions", flush=True)
    results.write_json(os.path.join(results_dir, results.PARTITION_SEARCH), {
        "partitions": partitions, "median_step_seconds": seconds,
        "fit": dict(zip("abc", coefficients)) if coefficients else None, "best": best})
    return best
