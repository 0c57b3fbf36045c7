"""The @event lines a run's chief prints for the launcher, one JSON object each, so that it need not scrape progress
lines: measured_steps_begin and measured_steps_end ("after_step"), and progress ("steps_done") every --log_every.
Each carries `at`, the chief's time.monotonic() (one clock for every process and namespace of the machine)."""
import json
import time

MARKER = "@event "


def announce(name, **fields):
    print(MARKER + json.dumps({"event": name, "at": time.monotonic(), **fields}), flush=True)


def parse(line):
    """The event a line announces, or None for any other line."""
    return json.loads(line[len(MARKER):]) if line.startswith(MARKER) else None
