"""The flags every runner shares, on absl.flags (with --flagfile and --help); a bad value is one line naming the
flag, exit 2. Each runner has its own FlagValues, not absl's global FLAGS, as the launcher and the tests parse
several runners' flags in one process."""
import argparse
import math
import os
import sys
import tempfile

from absl import flags as absl_flags
from absl.flags import (DEFINE_boolean, DEFINE_enum, DEFINE_float, DEFINE_integer, DEFINE_list,  # noqa: F401
                        DEFINE_multi_string, DEFINE_string)

from harness import UsageError, determinism, models

HELP_FLAGS = ("-h", "--help", "-help", "--helpshort", "--helpfull", "-?")


class FlagSet(absl_flags.FlagValues):
    """absl's FlagValues, with the program's name and description for --help."""

    def __init__(self, prog, description):
        super().__init__()
        self.__dict__["prog"], self.__dict__["description"] = prog, description
        self.set_gnu_getopt(True)  # flags may follow other arguments (the launcher's architecture comes first)


def parser(runner, description):
    """The shared flags; `runner` names the default checkpoint directory and run."""
    p = FlagSet(f"{runner}.py", description)
    DEFINE_string("model", "lstm", "the model: a built-in one (models/: lstm, transformer) or a path to a model "
                  "file (docs/your-model.md)", flag_values=p)
    DEFINE_string("config", None, "the model's configuration (its CONFIGS; default: its first)", flag_values=p)
    DEFINE_integer("batch_size", None, "the global batch in rows, shared by the workers (default: the config's); "
                   "make bench's weak scaling gives W workers W times the config's batch", lower_bound=1,
                   flag_values=p)
    DEFINE_integer("steps", 300, "training steps", lower_bound=1, flag_values=p)
    DEFINE_integer("warmup_steps", 50, "first steps left out of the throughput figures", lower_bound=0,
                   flag_values=p)
    DEFINE_integer("seed", 1, "fixes the initial parameters, the synthetic corpus and the dropout masks",
                   lower_bound=0, upper_bound=2**63 - 1, flag_values=p)  # the stateless generators' int64 key
    DEFINE_string("data_path", "", "a text in PTB's format (a file, or a directory with ptb.train.txt); "
                  "default: a synthetic Zipf corpus from --seed", flag_values=p)
    DEFINE_string("ckpt_dir", os.path.join("checkpoints", runner), "where the final checkpoint goes", flag_values=p)
    DEFINE_string("results_dir", "results", "where the JSON results and TensorBoard logs go", flag_values=p)
    DEFINE_string("run_name", runner, "names the result files: <results_dir>/<run_name>.json and .jsonl",
                  flag_values=p)
    DEFINE_integer("log_every", 20, "steps between progress lines", lower_bound=1, flag_values=p)
    DEFINE_integer("intra_op_threads", 1, "threads inside one op; summation order depends on it, so keep it "
                   "equal across the runs you compare", lower_bound=1, flag_values=p)
    DEFINE_integer("inter_op_threads", 1, "ops run concurrently", lower_bound=1, flag_values=p)
    DEFINE_boolean("events", False, "print the @event lines a launcher reads (python -m launcher sets it)",
                   flag_values=p)
    return p


# The shared flags that decide what a run computes and how fast: what a program passes on to the runs it starts.
RUN_FLAGS = ("model", "config", "batch_size", "steps", "warmup_steps", "seed", "data_path", "intra_op_threads",
             "inter_op_threads")


def passed_on(args, names=RUN_FLAGS):
    """`args`' values of the flags `names` as command-line flags ("--seed=1"), leaving out those not set."""
    return [f"--{name}={getattr(args, name)}" for name in names if getattr(args, name) not in (None, "")]


def parse(flag_values, argv=None, positional=0, load_model=True):
    """Parse `argv` (default: the command line) into a Namespace; bad input raises UsageError, --help exits 0.
    `positional` arguments may come among the flags (args.positional); a runner's flags are also cross-checked,
    the model and its config too unless `load_model` is false (a judge never runs a model file's code)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(arg in HELP_FLAGS for arg in argv):
        print(help_text(flag_values))
        sys.exit(0)
    try:
        rest = flag_values([flag_values.prog, *argv])[1:]
    except absl_flags.Error as error:
        raise UsageError(_one_line(error))
    if len(rest) != positional:
        raise UsageError(f"unexpected argument {rest[positional]!r}" if len(rest) > positional
                         else "missing argument")
    args = argparse.Namespace(**{name: flag_values[name].value for name in flag_values},
                              **({"positional": rest} if positional else {}))
    if "intra_op_threads" in flag_values:  # before a model loads: a Keras program makes TensorFlow's devices
        determinism.fix_threads(args)
    if "model" in flag_values and "config" in flag_values:  # a run's flags (the preflight has --model alone)
        _check_run(args, load_model)
    return args


def _check_run(args, load_model):
    """The shared flags a program has (parser()'s, less those it deleted), checked against each other and the disk."""
    if "steps" in vars(args) and args.warmup_steps >= args.steps:
        raise UsageError(f"--warmup_steps={args.warmup_steps} must be smaller than --steps={args.steps}: "
                         "the throughput timer needs steps after the warm-up")
    if load_model:
        args.config = args.config or next(iter(models.load(args.model).CONFIGS))  # the model and its config exist
        models.config(models.load(args.model), args.config, vars(args).get("batch_size"))
    else:
        models.path_of(args.model)  # the file exists
    if vars(args).get("data_path") and not os.path.exists(args.data_path):
        raise UsageError(f"--data_path: {args.data_path} does not exist")
    if "run_name" in vars(args) and (not args.run_name or os.sep in args.run_name):
        raise UsageError(f"--run_name: {args.run_name!r} is not a file name")
    for flag in ("ckpt_dir", "results_dir"):
        problem = unwritable(getattr(args, flag)) if flag in vars(args) else None
        if problem:
            raise UsageError(f"--{flag}={getattr(args, flag)}: {problem}")


def unwritable(directory):
    """Why `directory` cannot be created or written, or None; it tries, as permission bits do not say (/proc)."""
    path = os.path.abspath(directory)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        return f"{path} is not a directory"
    try:
        tempfile.TemporaryDirectory(dir=path).cleanup()
    except OSError as error:
        return f"{path} is not writable ({error.strerror})"
    return None


def _one_line(error):
    """absl's message as one line that names the flag as --flag."""
    if isinstance(error, absl_flags.UnrecognizedFlagError):
        return f"--{error.flagname}: no such flag"
    message = " ".join(str(error).split())
    if "Unable to open flagfile" in message:
        return "--flagfile: " + message.split("Unable to open flagfile: ")[-1]
    if "Non-boolean argument to boolean flag" in message:
        return message.split(":")[0][len("flag "):] + ": expected true or false"
    return message[len("flag "):] if message.startswith("flag --") else message


def help_text(flag_values):
    """The --help text: the description, then each flag with its help and default."""
    lines = [f"usage: {flag_values.prog} [flags]", "", flag_values.description.strip(), "", "flags:"]
    for name in sorted(flag_values):
        flag = flag_values[name]
        lines.append(f"  --{name}: {flag.help}" + (f" (default: {flag.default_as_str})" if flag.default_as_str
                                                   else ""))
    lines.append("  --flagfile: read more flags from this file, one per line")
    return "\n".join(lines)


def host_list(text):
    """host:port,host:port,... as a list; raises ValueError naming the bad item."""
    hosts = text.split(",")
    for host in hosts:
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected host:port,..., got {host!r}")
    return hosts


def host_slots(text):
    """host:slots,... (horovodrun's -H) as a list of (host, slots); raises ValueError naming the bad item."""
    pairs = []
    for item in text.split(","):
        name, _, slots = item.rpartition(":")
        if not name or not slots.isdigit() or int(slots) < 1:
            raise ValueError(f"expected host:slots,..., got {item!r}")
        pairs.append((name, int(slots)))
    return pairs


def DEFINE_names(name, default, help, flag_values, known=None):
    """A comma-separated list flag, refused empty, with an item named twice, or (given `known`) an unknown one."""
    def names(text):
        items = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in items if known is not None and item not in known]
        repeated = sorted({item for item in items if items.count(item) > 1})
        if not items or unknown or repeated:
            raise ValueError("empty; name at least one" if not items else f"unknown {', '.join(unknown)} (known: "
                             f"{', '.join(known)})" if unknown else f"{', '.join(repeated)} named twice")
        return items
    DEFINE_parsed(name, default, names, help, flag_values)


class _Parsed(absl_flags.ArgumentParser):
    """An absl argument parser from a function that turns the text into the value or raises ValueError."""

    def __init__(self, function):
        self.function = function

    def parse(self, argument):
        return self.function(argument) if isinstance(argument, str) else argument

    def flag_type(self):
        return self.function.__name__


def DEFINE_parsed(name, default, function, help, flag_values):
    """A flag whose text `function` (host_list, host_slots) turns into its value, or raises ValueError."""
    absl_flags.DEFINE(_Parsed(function), name, default, help, flag_values=flag_values)


def DEFINE_finite_float(name, default, help, flag_values, lower_bound=0.0):
    """A float flag that must be finite and at least `lower_bound` when given (absl's bounds let nan through)."""
    DEFINE_float(name, default, help, flag_values=flag_values)
    absl_flags.register_validator(name, lambda value: value is None or (math.isfinite(value) and value >= lower_bound),
                                  message=f"must be a finite number >= {lower_bound:g}", flag_values=flag_values)
