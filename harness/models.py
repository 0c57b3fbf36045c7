"""Load a model file (--model, MODEL=) and check it against the model contract: what a model gives the toolkit,
which knows a model only through it. docs/your-model.md states the contract."""
import ast
import contextlib
import dataclasses
import hashlib
import importlib.util
import inspect
import os
import sys
import traceback
import types

from harness import REPO, UsageError

BUILT_IN = sorted(name[:-3] for name in os.listdir(os.path.join(REPO, "models"))
                  if name.endswith(".py") and not name.startswith("_"))
REQUIRED = ("CONFIGS", "data", "loss", "update_rule")
HOOK = "harness.keras_program"  # what a Keras program imports (docs/your-model.md, section 6)
LOADED = {}  # {a loaded model's file: --model as given}: the code whose mistakes are the student's to mend
LOADING = False  # while a model file runs: a Keras program's model.fit or toolkit_trains then ends it


class ProgramReached(Exception):
    """A Keras program's model.fit or toolkit_trains, reached while the toolkit runs it, with what it trains (a
    harness.keras_program.Program)."""

    def __init__(self, program):
        super().__init__("a Keras program reached its training")
        self.program = program


def path_of(name):
    """The file of model `name`: a built-in model's name (lstm), or a path to a .py file."""
    if name.endswith(".py"):
        if not os.path.isfile(name):
            raise UsageError(f"--model={name}: no such file")
        return os.path.abspath(name)
    if name not in BUILT_IN:
        raise UsageError(f"--model={name}: no such model (built in: {', '.join(BUILT_IN)}; or a path to a .py file)")
    return os.path.join(REPO, "models", f"{name}.py")


def digest(name):
    """The SHA-256 of model `name`'s file: what ties a verdict or a result to the code that made it."""
    with open(path_of(name), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load(name):
    """The model module `name` (see path_of), checked against the contract; a missing part is a UsageError."""
    path = path_of(name)
    module_name = f"_model_{os.path.splitext(os.path.basename(path))[0]}"
    if module_name in sys.modules and sys.modules[module_name].__file__ == path:
        return sys.modules[module_name]
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(module_name, path))
    sys.modules[module_name] = module
    LOADED[path] = name
    code, program = read(path)
    try:
        execute(module, path, code, program)
    except ProgramReached as reached:  # a Keras program: its fit's parts become the contract
        sys.modules[HOOK].contract(module, reached.program, name)
    except UsageError as error:
        raise UsageError(f"--model={name}: {error}") from None
    except SystemExit as stopped:
        if not program:
            raise
        raise UsageError(f"--model={name}: {path} stopped at {_where(stopped, path)} (sys.exit) before reaching "
                         f"model.fit or toolkit_trains") from None
    missing = [part for part in REQUIRED if not hasattr(module, part)]
    if missing and program:
        raise UsageError(f"--model={name}: {path} ran to its end without reaching model.fit or toolkit_trains")
    if missing:
        raise UsageError(f"--model={name}: {path} lacks {', '.join(missing)} of the model contract "
                         f"(harness/models.py)")
    if not isinstance(module.CONFIGS, dict) or not module.CONFIGS:
        raise UsageError(f"--model={name}: CONFIGS must be a non-empty dict of named configurations")
    for key, value in module.CONFIGS.items():
        if not (dataclasses.is_dataclass(value) and not isinstance(value, type) and hasattr(value, "name")
                and isinstance(getattr(value, "batch_size", None), int) and value.batch_size >= 1):
            raise UsageError(f"--model={name}: CONFIGS[{key!r}] must be a dataclass with name and batch_size (rows, "
                             f"an int), not {_shown(value)}")
    for part in ("data", "loss", "update_rule", "variables", "state_shape"):
        if hasattr(module, part) and not callable(getattr(module, part)):
            raise UsageError(f"--model={name}: {part} must be a function, not {_shown(getattr(module, part))}")
    tolerance = getattr(module, "TOLERANCE", (0.0, 0.0))
    if not (isinstance(tolerance, (tuple, list)) and len(tolerance) == 2
            and all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in tolerance)):
        raise UsageError(f"--model={name}: TOLERANCE must be (rtol, atol), two numbers of 0 or more, not "
                         f"{_shown(tolerance)}")
    wanted = ["config", "params", "inputs", "random", *(["state"] if hasattr(module, "state_shape") else [])]
    taken = inspect.signature(module.loss).parameters.values()
    if not any(p.kind == p.VAR_POSITIONAL for p in taken) and len(taken) != len(wanted):
        raise UsageError(f"--model={name}: loss must take ({', '.join(wanted)}), not "
                         f"({', '.join(p.name for p in taken)})")
    module.NAME = name
    return module


def execute(module, path, code, program):
    """Run the file at `path` (its `code`) in `module`: as a script when it is a Keras `program`, its randomness
    seeded."""
    from harness import determinism  # noqa: F401  (before the model's TensorFlow: it fixes the kernels)
    global LOADING
    LOADING = True
    if HOOK in sys.modules:  # loaded by an earlier program: it seeds this one too
        sys.modules[HOOK].program_starts()
    try:
        with as_script(module, path) if program else contextlib.nullcontext():
            exec(code, vars(module))
    finally:
        LOADING = False


def run_again(name):
    """What the Keras program of model `name` trains, made again by running the program again (in the graph and
    under the devices of the caller's context): its layers as its own code makes them. Its mistakes are
    UsageErrors the caller names the model in."""
    path = path_of(name)
    try:
        module = types.ModuleType("__main__")
        module.__file__ = path
        execute(module, path, read(path)[0], True)
    except ProgramReached as reached:
        return reached.program
    except UsageError:
        raise
    except Exception as error:
        layer = f", in layer {error.in_layer}" if hasattr(error, "in_layer") else ""
        lines = str(error).strip().splitlines()  # a layer's call converted by autograph: its error's last line
        what = lines[-1].strip() if len(lines) > 1 else f"{type(error).__name__}: {error}"
        raise UsageError(f"making its model again in this runner's graph failed at {_where(error, path)} of "
                         f"{path}{layer}: {what}") from None
    raise UsageError(f"{path} did not reach model.fit or toolkit_trains when run again")


def is_run_by_python():
    """Whether this process is a Keras program run on its own (`python yours.py`), not loaded by the toolkit."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return not LOADING and bool(path) and path.endswith(".py") and os.path.isfile(path) and read(path)[1]


def read(path):
    """The file's code, and whether it is a Keras program (it imports harness.keras_program), read without
    running it."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    program = any(isinstance(node, ast.Import) and any(a.name == HOOK for a in node.names)
                  or isinstance(node, ast.ImportFrom) and (node.module == HOOK or node.module == "harness" and any(
                      a.name == "keras_program" for a in node.names))
                  for node in ast.walk(tree))
    return compile(tree, path, "exec"), program


@contextlib.contextmanager
def as_script(module, path):
    """Run `module` as Python runs a script: named __main__ (its `if __name__ == "__main__":` block runs), the
    program's own sys.argv (its file alone: argparse and absl see their defaults, not the runner's flags)."""
    saved = module.__name__, sys.modules["__main__"], sys.argv
    module.__name__, sys.modules["__main__"], sys.argv = "__main__", module, [path]
    try:
        yield
    finally:
        module.__name__, sys.modules["__main__"], sys.argv = saved


def _where(error, path):
    """Where in the file at `path` an exception was raised: "line N" of its innermost frame there."""
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == path]
    return f"line {lines[-1]}" if lines else "its start"


def name_of(model):
    """A loaded model's --model, as a message names it."""
    return getattr(model, "NAME", model.__name__)


def _shown(value):
    """A value as a mistake message shows it: its type, and itself when short."""
    text = repr(value)
    return f"{type(value).__name__} {text}" if len(text) <= 60 else type(value).__name__


def update_rule(model, config):
    """The model's update_rule(config), checked to be a harness.update.Rule (by what the toolkit reads of it)."""
    rule = model.update_rule(config)
    if not all(hasattr(rule, part) for part in ("optimizer", "learning_rate", "clip_norm", "clipped", "scale")):
        raise UsageError(f"--model={name_of(model)}: update_rule must return a harness.update.Rule(optimizer, "
                         f"schedule), not {_shown(rule)}")
    return rule


def check_batches(model, config, batches):
    """`data`'s batches, checked: called with a step, a tuple of numpy arrays of batch_size rows; epoch_size."""
    if not callable(batches) or not isinstance(getattr(batches, "epoch_size", None), int):
        raise UsageError(f"--model={name_of(model)}: data must return an object called with a step, with epoch_size "
                         f"(an int), not {_shown(batches)}")
    first = batches(0)
    if not isinstance(first, tuple) or not all(getattr(a, "shape", ())[:1] == (config.batch_size,) for a in first):
        raise UsageError(f"--model={name_of(model)}: data's batch of a step must be a tuple of numpy arrays of "
                         f"batch_size={config.batch_size} rows, not {_shown(first)}")
    return batches


def mistake(error):
    """One line for an exception a model file's own code raised (a syntax error, a missing import, an error in
    its loss): its file, line and function, the error, that line's code; None for an error elsewhere."""
    if isinstance(error, SyntaxError) and error.filename in LOADED:
        where, code = (error.filename, error.lineno, "<module>"), (error.text or "").strip()
    else:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename in LOADED]
        if not frames:
            return None
        where, code = (frames[-1].filename, frames[-1].lineno, frames[-1].name), frames[-1].line
    message = (str(error.msg if isinstance(error, SyntaxError) else error).strip().splitlines() or [""])[0]
    return (f"--model={LOADED[where[0]]}: {where[0]}:{where[1]}, in {where[2]}: {type(error).__name__}: "
            f"{message}" + (f" (the line: {code})" if code else ""))


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


def data_source(model, data_path):
    """Where a run's examples come from: the model's own (DATA: a Keras program's), the file given, or the
    synthetic corpus."""
    return getattr(model, "DATA", None) or data_path or "synthetic"


def bench_configs(model):
    """The names of the configs make bench sweeps by default."""
    return list(getattr(model, "BENCH_CONFIGS", [next(iter(model.CONFIGS))]))


def tolerance(model):
    """(rtol, atol): how far verify lets a run with more than two workers be from the reference."""
    from checkpoints_compare import DEFAULT_ATOL, DEFAULT_RTOL
    return tuple(getattr(model, "TOLERANCE", (DEFAULT_RTOL, DEFAULT_ATOL)))


def declared_variables(model, config):
    """{name: Variable} the model declares (none: copied code's layers make them all while loss builds)."""
    declared = model.variables(config) if hasattr(model, "variables") else {}
    if not isinstance(declared, dict) or not all(hasattr(v, "shape") and hasattr(v, "initializer")
                                                 for v in declared.values()):
        raise UsageError(f"--model={name_of(model)}: variables must return {{name: Variable(shape, initializer)}} "
                         f"(harness.variables), not {_shown(declared)}")
    for variable_name, variable in declared.items():
        if not all(n >= 1 for n in variable.shape):
            raise UsageError(f"--model={name_of(model)}: variables: {variable_name}'s shape {list(variable.shape)} "
                             f"must be of sizes 1 or more")
    return declared


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
