"""The @event lines a run's chief prints for the launcher, one JSON object each, so that it need not scrape progress
lines: measured_steps_begin and measured_steps_end ("after_step", and in an emulated cluster "ports", the switch's
counters read at that moment), and progress ("steps_done") every --log_every; with launch --count_bytes, one worker
a host prints host_bytes after every step ("after_step", its host's interface's "sent" and "received" bytes). Each
carries `at`, the task's time.monotonic(). Printed with --events, which the launcher passes; it reads them from the
task's output, on whichever host the task runs, and shows a person the other lines only."""
import json
import os
import time

MARKER = "@event "
PORTS_FD = "LSTMNET_PORTS_FD"  # in an emulated cluster's tasks: the switch's /proc/net/dev, inherited open
HOST_INTERFACE = "LSTM_HOST_INTERFACE"  # in one worker a host (launch --count_bytes): the interface it counts
FAULT_STEP = "LSTM_FAULT_AFTER_STEP"  # in the chief of a run with --fault=TASK:STEP: the step it waits after
HOLD_SECONDS = 600  # a fault comes in seconds, over ssh too; a chief still waiting then says so and stops


def announce(name, **fields):
    print(MARKER + json.dumps({"event": name, "at": time.monotonic(), **fields}), flush=True)


def progress(steps_done):
    """Announce the steps done; in a run with a fault after a step (FAULT_STEP), wait there to be killed, so that
    what the fault interrupts is that step, however late the launcher reads this line."""
    announce("progress", steps_done=steps_done)
    fault_step = os.environ.get(FAULT_STEP)
    if fault_step and steps_done >= int(fault_step):
        time.sleep(HOLD_SECONDS)
        raise SystemExit(f"fault: waited {HOLD_SECONDS} s after step {steps_done} and no fault came")


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


def host_bytes(after_step):
    """Announce this host's interface counters after a step, if the launcher asked this task to count them."""
    interface = os.environ.get(HOST_INTERFACE)
    if interface:
        # /proc/self/net/dev is this process's network namespace's (sysfs shows the one it was mounted in)
        descriptor = os.open("/proc/self/net/dev", os.O_RDONLY)
        try:
            received, sent = read_ports(descriptor)[interface]
        finally:
            os.close(descriptor)
        announce("host_bytes", after_step=after_step, sent=sent, received=received)
