"""A description of where a run ran, stored with its throughput: figures mean nothing without it."""
import importlib.metadata
import os
import platform
import socket

from harness import models


def _proc_field(path, name):
    """The value after "name:" in a /proc file of "name: value" lines, or None."""
    try:
        with open(path) as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.split(":")[0].strip() == name), None)
    except OSError:
        return None


def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine():
    """This machine and its software, as a JSON-ready dict."""
    memory = _proc_field("/proc/meminfo", "MemTotal")  # "24576000 kB"
    return {
        "cpu_model": _proc_field("/proc/cpuinfo", "model name") or platform.processor() or platform.machine(),
        "cpu_cores": os.cpu_count(),
        "memory_bytes": int(memory.split()[0]) * 1024 if memory else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow-cpu") or _version("tensorflow"),
        "horovod": _version("horovod"),
        "numpy": _version("numpy"),
    }


def describe(args, model, config, num_workers):
    """The machine (the chief's), the software and the run's shape, as a JSON-ready dict."""
    return {
        "hostnames": [socket.gethostname()],
        **machine(),
        "intra_op_threads": args.intra_op_threads,
        "inter_op_threads": args.inter_op_threads,
        "workers": num_workers,
        "global_batch_rows": config.batch_size,
        "rows_per_worker": config.batch_size // num_workers,
        "unit": models.unit(model),
        "words_per_step": models.units_per_step(model, config),
    }
