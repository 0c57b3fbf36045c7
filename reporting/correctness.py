"""Sections 4-5: do the architectures train the same model (verify.json), and the loss curves."""
import collections

from reporting import analysis, blocks, plots

VERIFY_MISSING = "verify not run: make verify"


def verdict_sentence(verify):
    c = verify["config"]
    rule = ("identical to the reference, bit for bit" if verify["match"] == "identical"
            else f"within rtol={c['rtol']:g}, atol={c['atol']:g} of the reference")
    synchronous = [r["name"] for r in verify["runs"] if r["expected"] == "identical"]
    return (f"verify {'PASSED' if verify['passed'] else 'FAILED'}: {c['config']} config, {c['steps']} steps, seed "
            f"{c['seed']}, {c['workers']} workers, {c['ps']} PS, {c['data']} data; every synchronous run "
            f"({', '.join(synchronous)}) had to be {rule}.")


def correctness_section(results):
    verify = results.verify
    if verify is None:
        return blocks.section("Correctness: the trained parameters", blocks.missing(VERIFY_MISSING))
    table = blocks.table(
        ["a", "b", "max |diff|", "of scale", "max ULP", "verdict"],
        [[p["a"], p["b"], blocks.small(p["max_abs_diff"]), blocks.small(p["max_scaled_diff"]),
          "-" if p["max_ulp"] is None else p["max_ulp"], p["verdict"]] for p in verify["pairs"]],
        "Every pair of final checkpoints compared by checkpoints_compare (verify.json): the largest absolute "
        "difference over all parameters, the largest relative to its variable's largest magnitude (what the "
        "tolerance bounds), the largest distance in units in the last place, the verdict.")
    return blocks.section("Correctness: the trained parameters", blocks.paragraph(verdict_sentence(verify)), table,
                          blocks.bullets(explanations(results)))


def explanations(results):
    """One sentence per pair that is not identical, with its recorded cause and the numbers behind it."""
    sentences = []
    for pair in results.verify["pairs"]:
        if pair["identical"]:
            continue
        reference = results.verify_run("reference")
        differing = differing_variables(pair, len(reference.summary["variables"]) if reference else None)
        sentence = (f"{pair['a']} and {pair['b']} differ (max |diff| {blocks.small(pair['max_abs_diff'])}, "
                    f"{pair['max_ulp'] if pair['max_ulp'] is not None else 'unknown'} ULP; variables: {differing})")
        if pair["cause"]:
            sentence += f": {pair['cause']}"
        staleness = next((run.summary["staleness"] for run in map(results.verify_run, (pair["a"], pair["b"]))
                          if run and run.summary.get("staleness")), None)
        if staleness:
            sentence += (f". The chief's updates were on average {staleness['chief_mean']:.2f} updates stale "
                         f"(at most {staleness['chief_max']}): that many other workers' updates landed between its "
                         f"read of the variables and its write")
        sentences.append(sentence + ".")
    identical = [f"{p['a']}-{p['b']}" for p in results.verify["pairs"] if p["identical"]]
    if identical:
        sentences.insert(0, f"Identical, bit for bit: {', '.join(identical)}: every reduction reached the "
                            f"reference's numbers in the reference's order.")
    return sentences


def differing_variables(pair, total, named=6):
    """The variables a pair differs in: named when few; when more, how many of the model's `total` and in which
    top-level layers (a page of layer paths per pair otherwise; verify.json lists them all)."""
    names = pair["differing_variables"]
    if len(names) <= named:
        return ", ".join(names) or "none named"
    layers = ", ".join(f"{layer} ({n})" for layer, n in collections.Counter(n.split("/")[0] for n in names).items())
    return f"{len(names)}{f' of {total}' if total else ''}, in {layers}; each named in verify.json"


def training_section(results, figure_path):
    verify = results.verify
    if verify is None:
        return blocks.section("Training", blocks.missing(VERIFY_MISSING + " (the loss curves are the verify runs')"))
    runs = [results.verify_run(r["name"]) for r in verify["runs"]]
    missing = [r["name"] for r, run in zip(verify["runs"], runs) if run is None or not run.steps]
    runs = [run for run in runs if run is not None and run.steps]
    reference = results.verify_run("reference")
    parts = [blocks.missing(f"per-step results missing for {', '.join(missing)}")] if missing else []
    if reference is None or not reference.steps:
        return blocks.section("Training", *parts, blocks.missing("the reference's per-step results are missing"))
    plots.loss_curves(runs, reference, figure_path)
    parts.append(blocks.figure(figure_path, "Loss per step of every verify run, overlaid (runs identical to the "
                                            "reference lie on it), and each run's gap to the reference's loss."))
    gaps = analysis.loss_gaps([run for run in runs if run is not reference], reference)
    rows = []
    for run in runs:
        gap = gaps.get(run.name)
        rows.append([run.name.removeprefix("verify-"), blocks.loss(run.summary["final_loss"]),
                     "-" if gap is None else blocks.small(max((g for _, g in gap), default=0.0)),
                     "reference" if gap is None else
                     "equal at every step" if all(g == 0 for _, g in gap) else
                     f"first differs at step {next(s for s, g in gap if g != 0)}"])
    parts.append(blocks.table(["run", "final loss", "max |loss gap|", "against the reference"], rows,
                              "Final loss (nats per word) and the largest per-step gap to the reference's loss."))
    asynchronous = [run.name.removeprefix("verify-") for run in runs if run.summary.get("mode") == "async"]
    if asynchronous:
        parts.append(blocks.paragraph(
            f"The loss of an asynchronous run ({', '.join(asynchronous)}) is that of its chief's own rows, not of "
            f"the global batch, so it differs from the reference's from the first step on; its parameters differ "
            f"because its updates are stale (section 4)."))
    return blocks.section("Training", *parts)
