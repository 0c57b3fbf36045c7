"""The flags every runner shares, and their validation: a bad value is one line naming the flag, exit 2."""
import argparse
import os

import model
from harness import UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print the whole usage first; one line is enough
        raise UsageError(message)


def _int_at_least(minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value
    parse.__name__ = f"integer >= {minimum}"
    return parse


positive_int = _int_at_least(1)
non_negative_int = _int_at_least(0)


def boolean(text):
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def host_list(text):
    """host:port,host:port,... as a list."""
    hosts = text.split(",")
    for host in hosts:
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"expected host:port,..., got {host!r}")
    return hosts


def host_slots(text):
    """host:slots,host:slots,... (horovodrun's -H) as a list of (host, slots)."""
    pairs = []
    for item in text.split(","):
        name, _, slots = item.rpartition(":")
        if not name or not slots.isdigit() or int(slots) < 1:
            raise argparse.ArgumentTypeError(f"expected host:slots,..., got {item!r}")
        pairs.append((name, int(slots)))
    return pairs


def empty_parser(prog, description):
    """An argument parser whose errors are UsageErrors."""
    return _Parser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)


def parser(runner, description):
    """An argument parser with the shared flags; `runner` names the default checkpoint directory and run."""
    p = empty_parser(f"{runner}.py", description)
    p.add_argument("--config", choices=sorted(model.CONFIGS), default="small",
                   help="model configuration (model.CONFIGS): tiny for tests, small and medium as in the paper")
    p.add_argument("--steps", type=positive_int, default=300, help="training steps")
    p.add_argument("--warmup_steps", type=non_negative_int, default=50,
                   help="first steps left out of the throughput figures (default %(default)s)")
    p.add_argument("--seed", type=non_negative_int, default=1,
                   help="fixes the initial parameters, the synthetic corpus and the dropout masks")
    p.add_argument("--data_path", default="",
                   help="a text in PTB's format (a file, or a directory with ptb.train.txt); "
                        "default: a synthetic Zipf corpus from --seed")
    p.add_argument("--ckpt_dir", default=os.path.join("checkpoints", runner),
                   help="where the final checkpoint goes (default %(default)s)")
    p.add_argument("--results_dir", default="results", help="where the JSON results and TensorBoard logs go")
    p.add_argument("--run_name", default=runner,
                   help="names the result files: <results_dir>/<run_name>.json and .jsonl (default %(default)s)")
    p.add_argument("--log_every", type=positive_int, default=20, help="steps between progress lines")
    p.add_argument("--intra_op_threads", type=positive_int, default=1,
                   help="threads inside one op; summation order depends on it, so keep it equal across the "
                        "runs you compare (default %(default)s)")
    p.add_argument("--inter_op_threads", type=positive_int, default=1, help="ops run concurrently")
    return p


def parse(parser, argv=None):
    """Parsed and cross-checked flags."""
    args = parser.parse_args(argv)
    if args.warmup_steps >= args.steps:
        raise UsageError(f"--warmup_steps={args.warmup_steps} must be smaller than --steps={args.steps}: "
                         "the throughput timer needs steps after the warm-up")
    if args.data_path and not os.path.exists(args.data_path):
        raise UsageError(f"--data_path: {args.data_path} does not exist")
    if not args.run_name or os.sep in args.run_name:
        raise UsageError(f"--run_name: {args.run_name!r} is not a file name")
    return args
