import json

import pytest

from launcher import partition_search


def test_the_fit_recovers_a_known_curve_and_its_best_integer():
    def t(n):
        return 0.8 / n + 0.05 * (n - 1) + 0.1  # minimum near n = 4
    partitions = [1, 2, 4, 8]
    a, b, c = partition_search.fit(partitions, [t(n) for n in partitions])
    assert (a, b, c) == pytest.approx((0.05, 0.8, 0.1))
    assert partition_search.best_partitions(partitions, [t(n) for n in partitions]) == 4


def test_with_two_points_the_faster_one_wins():
    assert partition_search.fit([1, 2], [1.0, 1.2]) is None
    assert partition_search.best_partitions([1, 2], [1.0, 1.2]) == 1


def test_the_search_doubles_while_the_step_time_improves(tmp_path):
    times = {1: 1.0, 2: 0.6, 4: 0.5, 8: 0.55, 16: 0.4}
    tried = []

    def trial(n):
        tried.append(n)
        return times[n]

    best = partition_search.search(trial, str(tmp_path), max_partitions=64)
    assert tried == [1, 2, 4, 8]  # 8 is slower than 4: stop there, 16 is never tried
    assert best in (4, 5, 6)
    record = json.loads((tmp_path / "partition-search.json").read_text())
    assert record["partitions"] == tried and record["best"] == best and set(record["fit"]) == {"a", "b", "c"}
