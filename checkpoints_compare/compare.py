"""Compare TensorFlow checkpoints variable by variable.

    python -m checkpoints_compare REF OTHER [OTHER ...] [--rtol=1e-05] [--atol=1e-07] [--json]

Each path is a checkpoint directory, prefix or file. Every OTHER is compared with REF, variables matched by name;
each gets the verdict "identical", "within_tolerance" (every |a - b| <= atol + rtol * max|a|, max|a| the variable's
largest finite magnitude in REF) or "differs". Exit status: 0 when every OTHER is within tolerance, 1 when any
differs, 2 on bad input. docs/outputs.md ("checkpoints_compare") lists --json's fields and the Python API.
"""
import argparse
import glob
import json
import logging
import math
import os
import re
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: no C++ start-up chatter

import numpy as np
import tensorflow as tf

DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-7

# A checkpoint's own files; the part before the suffix is its prefix.
_CHECKPOINT_FILE_SUFFIX = re.compile(r"\.(index|data-\d+-of-\d+)$")

# Floats viewed as signed integers of the same width, for ULP distances.
_SAME_WIDTH_INT = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


class CheckpointError(ValueError):
    """A path that is not a readable checkpoint; the message names the path."""


def load(path):
    """The prefix of the checkpoint at `path` (see the module docstring), checked to be readable."""
    return _open(path)[0]


def compare(reference_path, other_path, rtol=DEFAULT_RTOL, atol=DEFAULT_ATOL):
    """Return the per-checkpoint dict (module docstring) of `other_path` against `reference_path`."""
    reference_prefix, reference = _open(reference_path)
    prefix, other = _open(other_path)
    reference_shapes, shapes = reference.get_variable_to_shape_map(), other.get_variable_to_shape_map()
    reference_dtypes, dtypes = reference.get_variable_to_dtype_map(), other.get_variable_to_dtype_map()
    mismatched, variables = [], []
    for name in sorted(reference_shapes.keys() & shapes.keys()):
        shape, dtype = shapes[name], dtypes[name]
        if shape != reference_shapes[name] or dtype != reference_dtypes[name]:
            mismatched.append({"name": name, "reference_shape": reference_shapes[name], "shape": shape,
                               "reference_dtype": reference_dtypes[name].name, "dtype": dtype.name})
            continue
        reference_value, value = _tensor(reference, reference_prefix, name), _tensor(other, prefix, name)
        if dtype.is_floating or dtype.is_complex:
            metrics = _compare_floats(reference_value, value, dtype, rtol, atol)
        else:
            metrics = _compare_exactly(reference_value, value, dtype)
        variables.append({"name": name, "shape": shape, "dtype": dtype.name, **metrics})
    missing = sorted(reference_shapes.keys() - shapes.keys())
    extra = sorted(shapes.keys() - reference_shapes.keys())
    matched = not (missing or extra or mismatched)
    identical = matched and all(v["identical"] for v in variables)
    within_tolerance = matched and all(v["within_tolerance"] for v in variables)
    return {"path": prefix,
            "verdict": "identical" if identical else "within_tolerance" if within_tolerance else "differs",
            "identical": identical, "within_tolerance": within_tolerance,
            **{key: _largest(v[key] for v in variables) for key in ("max_abs_diff", "max_scaled_diff", "max_ulp")},
            "missing": missing, "extra": extra, "mismatched": mismatched, "variables": variables}


def non_finite(path):
    """Names of the float variables of the checkpoint at `path` that hold a NaN or an infinity."""
    prefix, reader = _open(path)
    names = []
    for name, dtype in sorted(reader.get_variable_to_dtype_map().items()):
        if dtype.is_floating and not np.isfinite(_tensor(reader, prefix, name)).all():
            names.append(name)
    return names


def _open(path):
    """(prefix, reader) of the checkpoint at `path`; CheckpointError if there is none or it is unreadable."""
    if os.path.isdir(path):
        prefix = _prefix_in_directory(path)
    elif os.path.exists(path + ".index"):
        prefix = path
    elif os.path.isfile(path):
        # One of a checkpoint's files stands for its prefix; any other file may be a V1 checkpoint.
        prefix = _CHECKPOINT_FILE_SUFFIX.sub("", path)
    else:
        raise CheckpointError(f"{path}: no such directory, file or checkpoint prefix")
    try:
        return prefix, tf.train.load_checkpoint(prefix)
    except tf.errors.OpError as error:
        raise CheckpointError(f"{path}: not a readable checkpoint ({_first_line(error.message)})") from None


def _prefix_in_directory(directory):
    # Quiet latest_checkpoint's log about a stale or garbled state file: the fallback and error below say more.
    tf_logger = tf.get_logger()
    level = tf_logger.level
    tf_logger.setLevel(logging.CRITICAL)
    try:
        latest = tf.train.latest_checkpoint(directory)
    except ValueError:  # a state file that parses but names no checkpoint
        latest = None
    finally:
        tf_logger.setLevel(level)
    if latest:
        return latest
    indexes = glob.glob(os.path.join(glob.escape(directory), "*.index"))
    if len(indexes) != 1:
        raise CheckpointError(f"{directory}: no single checkpoint in this directory (no usable 'checkpoint' "
                              f"state file, {len(indexes)} *.index files); name one by its prefix")
    return indexes[0][:-len(".index")]


def _tensor(reader, prefix, name):
    try:
        return np.asarray(reader.get_tensor(name))
    except tf.errors.OpError as error:
        raise CheckpointError(f"{prefix}: cannot read variable {name} ({_first_line(error.message)})") from None


def _compare_floats(a, b, dtype, rtol, atol):
    """Metrics of two float or complex arrays of the same shape and dtype."""
    with np.errstate(all="ignore"):  # inf - inf, 0 / 0 and overflow land only where np.where discards them
        wide_a, wide_b = (x.astype(np.complex128 if dtype.is_complex else np.float64) for x in (a, b))
        nan_a, nan_b = np.isnan(wide_a), np.isnan(wide_b)
        unequal = (a != b) & ~(nan_a & nan_b)
        finite = np.isfinite(wide_a) & np.isfinite(wide_b)
        abs_diff = np.where(unequal, np.where(finite, np.abs(wide_a - wide_b), np.inf), 0.0)
        scale = np.abs(wide_a[np.isfinite(wide_a)]).max(initial=0.0)
        close = ~unequal | (finite & (abs_diff <= atol + rtol * scale))
        max_ulp = _max_ulp(a, b, nan_a, nan_b) if dtype.is_floating else None
    differing = int(np.count_nonzero(unequal))
    largest = float(abs_diff.max(initial=0.0))
    return {"max_abs_diff": largest, "max_scaled_diff": _scaled(largest, scale),
            "max_ulp": max_ulp, "differing": differing, "size": int(a.size), "identical": differing == 0,
            "within_tolerance": bool(close.all())}


def _compare_exactly(a, b, dtype):
    """Metrics of two integer, boolean or string arrays, which are within tolerance only when equal."""
    unequal = a != b
    # As Python ints, differences of any integer dtype neither overflow nor round.
    pairs = list(zip(a[unequal].tolist(), b[unequal].tolist()))
    numeric = dtype.is_integer or dtype.is_bool  # strings have equality but no distance
    largest = max((abs(x - y) for x, y in pairs), default=0) if numeric else None
    return {"max_abs_diff": largest,
            "max_scaled_diff": _scaled(largest, np.abs(a).max(initial=0)) if numeric else None,
            "max_ulp": None, "differing": len(pairs), "size": int(a.size), "identical": not pairs,
            "within_tolerance": not pairs}


def _max_ulp(a, b, nan_a, nan_b):
    """Largest number of steps between representable values of a float dtype; inf for NaN against a number.
    Integer arithmetic here wraps where np.where discards it, or on purpose (uint64 below)."""
    if np.any(nan_a != nan_b):
        return math.inf
    int_type = _SAME_WIDTH_INT[a.dtype.itemsize]

    def ordered(x):
        # IEEE floats are sign-magnitude; count negatives down from 0 so that integer order is float order
        # and -0 and +0 both map to 0.
        bits = x.view(int_type).astype(np.int64)
        return np.where(bits < 0, np.iinfo(int_type).min - bits, bits)

    ordered_a, ordered_b = ordered(a), ordered(b)
    low, high = np.minimum(ordered_a, ordered_b), np.maximum(ordered_a, ordered_b)
    # The distance of two float64 can pass 2**63: subtract as uint64, exact since it stays below 2**64.
    distance = high.astype(np.uint64) - low.astype(np.uint64)
    return int(np.where(nan_a, np.uint64(0), distance).max(initial=0))


def _scaled(difference, scale):
    """difference / scale, where a difference from an all-zero variable is infinite."""
    return float(difference / scale) if scale else (math.inf if difference else 0.0)


def _largest(values):
    known = [value for value in values if value is not None]
    return max(known) if known else None


def _first_line(text):
    return text.strip().splitlines()[0] if text.strip() else "no details"


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        """Bad input: one line on stderr, exit status 2 (argparse would print the usage too)."""
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def _tolerance(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def _parser():
    parser = _ArgumentParser(prog="checkpoints_compare", description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference", metavar="REF", help="the reference checkpoint")
    parser.add_argument("others", metavar="OTHER", nargs="+", help="checkpoints compared with REF")
    parser.add_argument("--rtol", type=_tolerance, default=DEFAULT_RTOL,
                        help="relative tolerance (default %(default)s; why: see above)")
    parser.add_argument("--atol", type=_tolerance, default=DEFAULT_ATOL,
                        help="absolute tolerance (default %(default)s; why: see above)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    return parser


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        reference = load(args.reference)
        for other in args.others:  # every path checked before the first, possibly long, comparison
            load(other)
        results = [compare(reference, other, args.rtol, args.atol) for other in args.others]
    except CheckpointError as error:
        parser.error(str(error))
    passed = all(result["within_tolerance"] for result in results)
    if args.json:
        report = {"reference": reference, "rtol": args.rtol, "atol": args.atol, "checkpoints": results,
                  "passed": passed}
        print(json.dumps(_json_safe(report), indent=2, allow_nan=False))
    else:
        for result in results:
            _print_table(reference, result, args.rtol, args.atol)
    return 0 if passed else 1


def _json_safe(value):
    """`value` with non-finite floats as strings ("inf"), which JSON has no numbers for."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


def _print_table(reference, result, rtol, atol):
    rows = [("name", "shape", "max_abs_diff", "max_scaled_diff", "max_ulp", "differing")]
    rows += [(v["name"], str(v["shape"]), _format(v["max_abs_diff"]), _format(v["max_scaled_diff"]),
              _format(v["max_ulp"]), f"{v['differing']}/{v['size']}") for v in result["variables"]]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    print(f"{result['path']} against {reference}")
    for row in rows:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    if result["missing"]:
        print("  missing (in the reference only): " + ", ".join(result["missing"]))
    if result["extra"]:
        print("  extra (not in the reference): " + ", ".join(result["extra"]))
    for m in result["mismatched"]:
        print(f"  mismatched: {m['name']}: {m['shape']} {m['dtype']}, "
              f"reference {m['reference_shape']} {m['reference_dtype']}")
    if result["identical"]:
        print("IDENTICAL")
    elif result["within_tolerance"]:
        print(f"WITHIN TOLERANCE (rtol={rtol:g}, atol={atol:g})")
    else:
        print("DIFFERS: " + "; ".join(_reasons(result, rtol, atol)))
    print()


def _reasons(result, rtol, atol):
    outside = [v["name"] for v in result["variables"] if not v["within_tolerance"]]
    named = [("missing", result["missing"]), ("extra", result["extra"]),
             ("shape or dtype mismatch", [m["name"] for m in result["mismatched"]]),
             (f"outside rtol={rtol:g}, atol={atol:g}", outside)]
    return [f"{what}: {', '.join(names)}" for what, names in named if names]


def _format(number):
    if number is None:
        return "-"
    return f"{number:.3g}" if isinstance(number, float) else str(number)
