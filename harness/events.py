"""Structured lines a run's chief prints for whoever started it: one JSON object after a fixed marker, so that
the launcher reads an event instead of scraping a progress line whose wording may change.

    @event {"event": "measured_steps_begin", "after_step": 50}   the timer's measured steps start now
    @event {"event": "measured_steps_end", "after_step": 300}    the last step is done
    @event {"event": "progress", "steps_done": 120}             with every progress line (--log_every)
"""
import json

MARKER = "@event "


def announce(name, **fields):
    print(MARKER + json.dumps({"event": name, **fields}), flush=True)


def parse(line):
    """The event a line announces, or None for any other line."""
    return json.loads(line[len(MARKER):]) if line.startswith(MARKER) else None
