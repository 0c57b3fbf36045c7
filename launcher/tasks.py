"""What a task is, and the one place where a run's tasks are started, watched and stopped: a dead task takes
the run down at once, named. docs/architecture.md ("The launcher") describes it."""
import dataclasses
import os
import signal
import sys
import threading
import time

import harness
from harness import events
from harness.checkpoints import FAULT_ENV

TASKS_PEAK_MEMORY = "the tasks' peak resident memory"


@dataclasses.dataclass
class Task:
    """What to run: a name ("worker1", "ps0"), a command line, extra environment and a host; a starter is how.
    `untag(name, line)`: (the task that wrote a line, the line), for a task that speaks for several (mpirun)."""
    name: str
    argv: list
    env: dict = dataclasses.field(default_factory=dict)
    host: str = "127.0.0.1"
    untag: object = None


def place(num_workers, num_ps, hosts=None, machines=1):
    """(host of each worker, host of each parameter server): the workers fill `hosts`' slots in order and the
    parameter servers go round the hosts; without `hosts`, the workers are spread in blocks over `machines`
    loopback addresses (127.0.0.1, 127.0.0.2...), which --local_aggregation groups as machines."""
    if not hosts:
        return [f"127.0.0.{1 + i * machines // num_workers}" for i in range(num_workers)], ["127.0.0.1"] * num_ps
    slots = [host for host, count in hosts for _ in range(count)]
    if len(slots) < num_workers:
        raise harness.UsageError(f"--hosts: {len(slots)} slots for {num_workers} workers")
    return slots[:num_workers], [hosts[i % len(hosts)][0] for i in range(num_ps)]


@dataclasses.dataclass
class Fault:
    """A crash on purpose (--fault): SIGKILL to `task`'s process group ("ps0", "worker1") or to the launcher itself
    ("launcher"), once the chief's "progress" event (every --log_every steps) says `after_step` steps are done (the
    chief waits there to be killed: events.FAULT_STEP), or `after_seconds` after the tasks started; with
    `checkpoint` ((step, stage)), the chief kills itself at that stage of writing that checkpoint
    (checkpoints.FAULT_ENV). `text`: as the flag gave it."""
    text: str
    task: str
    after_step: int = None
    after_seconds: float = None
    checkpoint: tuple = None
    done: bool = False
    steps_done: int = 0
    started: float = None

    def env(self, name):
        """The environment task `name` needs for this fault: the chief's checkpoint to die in, or its step to wait
        after until the fault comes."""
        if name != "worker0":
            return {}
        if self.checkpoint:
            return {FAULT_ENV: "{}:{}".format(*self.checkpoint)}
        return {events.FAULT_STEP: str(self.after_step)} if self.after_step is not None else {}

    def watch(self, name, line, running):
        event = events.parse(line) if name == "worker0" else None
        if event and event["event"] == "progress":
            self.steps_done = event["steps_done"]
            if self.after_step is not None and self.steps_done >= self.after_step:
                self.kill(running, f"after step {self.steps_done}")

    def poll(self, running):
        self.started = self.started or time.monotonic()
        if self.after_seconds is not None and time.monotonic() - self.started >= self.after_seconds:
            self.kill(running, f"{self.after_seconds:g} s after the start, "
                               f"{f'after step {self.steps_done}' if self.steps_done else 'before the first step'}")

    def kill(self, running, when):
        if self.done:
            return
        self.done = True
        print(f"launch: fault: killing {self.task} {when}", file=sys.stderr, flush=True)
        if self.task == "launcher":
            os.kill(os.getpid(), signal.SIGKILL)  # its tasks must follow it (lifeline.die_with_parent)
        victim = running.get(self.task)
        if victim:
            os.killpg(victim.pid, signal.SIGKILL)


def _copy_output(task, stream, lock, watch, running, peaks):
    for line in stream:
        name, line = task.untag(task.name, line) if task.untag else (task.name, line)
        if watch:
            watch(name, line, running)
        if line.startswith(events.MARKER):  # the launcher's, not the reader's
            continue
        if peak := harness.PEAK_MEMORY.match(line):  # shown with the others' at the end
            peaks[name] = int(peak[1].replace(",", ""))
            continue
        with lock:
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()


def run_tasks(tasks, starter, grace_seconds=5.0, poll_seconds=0.1, watch=None, poll=None):
    """Runs `tasks` to the end; returns 0 if all succeed, else names the first that failed, stops the others
    and returns 2 if it exited 2 (bad input), else 1; 130 on Ctrl-C. `watch(name, line, {name: process})` sees
    every output line as it comes, `poll({name: process})` is called every `poll_seconds`. The tasks' peak memory
    is one line at the end."""
    lock = threading.Lock()
    running, readers, peaks = {}, [], {}
    hosts = {task.name: task.host for task in tasks}
    try:
        for task in tasks:
            process = starter.start(task)
            running[task.name] = process
            reader = threading.Thread(target=_copy_output, args=(task, process.stdout, lock, watch, running, peaks),
                                      daemon=True)
            reader.start()
            readers.append(reader)
        status = 0
        while running and not status:
            if poll:
                poll(running)
            for name, process in list(running.items()):
                code = process.poll()
                if code is None:
                    continue
                del running[name]
                if code != 0:
                    how = (f"was killed by signal {-code}" if code < 0 else
                           f"was killed by signal {code - 128} (status {code})" if 128 < code < 128 + 65 else
                           f"exited with status {code}")  # 128 + N: killed on its host (lifeline.py, a shell)
                    print(f"launch: task {name}{starter.where(hosts[name])} {how}; stopping "
                          f"{', '.join(running) or 'nothing else'}", file=sys.stderr, flush=True)
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
        if peaks:
            print(f"launch: {TASKS_PEAK_MEMORY}: " + ", ".join(f"{name} {mib:,d} MiB" for name, mib in peaks.items()),
                  file=sys.stderr, flush=True)
