"""make soak: does a long run survive crashes, bit for bit? tf, horovod and parallax each train under a seeded
schedule of crashes, resumed after each from the latest complete checkpoint as a user or Slurm would restart it,
and each must end with the parameters of an uninterrupted run of the same steps.

    python -m bench.soak --minutes=20 --seed=1          (make soak MINUTES=20 SEED=1)
    python -m bench.soak --rounds=1 --runners=tf        (each kind of crash once)

Every round crashes each run once in each way of KINDS, in an order drawn from the seed; rounds start until
--minutes are up, then each run is finished and an uninterrupted run of the same steps trained beside it. After
every crash no process of the run may be left, no traceback printed, no incomplete checkpoint taken for a complete
one, and at most checkpoints.KEEP complete checkpoints kept. It prints the crashes survived, the steps and seconds
lost, and writes <results_dir>/soak.json. docs/cluster.md ("A chaos soak") explains the choices.
"""
import harness.determinism  # noqa: F401  (first: checkpoints_compare loads TensorFlow)
import collections
import os
import re
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np

import harness
from harness import REPO, checkpoints, flags, results
from harness.checkpoints import Checkpoints

import checkpoints_compare

# Each kind of crash, and what it does.
KINDS = {
    "task": "kill -9 of a worker, a parameter server or the chief after a step",
    "checkpoint": "the chief killed writing a checkpoint: after its state, its variables or its marker",
    "twice": "two tasks killed, one after the other, between the same two checkpoints",
    "launcher": "kill -9 of the launcher; its tasks must follow it",
    "resume": "a resumed run killed before its first step (a task or the launcher)",
}
RUNNERS = ("tf", "horovod", "parallax")
SAVE_EVERY = 10  # steps between checkpoints: a crash costs at most this many
UNTIL_STOPPED = 10**6  # --steps of the crashed launches: the run's length is decided when the time is up
LAUNCH_TIMEOUT = 600  # seconds; a launch that takes longer hangs
LEFT_BEHIND_SECONDS = 10  # how long a crashed run's processes may take to go (the launcher's grace is 5 s)
FIRST_STEP_SECONDS = 3.0  # the first guess at when a resumed run's first step comes, refined as launches go


def parse_flags(argv=None):
    parser = flags.parser("bench.soak", __doc__)
    for name in ("steps", "warmup_steps", "run_name", "log_every", "events"):  # the soak's to decide
        delattr(parser, name)
    parser.set_default("ckpt_dir", os.path.join("checkpoints", "soak"))
    flags.DEFINE_float("minutes", 20, "rounds of crashes start until this many minutes have passed", lower_bound=0,
                       flag_values=parser)
    flags.DEFINE_integer("rounds", None, "at most this many rounds (default: as many as --minutes allow)",
                         lower_bound=1, flag_values=parser)
    flags.DEFINE_names("runners", list(RUNNERS), "the architectures soaked, at once", parser, known=RUNNERS)
    flags.DEFINE_integer("workers", 2, "workers of every run", lower_bound=1, flag_values=parser)
    flags.DEFINE_integer("ps", 1, "parameter-server tasks (tf, parallax)", lower_bound=1, flag_values=parser)
    args = flags.parse(parser, argv)
    args.ckpt_dir = os.path.abspath(args.ckpt_dir)  # in every process's command line: how leftovers are found
    return args


class Launch:
    """One start of the launcher, as its output tells it: where it resumed, how far it got, the crash."""

    def __init__(self, resumed_from, status, lines, seconds, first_step_seconds):
        self.resumed_from, self.status, self.lines = resumed_from, status, lines
        self.seconds, self.first_step_seconds = seconds, first_step_seconds
        self.said_resumed_from = self.find(r"resume: from \S+ \(after step (\d+)\)")
        self.last_step = max([int(s) for s in re.findall(r"^\[worker0\] \[\S+\] step (\d+)/", "".join(lines), re.M)]
                             or [self.resumed_from])
        self.killed = self.find(r"launch: fault: killing (.*)") or self.find(r"checkpoint: fault: killing (.*)")
        self.before_first_step = "before the first step" in (self.killed or "")

    def find(self, pattern):
        return next((m[1] for m in (re.search(pattern, line) for line in self.lines) if m), None)


class Chain:
    """One architecture's run, crashed and resumed round after round; `problems` lists what went wrong."""

    def __init__(self, args, runner):
        self.args, self.runner = args, runner
        self.rng = np.random.default_rng([args.seed, RUNNERS.index(runner)])
        self.work = os.path.join(args.ckpt_dir, runner)
        self.ckpt_dir = os.path.join(self.work, "checkpoints")
        self.tasks = [f"worker{w}" for w in range(args.workers)] + (
            [f"ps{p}" for p in range(args.ps)] if runner != "horovod" else [])
        self.launches, self.crashes, self.problems = [], [], []
        self.most_checkpoints = self.rounds = self.steps = 0
        self.seconds_crashed = self.seconds_uninterrupted = 0.0
        self.compared = None
        self.first_step_guess = FIRST_STEP_SECONDS

    def say(self, text):
        print(f"soak: {self.runner}: {text}", flush=True)

    def complete(self):
        """The steps of the run's complete checkpoints."""
        return [steps for steps, _ in Checkpoints(SimpleNamespace(ckpt_dir=self.ckpt_dir, save_every=SAVE_EVERY),
                                                  None, 0).complete()]

    def position(self):
        """The step the run would resume from: its newest complete checkpoint's (0: none)."""
        return max(self.complete(), default=0)

    def command(self, fault=None, steps=UNTIL_STOPPED, ckpt_dir=None, resume=False):
        ps = [f"--ps={self.args.ps}"] if self.runner != "horovod" else []
        return [sys.executable, "-m", "launcher", self.runner, f"--workers={self.args.workers}", *ps,
                *([f"--fault={fault}"] if fault else []), "--",
                *flags.passed_on(self.args, ("model", "config", "batch_size", "seed", "data_path",
                                             "intra_op_threads", "inter_op_threads")),
                f"--steps={steps}", "--warmup_steps=0", "--log_every=1", f"--save_every={SAVE_EVERY}",
                f"--ckpt_dir={ckpt_dir or self.ckpt_dir}", f"--results_dir={os.path.join(self.work, 'results')}",
                *(["--resume"] if resume else [])]

    def launch(self, kind, fault=None, steps=UNTIL_STOPPED, ckpt_dir=None):
        """Start the launcher (resuming if a complete checkpoint is there), wait for it, check what it left."""
        start = self.position() if ckpt_dir is None else 0
        argv = self.command(fault, steps, ckpt_dir, resume=start > 0)
        log_path = os.path.join(self.work, f"launch-{len(self.launches) + 1}.log")
        started, lines, first_step = time.monotonic(), [], None
        with open(log_path, "w") as log:
            process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       errors="replace", env={**os.environ, "PYTHONPATH": REPO})
            timer = threading.Timer(LAUNCH_TIMEOUT, process.kill)
            timer.start()
            for line in process.stdout:
                log.write(line)
                lines.append(line)
                if first_step is None and re.match(r"\[worker0\] \[\S+\] step \d+/", line):
                    first_step = time.monotonic() - started
            status = process.wait()
            timer.cancel()
        done = Launch(start, status, lines, time.monotonic() - started, first_step)
        self.launches.append(done)
        expected = 0 if fault is None else -9 if fault.startswith("launcher:") else 1
        if time.monotonic() - started >= LAUNCH_TIMEOUT:
            self.problems.append(f"{log_path}: hung for {LAUNCH_TIMEOUT} s")
        elif status != expected:
            self.problems.append(f"{log_path}: exited {status}, not {expected} ({kind}, --fault={fault})")
        if done.said_resumed_from not in (None, str(start)):
            self.problems.append(f"{log_path}: resumed from step {done.said_resumed_from}, not from the newest "
                                 f"complete checkpoint's {start}")
        if any("Traceback" in line for line in lines):
            self.problems.append(f"{log_path}: a traceback")
        self.check_left_behind(log_path)
        self.check_checkpoints(log_path)
        self.say(f"launch {len(self.launches)} ({kind}{f', --fault={fault}' if fault else ''}): from step "
                 f"{done.resumed_from}, to step {done.last_step}" + (f", killed {done.killed}" if done.killed else "")
                 + f", {done.seconds:.1f} s")
        return done

    def check_left_behind(self, log_path):
        """Every process of this run (its directory is in their command lines) gone, or killed and named."""
        deadline = time.monotonic() + LEFT_BEHIND_SECONDS
        while (left := processes_of(self.work)) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid, command in left:
            self.problems.append(f"{log_path}: left behind: pid {pid}: {command[:200]}")
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass

    def check_checkpoints(self, log_path):
        steps = {int(m[1]) for m in (re.match(r"model\.ckpt-(\d+)", name) for name in os.listdir(self.ckpt_dir))
                 if m} if os.path.isdir(self.ckpt_dir) else set()
        self.most_checkpoints = max(self.most_checkpoints, len(steps))
        if len(steps) > checkpoints.KEEP + 1:  # the complete ones kept, and one being written
            self.problems.append(f"{log_path}: {len(steps)} checkpoints on disk ({sorted(steps)})")

    def crash(self, kind, fault):
        """One launch crashed by `fault`; returns it."""
        launch = self.launch(kind, fault)
        self.crashes.append({"kind": kind, "fault": fault, "resumed_from": launch.resumed_from,
                             "last_step": launch.last_step, "killed": launch.killed, "seconds": launch.seconds})
        return launch

    def step_after(self, start, most):
        return start + int(self.rng.integers(1, most + 1))

    def task(self):
        self.crash("task", f"{self.rng.choice(self.tasks)}:{self.step_after(self.position(), 2 * SAVE_EVERY)}")

    def checkpoint(self):
        step = self.position() + SAVE_EVERY * int(self.rng.integers(1, 3))
        self.crash("checkpoint", f"checkpoint:{step}:{self.rng.choice(checkpoints.STAGES)}")
        if step in self.complete():
            self.problems.append(f"the checkpoint after step {step}, killed while written, is taken as complete")

    def twice(self):
        start = self.position()
        for _ in range(2):
            self.crash("twice", f"{self.rng.choice(self.tasks)}:{self.step_after(start, SAVE_EVERY - 2)}")
        self.crashes[-1]["held"] = self.crashes[-2]["held"] = self.position() == start

    def launcher(self):
        self.crash("launcher", f"launcher:{self.step_after(self.position(), 2 * SAVE_EVERY)}")

    def resume(self):
        victim = self.rng.choice([*self.tasks, "launcher"])
        launch = self.crash("resume", f"{victim}:{self.rng.uniform(0, self.first_step_guess):.2f}s")
        self.crashes[-1]["held"] = launch.before_first_step
        if not launch.before_first_step:  # it came too late: aim earlier
            self.first_step_guess *= 0.7

    def soak(self, deadline, rounds):
        """Crash the run round after round until `deadline` (time.monotonic()) or `rounds`, then finish it; what
        goes wrong in the soak itself is a problem too."""
        try:
            self.rounds_of_crashes(deadline, rounds)
        except Exception as error:  # (in a thread of its own: it would be lost)
            self.problems.append(f"the soak stopped: {type(error).__name__}: {error}")

    def rounds_of_crashes(self, deadline, rounds):
        self.crash("task", f"{self.rng.choice(self.tasks)}:{self.step_after(SAVE_EVERY, SAVE_EVERY)}")  # a checkpoint
        done = 0
        while time.monotonic() < deadline and (rounds is None or done < rounds):
            for kind in self.rng.permutation(list(KINDS)):
                getattr(self, kind)()
                first = [launch.first_step_seconds for launch in self.launches[-1:] if launch.first_step_seconds]
                self.first_step_guess = min([self.first_step_guess, *first])
            done += 1
        self.steps = self.position() + SAVE_EVERY
        finished = self.launch("finish", steps=self.steps)
        uninterrupted = self.launch("uninterrupted", steps=self.steps,
                                    ckpt_dir=os.path.join(self.work, "uninterrupted"))
        self.rounds, self.seconds_uninterrupted = done, uninterrupted.seconds
        self.seconds_crashed = sum(launch.seconds for launch in self.launches[:-1])
        if finished.status == 0 and uninterrupted.status == 0:
            self.compared = checkpoints_compare.compare(os.path.join(self.work, "uninterrupted"), self.ckpt_dir)
            if not self.compared["identical"]:
                self.problems.append(f"the final parameters differ from the uninterrupted run's: max |diff| "
                                     f"{self.compared['max_abs_diff']}")

    def record(self):
        survived = collections.Counter(c["kind"] for c in self.crashes if c.get("held", True))
        survived["twice"] //= 2  # a pair of crashes each
        trained = sum(launch.last_step - launch.resumed_from for launch in self.launches[:-1])
        return {"runner": self.runner, "rounds": self.rounds, "steps": self.steps, "launches": len(self.launches),
                "survived": {kind: survived[kind] for kind in KINDS}, "crashes": self.crashes,
                "steps_lost": trained - self.steps, "seconds": self.seconds_crashed,
                "seconds_uninterrupted": self.seconds_uninterrupted,
                "seconds_lost": self.seconds_crashed - self.seconds_uninterrupted,
                "most_checkpoints_on_disk": self.most_checkpoints,
                "identical": bool(self.compared and self.compared["identical"]), "problems": self.problems}


def processes_of(marker):
    """(pid, command line) of every process whose command line holds `marker`, this one's excepted."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in command and int(pid) != os.getpid():
            found.append((int(pid), command))
    return found


def main():
    args = parse_flags()
    os.makedirs(args.results_dir, exist_ok=True)
    path = os.path.join(args.results_dir, results.SOAK)
    if os.path.exists(path):
        os.remove(path)  # an earlier soak's verdict must not stand for this one
    chains = [Chain(args, runner) for runner in args.runners]
    for chain in chains:
        os.makedirs(chain.work, exist_ok=True)
    deadline = time.monotonic() + 60 * args.minutes
    threads = [threading.Thread(target=chain.soak, args=(deadline, args.rounds)) for chain in chains]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = [chain.record() for chain in chains]
    passed = all(r["identical"] and not r["problems"] for r in records)
    print(f"\nsoak: model {args.model}, {args.config} config, seed {args.seed}, {args.workers} workers, "
          f"{args.minutes:g} minutes; crashes survived, by kind:")
    print(f"{'runner':10s}" + "".join(f"{kind:>11s}" for kind in KINDS) + f"{'steps':>7s}{'redone':>7s}"
          f"{'s lost':>8s}{'ckpts':>6s}  final parameters")
    for r in records:
        print(f"{r['runner']:10s}" + "".join(f"{r['survived'][kind]:11d}" for kind in KINDS)
              + f"{r['steps']:7d}{r['steps_lost']:7d}{r['seconds_lost']:8.0f}{r['most_checkpoints_on_disk']:6d}  "
              + ("identical to the uninterrupted run's" if r["identical"] else "NOT IDENTICAL"))
        for problem in r["problems"]:
            print(f"soak: {r['runner']}: PROBLEM: {problem}")
    results.write_json(path, {"config": {"model": args.model, "config": args.config, "seed": args.seed,
                                         "workers": args.workers, "ps": args.ps, "minutes": args.minutes,
                                         "save_every": SAVE_EVERY, "keep": checkpoints.KEEP},
                              "runners": records, "passed": passed}, "soak")
    print(f"soak: {'PASSED' if passed else 'FAILED'}; {path}")
    return 0 if passed else 1


if __name__ == "__main__":
    harness.main(main)
