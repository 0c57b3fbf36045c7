"""One colour per run, the same in every plot: the only place colours are chosen.

A run is known by several names (verify's `tf`, its summary `verify-tf`, a bench line's runner `run_tf.py`);
`key` reduces them to one, and `colour` maps that key. Runs of one architecture share a hue family: the
variants (async, sparse as dense, local aggregation) are a lighter or darker shade of it."""
import zlib

COLOURS = {
    "reference": "#222222",
    "tf": "#1f77b4",
    "tf-async": "#9ecae1",
    "tf-replicas": "#08519c",
    "horovod": "#d62728",
    "horovod-dense": "#ff9896",
    "parallax": "#2ca02c",
    "parallax-local": "#98df8a",
}
# For runs this table does not know, chosen by the name's checksum so that a run keeps its colour.
SPARE = ["#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#ff7f0e"]


# The bench's names (its runners, bench/run.py, and traffic models, bench/traffic.py) -> verify's names.
ARCHITECTURE_NAMES = {"tf-sync": "tf", "ps": "tf", "allreduce": "horovod", "allreduce-dense": "horovod-dense",
                      "hybrid": "parallax", "hybrid-local": "parallax-local", "run": "reference"}


def key(name):
    """verify-tf, run_tf.py, tf-sync, ps, tf -> tf; run.py, run -> reference; hybrid -> parallax."""
    for prefix in ("verify-", "bench-"):
        name = name.removeprefix(prefix)
    name = name.removesuffix(".py").removeprefix("run_")
    return ARCHITECTURE_NAMES.get(name, name)


def colour(name):
    k = key(name)
    return COLOURS.get(k) or SPARE[zlib.crc32(k.encode()) % len(SPARE)]
