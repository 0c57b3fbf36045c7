"""Where the hybrid overtakes allgather (python -m bench.run --crossover): the smallest W at which it trains faster,
measured and predicted. docs/bench.md, "The crossover sweep", explains why there is one."""
import statistics

ALLGATHER, HYBRID = "horovod", "parallax"


def points(runs):
    """{runner: {W: (measured, predicted words/sec)}}, the medians over each W's (runner, W, measured, predicted)."""
    grouped = {}
    for runner, w, measured, model in runs:
        grouped.setdefault(runner, {}).setdefault(w, []).append((measured, model))
    return {runner: {w: tuple(statistics.median(column) for column in zip(*runs_at))
                     for w, runs_at in sorted(by_workers.items())}
            for runner, by_workers in grouped.items()}


def runs_of(records):
    """points()'s input from bench.jsonl's measured records (predicted: words per step over the point estimate)."""
    return [(r["runner"], r["workers"], r["throughput"]["median"], r["words_per_step"] / r["point_seconds"])
            for r in records if "skipped" not in r]


def ratios(hybrid, allgather):
    """[(W, measured hybrid/allgather, predicted hybrid/allgather)] at every W of both runners' points."""
    return [(w, hybrid[w][0] / allgather[w][0], hybrid[w][1] / allgather[w][1]) for w in sorted(hybrid)
            if w in allgather]


def crossover(ratios_at, which):
    """The smallest W whose hybrid/allgather ratio, measured (which=1) or predicted (which=2), exceeds 1, or None."""
    return next((row[0] for row in ratios_at if row[which] > 1), None)


def said(ratios_at, which):
    """crossover() in words: "W = 4", "W = 2, the sweep's smallest" (it may lie below), or "not within W = 2-8"."""
    found = crossover(ratios_at, which)
    if found is None:
        return f"not within W = {ratios_at[0][0]}-{ratios_at[-1][0]}"
    return f"W = {found}" + (", the sweep's smallest" if found == ratios_at[0][0] else "")


def describe(records):
    """Lines for the terminal: each W's ratios and memory, then the crossover measured and predicted."""
    found = points(runs_of(records))
    rows = ratios(found.get(HYBRID, {}), found.get(ALLGATHER, {}))
    if not rows:
        return [f"crossover: no W at which both {HYBRID} and {ALLGATHER} ran"]
    memory = {(r["runner"], r["workers"]): r.get("tasks_peak_resident_bytes") for r in records if "skipped" not in r}
    lines = [f"{'W':>2s} {'hybrid/allgather measured':>26s} {'predicted':>10s} {'memory, GiB: ' + ALLGATHER:>22s} "
             f"{HYBRID:>9s}"]
    for w, measured, predicted in rows:
        gib = [memory.get((name, w)) for name in (ALLGATHER, HYBRID)]
        lines.append(f"{w:2d} {measured:26.2f} {predicted:10.2f} "
                     + " ".join(f"{'-' if m is None else f'{m / 2**30:.1f}':>{width}s}"
                                for m, width in zip(gib, (22, 9))))
    lines.append(f"crossover (the hybrid faster than allgather from): measured {said(rows, 1)}; predicted "
                 f"{said(rows, 2)}")
    return lines
