"""Sections 7-8: the discussion and the limitations, every sentence written from the numbers."""
from reporting import analysis, blocks
from reporting.correctness import verdict_sentence


def discussion_section(results):
    sentences = []
    if results.verify:
        sentences.append(verdict_sentence(results.verify))
        sentences.append(_verify_speed(results.verify["runs"]))
    else:
        sentences.append("verify not run: make verify. Nothing is said here about the trained parameters.")
    measured = analysis.combine_repeats(results.bench or [])
    for (config, link), group in analysis.bench_groups(measured).items():
        sentences.append(_bench_group(config, link, group, measured))
    if not measured:
        sentences.append("bench not run: make bench. Which architecture wins on a network is not measured yet.")
    if results.predictions:
        sentences.append(_extrapolation(results.predictions))
    return blocks.section("Discussion", *(blocks.paragraph(s) for s in sentences))


def _verify_speed(runs):
    ranked = sorted(runs, key=lambda r: -r["throughput"]["median"])
    fastest, slowest = ranked[0], ranked[-1]
    f, s = fastest["throughput"], slowest["throughput"]
    overlap = f["p16"] <= s["p84"]
    return (f"In the verify runs, {fastest['name']} was fastest ({blocks.rate(f['median'])} {f['unit']} median) and "
            f"{slowest['name']} slowest ({blocks.rate(s['median'])}), {blocks.ratio(f['median'] / s['median'])}; "
            + ("their central 68% intervals overlap, so even that order is within the noise of one short run. "
               if overlap else "their central 68% intervals do not overlap. ")
            + "All tasks of these runs share one machine, so they compete for its cores and no network is crossed: "
              "read these figures as a smoke test; the comparison is the benchmark's.")


TIER = 0.9  # runs within 10% of a tier's fastest are one tier: one run each, their order is noise


def _bench_group(config, link, group, rows):
    """A group's paragraph: the runs the model explains in tiers at the largest common W, each tier's step and the
    model's terms for it; the runs it does not explain; the speed-up over one device."""
    common = set.intersection(*({p.workers for p in ps} for ps in group.points.values()))
    where = f"{config} config, {link or 'loopback'} links"
    if not common:
        return f"{where}: the runs were measured at no common worker count, so they are not ranked."
    workers = max(common)
    there = [r for r in rows if (r.config, r.link, r.workers) == (config, link, workers)]
    if not link:
        return _loopback_group(config, workers, there, analysis.unit(rows))
    ranked = sorted((r for r in there if r.explained), key=lambda r: -r.median)
    unit = analysis.unit(rows)
    text = f"{where}, {workers} workers. "
    tiers = []
    for r in ranked:
        if tiers and r.median >= TIER * tiers[-1][0].median:
            tiers[-1].append(r)
        else:
            tiers.append([r])
    for i, tier in enumerate(tiers):
        names = _names(r.name for r in tier)
        rates = _spread([r.median for r in tier], blocks.rate)
        if i == 0:
            text += f"Fastest, of the runs the model explains: {names} ({rates} {unit})"
            text += (f", within {1 - TIER:.0%} of one another: one run each, their order is noise. " if len(tier) > 1
                     else ". ")
        else:
            text += f"Then {names} ({rates}), {blocks.ratio(tier[0].median / ranked[0].median)} of the fastest. "
        text += (f"By the model {'it is' if len(tier) == 1 else 'they are'} "
                 f"{_names(sorted({r.limit for r in tier}))}-bound: a step of "
                 f"{_spread([r.median_step_seconds for r in tier], blocks.seconds)} measured, the network term "
                 f"{_spread([r.network_seconds for r in tier], blocks.seconds)} of it beside "
                 f"{_spread([r.compute_seconds for r in tier], blocks.seconds)} of compute")
        busiest = [r.busiest_measured for r in tier if r.busiest_measured]
        text += (f"; the busiest link carries {_spread(busiest, blocks.byte_count)} a step. " if busiest else ". ")
    if not ranked:
        text += "The model explains none of these runs, so none is ranked. "
    for r in there:
        if r.explained is False:
            text += (f"The model does not explain {r.name}: its step, {blocks.seconds(r.median_step_seconds)}, lies "
                     f"outside [{blocks.seconds(r.lower_seconds)}, {blocks.seconds(r.upper_seconds)}]; measured at "
                     f"{blocks.rate(r.median)} {unit}, it is not ranked. ")
    unpriced = sorted(r.name for r in there if r.explained is None)
    if unpriced:
        text += (f"Not ranked: {_names(unpriced)}, whose workers step at their own paces, which the model (of a "
                 f"synchronous step) does not price. ")
    if group.one_device:
        speedups = sorted((point.words_per_sec / group.one_device, name) for name, points in group.points.items()
                          for point in points if point.workers == workers)
        (low, slowest), (high, fastest) = speedups[0], speedups[-1]
        text += (f"Against one device alone ({blocks.rate(group.one_device)} {unit}), {workers} workers reach "
                 f"{low:.2f}x ({slowest}) to {high:.2f}x ({fastest}) of its speed (linear: {workers}x).")
    return text


def _loopback_group(config, workers, there, unit):
    """A group run on loopback (no root): its order by throughput, which says nothing of a network."""
    ranked = sorted(there, key=lambda r: -r.median)
    return (f"{config} config, {workers} workers, links not emulated: every task ran on one machine's loopback, so "
            f"no byte crossed a network, and the order below is what each architecture costs on shared cores, not "
            f"what its traffic costs. From fastest: "
            + ", ".join(f"{r.name} ({blocks.rate(r.median)} {unit})" for r in ranked)
            + ". make bench as root emulates the links.")


def _names(names):
    """"a", "a and b", "a, b and c"."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _spread(values, form):
    """One value, or the lowest and highest in `form`, their unit once: "1.06-1.11 s"."""
    low, high = form(min(values)), form(max(values))
    if low == high:
        return low
    (low_number, _, low_unit), (high_number, _, high_unit) = low.rpartition(" "), high.rpartition(" ")
    return f"{low_number}-{high}" if low_unit == high_unit and low_number else f"{low}-{high}"


def _extrapolation(predictions):
    largest = max(p.workers for p in predictions)
    at = {p.name: p.words_per_sec for p in predictions if p.workers == largest}
    published = analysis.PUBLISHED_PARALLAX
    if "parallax" not in at:
        return f"The extrapolation to {largest} workers has no parallax point to compare."
    compared = [f"{blocks.ratio(at['parallax'] / at[other])} over {other} (paper: {published['over'][other]}x at "
                f"{published['gpus']} GPUs)" for other in published["over"] if other in at]
    config = predictions[0].config
    return (f"Extrapolated to {largest} workers, parallax is predicted at {blocks.rate(at['parallax'])} words/sec on "
            f"{config}: " + ("; ".join(compared) or "no tf or horovod point to compare")
            + f". The paper's speed-ups are of its full-size LM1B model on {published['gpus']} GPUs: for {config} "
            f"here a reference, not a check.")


def limitations_section(results):
    summaries = [run.summary for run in results.runs.values()]
    hosts = sorted({h for s in summaries for h in (s.get("environment") or {}).get("hostnames") or []})
    cores = sorted({(s.get("environment") or {}).get("cpu_cores") for s in summaries} - {None})
    links = {r.link for r in results.bench or [] if r.links == "emulated"}
    real = sorted({r.link for r in results.bench or [] if r.links == "real"})
    rates = sorted({link.split(" delay ")[0] for link in links})
    delays = sorted({link.split(" delay ")[1] for link in links if " delay " in link})
    repeats = max((r.repeats for r in analysis.combine_repeats(results.bench or [])), default=0)
    gpus = sorted({gpu for s in summaries for gpu in (s.get("environment") or {}).get("gpus") or []})
    items = [
        f"Machines: every run's chief ran on {', '.join(hosts) or 'an unrecorded machine'}"
        f"{' (' + ', '.join(map(str, cores)) + ' cores)' if cores else ''}; "
        + ("a single machine, so its workers and servers share its cores and memory bandwidth."
           if len(hosts) <= 1 else "several machines."),
        (f"Links: emulated on this machine (network namespaces shaped to {', '.join(rates)}), not physical "
         f"switches and NICs." if rates else
         f"Links: real, between the hosts ({'; '.join(real)}); one rate, the slowest direction's, prices all of "
         f"them." if real else "Links: none measured; the tasks talked over loopback, so no byte "
                               "crossed a real or emulated network."),
        ("Latency: measured between the hosts (bench.link_probe's round trips), half a round trip added to every "
         "message." if real and not rates else
         f"Latency: added per link ({', '.join(delays)})." if delays else
         "Latency: none added; the links are shaped in bandwidth only, so latency-bound costs (many small "
         "messages, the ring's 2(W-1) rounds) are under-represented." if rates else
         "Latency: not measured, as no network was crossed."),
        (f"GPU: {', '.join(gpus)}." if gpus else
         "GPU: none recorded in the summaries; on CPUs the ratio of computation to communication differs from "
         "the GPU clusters of the Parallax paper."),
        "Statistics: each verify figure is one run"
        + {0: "", 1: ", each bench figure one run"}.get(repeats,
                                                        f", each bench figure the median of up to {repeats} runs")
        + "; the central 68% interval shows the spread of a run's steps, not of repeated runs.",
    ]
    return blocks.section("Limitations", blocks.bullets(items))
