"""What a task is, and the one place where a run's tasks are started, watched and stopped.

A Task is what to run: a name ("worker1", "ps0"), a command line, its extra environment and its host; `place`
decides the hosts of a run's tasks on hosts with slots or on this machine's loopback. A starter
(harness/starters/) is how to start one. `run_tasks` starts every task of a run with one starter,
prefixes each line of their output with the task's name, reads their exit statuses and, when one fails or the
user presses Ctrl-C, stops the others: a dead task takes the whole run down at once, with a message naming it.
A Fault kills one task on purpose, at a step chosen in advance (the resume tests, verify --faults).
"""
import dataclasses
import os
import signal
import sys
import threading
import time

import harness
from harness import events

@dataclasses.dataclass
class Task:
    name: str
    argv: list
    env: dict = dataclasses.field(default_factory=dict)
    host: str = "127.0.0.1"


def place(num_workers, num_ps, hosts=None, machines=1):
    """(host of each worker, host of each parameter server).

    With `hosts` ([(host, slots)]), the workers fill the hosts' slots in order and the parameter servers go
    round the hosts. Without, everything is on this machine and the workers are spread in blocks over
    `machines` loopback addresses, 127.0.0.1, 127.0.0.2...: every byte still crosses this machine's
    loopback, but a runner that groups workers by host (run_parallax.py --local_aggregation) sees that many
    machines."""
    if not hosts:
        return [f"127.0.0.{1 + i * machines // num_workers}" for i in range(num_workers)], ["127.0.0.1"] * num_ps
    slots = [host for host, count in hosts for _ in range(count)]
    if len(slots) < num_workers:
        raise harness.UsageError(f"--hosts: {len(slots)} slots for {num_workers} workers")
    return slots[:num_workers], [hosts[i % len(hosts)][0] for i in range(num_ps)]


@dataclasses.dataclass
class Fault:
    """Kills task `task` ("ps0", "worker1") with SIGKILL to its process group, a crash rather than a stop, once
    the chief announces (events "progress", every --log_every steps) that at least `after_step` steps are
    done: the failure of a resume test or of verify --faults, at a step chosen in advance."""
    task: str
    after_step: int
    done: bool = False

    def watch(self, name, line, running):
        event = events.parse(line) if name == "worker0" else None
        if self.done or not event or event["event"] != "progress" or event["steps_done"] < self.after_step:
            return
        self.done = True
        print(f"launch: fault: killing {self.task} after step {event['steps_done']}", file=sys.stderr, flush=True)
        victim = running.get(self.task)
        if victim:
            os.killpg(victim.pid, signal.SIGKILL)


def _copy_output(name, stream, lock, watch, running):
    for line in stream:
        if watch:
            watch(name, line, running)
        with lock:
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()


def run_tasks(tasks, starter, grace_seconds=5.0, poll_seconds=0.1, watch=None):
    """Runs `tasks` to the end. Returns 0 when all succeed; otherwise names the first task that failed, stops
    the others and returns its exit status (2 stays 2: bad input; anything else becomes 1). Ctrl-C stops
    every task and returns 130. `watch(task name, line, {task name: its process})`, if given, sees every line of
    output as it comes."""
    lock = threading.Lock()
    running, readers = {}, []
    try:
        for task in tasks:
            process = starter.start(task)
            running[task.name] = process
            reader = threading.Thread(target=_copy_output, args=(task.name, process.stdout, lock, watch, running),
                                      daemon=True)
            reader.start()
            readers.append(reader)
        status = 0
        while running and not status:
            for name, process in list(running.items()):
                code = process.poll()
                if code is None:
                    continue
                del running[name]
                if code != 0:
                    how = (f"was killed by signal {-code}" if code < 0 else
                           f"was killed by signal {code - 128} (status {code})" if 128 < code < 128 + 65 else
                           f"exited with status {code}")  # 128 + N: killed on its host (lifeline.py, a shell)
                    print(f"launch: task {name} {how}; stopping {', '.join(running) or 'nothing else'}",
                          file=sys.stderr, flush=True)
                    status = 2 if code == 2 else 1
            time.sleep(poll_seconds)
        return status
    except KeyboardInterrupt:
        print(f"launch: interrupted; stopping {', '.join(running)}", file=sys.stderr, flush=True)
        return 130
    finally:
        starter.stop_all(list(running.values()), grace_seconds)
        for reader in readers:
            reader.join(timeout=grace_seconds)
