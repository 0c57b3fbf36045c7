"""The model contract: what a model file gives the toolkit, and how the toolkit loads one (--model, MODEL=).

A model is one Python file (models/lstm.py, models/transformer.py, or yours: docs/your-model.md) with:

    CONFIGS                  {name: config}, the first the default. A config is a dataclass with `name` and
                             `batch_size`, the rows of the GLOBAL batch (W workers train batch_size / W each).
    data(config, data_path, seed)
                             the global batch of every step: an object whose call (step) gives a tuple of
                             numpy arrays of batch_size rows, and whose `epoch_size` is the steps in an epoch
                             (harness.data.language_model serves a corpus of word ids).
    variables(config)        {name: harness.variables.Variable(shape, initializer)}, in a fixed order; initial
                             values come from (seed, name) alone, so every runner and partitioning starts equal.
    loss(config, params, inputs, random[, state])
                             the objective of some rows of the global batch: the MEAN over them of a per-row
                             loss, so that averaging W workers' gradients gives the batch's. `params` reads
                             variables (params["w"], params.gather("embedding", ids)); `inputs` is the tuple
                             of this call's rows; `random` draws per-row and shared randomness keyed by (seed,
                             step) (harness.variables.StepRandom). With `state_shape`, it also gets the rows'
                             state and returns (objective, new state).
    update_rule(config)      a harness.update.Rule: one of the toolkit's optimizers (SGD, Adagrad, Adam), the
                             learning-rate schedule, clipping.

and optionally:

    state_shape(config)      the shape of the state ONE row carries from step to step (an LSTM's cell and
                             output); zeros at the start of every epoch. Without it the model has no state.
    metrics(config, objective)
                             {"loss": ..., more}: what a step reports (default {"loss": objective}).
    UNIT, units_per_row(config)
                             what throughput counts (default "examples", 1 per row; a language model's
                             "words", num_steps per row).
    BENCH_CONFIGS            the configs make bench sweeps (default: the first).
    TOLERANCE                (rtol, atol) verify allows with more than two workers (default 1e-5, 1e-7),
                             for a model that turns rounding into larger differences (ReLU's kinks, Adam).

Nothing else: which variables are sparse comes from their gradients' types (tf.IndexedSlices), as Parallax
decides it; the runners, the harness, the bench and the report know a model only through this.
"""
import dataclasses
import importlib.util
import os
import sys

from harness import REPO, UsageError

BUILT_IN = sorted(name[:-3] for name in os.listdir(os.path.join(REPO, "models"))
                  if name.endswith(".py") and not name.startswith("_"))
REQUIRED = ("CONFIGS", "data", "variables", "loss", "update_rule")


def path_of(name):
    """The file of model `name`: a built-in model's name (lstm), or a path to a .py file."""
    if name.endswith(".py"):
        if not os.path.isfile(name):
            raise UsageError(f"--model={name}: no such file")
        return os.path.abspath(name)
    if name not in BUILT_IN:
        raise UsageError(f"--model={name}: no such model (built in: {', '.join(BUILT_IN)}; or a path to a .py file)")
    return os.path.join(REPO, "models", f"{name}.py")


def load(name):
    """The model module `name` (see path_of), checked against the contract; a missing part is a UsageError."""
    path = path_of(name)
    module_name = f"_model_{os.path.splitext(os.path.basename(path))[0]}"
    if module_name in sys.modules and sys.modules[module_name].__file__ == path:
        return sys.modules[module_name]
    from harness import determinism  # noqa: F401  (before the model's TensorFlow: it fixes the kernels)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    missing = [part for part in REQUIRED if not hasattr(module, part)]
    if missing:
        raise UsageError(f"--model={name}: {path} lacks {', '.join(missing)} of the model contract "
                         f"(harness/models.py)")
    if not isinstance(module.CONFIGS, dict) or not module.CONFIGS:
        raise UsageError(f"--model={name}: CONFIGS must be a non-empty dict of named configurations")
    module.NAME = name
    return module


def config(model, name, batch_size=None):
    """Configuration `name` of `model` (None: its first), with `batch_size` rows when given."""
    name = name or next(iter(model.CONFIGS))
    if name not in model.CONFIGS:
        raise UsageError(f"--config={name}: model {model.NAME} has no such config (it has "
                         f"{', '.join(model.CONFIGS)})")
    chosen = model.CONFIGS[name]
    return dataclasses.replace(chosen, batch_size=batch_size) if batch_size else chosen


def from_flags(args):
    """(the model, its configuration) that --model, --config and --batch_size name."""
    model = load(args.model)
    return model, config(model, args.config, args.batch_size)


def description(model):
    """The first paragraph of the model file's docstring, on one line."""
    return " ".join((model.__doc__ or model.NAME).strip().split("\n\n")[0].split())


def bench_configs(model):
    """The names of the configs make bench sweeps by default."""
    return list(getattr(model, "BENCH_CONFIGS", [next(iter(model.CONFIGS))]))


def tolerance(model):
    """(rtol, atol): how far verify lets a run with more than two workers be from the reference."""
    from checkpoints_compare import DEFAULT_ATOL, DEFAULT_RTOL
    return tuple(getattr(model, "TOLERANCE", (DEFAULT_RTOL, DEFAULT_ATOL)))


def state_shape(model, config):
    """The state one row carries, or None for a model without state."""
    return list(model.state_shape(config)) if hasattr(model, "state_shape") else None


def metrics(model, config, objective):
    """{"loss": ..., more} of a step's objective."""
    return model.metrics(config, objective) if hasattr(model, "metrics") else {"loss": float(objective)}


def unit(model):
    """What a row of a batch counts as in throughput: "words", "examples"."""
    return getattr(model, "UNIT", "examples")


def units_per_step(model, config):
    """The units of throughput one step of the global batch trains."""
    return config.batch_size * (model.units_per_row(config) if hasattr(model, "units_per_row") else 1)
