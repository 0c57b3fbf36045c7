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


def _bench_group(config, link, group, rows):
    """A group's paragraph: the runs the model explains ranked at the largest common W, and why; the rest; scaling."""
    common = set.intersection(*({p.workers for p in ps} for ps in group.points.values()))
    where = f"{config} config, {link or 'loopback'} links"
    if not common:
        return f"{where}: the runs were measured at no common worker count, so they are not ranked."
    workers = max(common)
    there = [r for r in rows if (r.config, r.link, r.workers) == (config, link, workers)]
    ranked = sorted((r for r in there if r.explained), key=lambda r: -r.median)
    text = f"{where}, {workers} workers. "
    if ranked:
        text += ("Fastest first, of the runs the model explains: " + ", ".join(
            f"{r.name} {blocks.rate(r.median)}" + (f" ({blocks.ratio(r.median / ranked[0].median)})" if i else "")
            for i, r in enumerate(ranked)) + f" {analysis.unit(rows)}. ")
        by_limit = {limit: [r.name for r in ranked if r.limit == limit] for limit in ("network", "compute")}
        text += ("Why: per step the busiest link carries " + ", ".join(
            f"{blocks.byte_count(r.busiest_measured)} for {r.name}" for r in ranked if r.busiest_measured)
            + "; by the model " + "; ".join(f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} "
                                           f"{limit}-bound" for limit, names in by_limit.items() if names) + ". ")
    else:
        text += "The model explains none of these runs, so none is ranked. "
    for r in there:
        if r.explained is False:
            text += (f"The model does not explain {r.name}: its step, {blocks.seconds(r.median_step_seconds)}, lies "
                     f"outside [{blocks.seconds(r.lower_seconds)}, {blocks.seconds(r.upper_seconds)}]; measured at "
                     f"{blocks.rate(r.median)} {analysis.unit(rows)}, it is not ranked. ")
    unpriced = sorted(r.name for r in there if r.explained is None)
    if unpriced:
        text += (f"Not ranked: {', '.join(unpriced)}, whose workers step at their own paces, which the model (of a "
                 f"synchronous step) does not price. ")
    if group.one_device:
        text += (f"Against one device alone ({blocks.rate(group.one_device)}), {workers} workers give " + ", ".join(
            f"{name} {point.words_per_sec / group.one_device:.2f}x" for name, points in group.points.items()
            for point in points if point.workers == workers) + f" (linear: {workers}x).")
    return text


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
    links = {r.link for r in results.bench or [] if r.link}
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
         f"switches and NICs." if rates else "Links: none measured; the tasks talked over loopback, so no byte "
                                             "crossed a real or emulated network."),
        (f"Latency: added per link ({', '.join(delays)})." if delays else
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
