"""A description of where a run ran, stored with its throughput: figures mean nothing without it."""
import glob
import importlib.metadata
import os
import platform
import subprocess

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


def _lines(argv):
    """The non-empty lines `argv` prints, [] when it is not installed or fails."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in result.stdout.splitlines() if line.strip()] if result.returncode == 0 else []


def _os_name():
    """PRETTY_NAME of /etc/os-release ("Debian GNU/Linux 12 (bookworm)"), or None."""
    try:
        with open("/etc/os-release") as f:
            return next((line.split("=", 1)[1].strip().strip('"') for line in f if line.startswith("PRETTY_NAME=")),
                        None)
    except OSError:
        return None


def link_rates():
    """{interface: Mbit/s} of this machine's network interfaces but loopback; None where the kernel reports none."""
    rates = {}
    for path in sorted(glob.glob("/sys/class/net/*/speed")):
        name = path.split("/")[-2]
        if name != "lo":
            try:
                with open(path) as f:
                    rate = int(f.read())
            except (OSError, ValueError):
                rate = -1
            rates[name] = rate if rate > 0 else None
    return rates


def machine():
    """This machine and its software, as a JSON-ready dict."""
    memory = _proc_field("/proc/meminfo", "MemTotal")  # "24576000 kB"
    return {
        "cpu_model": _proc_field("/proc/cpuinfo", "model name") or platform.processor() or platform.machine(),
        "cpu_cores": os.cpu_count(),
        "memory_bytes": int(memory.split()[0]) * 1024 if memory else None,
        "gpus": _lines(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]),  # [] without NVIDIA's driver
        "os": _os_name(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow-cpu") or _version("tensorflow"),
        "horovod": _version("horovod"),
        "mpi": next(iter(_lines(["mpirun", "--version"])), None),
        "numpy": _version("numpy"),
    }


# Run on a host (argv: the repository there): host(), as one JSON line.
PROBE = "import json, sys; sys.path.insert(0, sys.argv[1]); from harness import environment; " \
        "print(json.dumps(environment.host()))"


def host():
    """This host as a run's manifest names it: its name, machine(), the rates of its links and its kernel's boot
    (hosts with the same boot are one machine: containers, namespaces)."""
    return {"hostname": platform.node(), **machine(), "links": link_rates(), "boot_id": _boot_id()}


def _boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def describe(args, model, config, num_workers):
    """The machine (the chief's), the software and the run's shape, as a JSON-ready dict."""
    return {
        "hostnames": [platform.node()],  # (uname: the Gloo shim changes gethostname)
        **machine(),
        "intra_op_threads": args.intra_op_threads,
        "inter_op_threads": args.inter_op_threads,
        "workers": num_workers,
        "global_batch_rows": config.batch_size,
        "rows_per_worker": config.batch_size // num_workers,
        "unit": models.unit(model),
        "words_per_step": models.units_per_step(model, config),
    }
