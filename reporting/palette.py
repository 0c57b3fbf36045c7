"""One colour per run, the same in every plot, from the registry (harness/experiments.py), where colours are chosen.
`key` reduces a result's name (verify-tf, run_tf) to its run's, and `colour` maps that."""
import zlib

from harness.experiments import ARCHITECTURES, RUNS

# For runs the registry does not know, by the name's checksum so that a run keeps its colour.
SPARE = ["#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#ff7f0e"]
_SCRIPT_RUNS = {"run": "reference", **{a.script.removesuffix(".py"): name for name, a in ARCHITECTURES.items()}}


def key(name):
    """verify-tf, run_tf.py, tf -> tf; run.py, verify-reference -> reference."""
    for prefix in ("verify-", "bench-"):
        name = name.removeprefix(prefix)
    name = name.removesuffix(".py")
    return _SCRIPT_RUNS.get(name, name)


def colour(name):
    k = key(name)
    return RUNS[k].colour if k in RUNS else SPARE[zlib.crc32(k.encode()) % len(SPARE)]
