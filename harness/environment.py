"""A description of where a run ran, stored with its throughput: figures mean nothing without it."""
import importlib.metadata
import os
import platform
import socket

from harness import models


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine():
    """This machine and its software, as a JSON-ready dict."""
    return {
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
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
