"""The @event lines a run's chief prints for the launcher, one JSON object each, so that it need not scrape progress
lines: measured_steps_begin and measured_steps_end ("after_step", and in an emulated cluster "ports", the switch's
counters read at that moment), and progress ("steps_done") every --log_every. Each carries `at`, the chief's
time.monotonic(). Printed with --events, which the launcher passes; it reads them from the task's output, on
whichever host the task runs, and shows a person the other lines only."""
import json
import os
import time

MARKER = "@event "
PORTS_FD = "LSTMNET_PORTS_FD"  # in an emulated cluster's tasks: the switch's /proc/net/dev, inherited open


def announce(name, **fields):
    print(MARKER + json.dumps({"event": name, "at": time.monotonic(), **fields}), flush=True)


def parse(line):
    """The event a line announces, or None for any other line."""
    return json.loads(line[len(MARKER):]) if line.startswith(MARKER) else None


def switch_ports():
    """The emulated cluster's switch ports' counters, read now by the task itself; None outside an emulated cluster."""
    descriptor = os.environ.get(PORTS_FD)
    return None if descriptor is None else read_ports(int(descriptor))


def read_ports(descriptor):
    """{interface: (bytes received, bytes sent)} from an open /proc/net/dev, whichever namespace reads it."""
    text = b""
    while chunk := os.pread(descriptor, 1 << 16, len(text)):  # pread: the offset is shared with other holders
        text += chunk
    return {name.strip(): (int(fields.split()[0]), int(fields.split()[8]))
            for name, fields in (line.split(":", 1) for line in text.decode().splitlines()[2:])}
