"""Periodic checkpoints (--save_every) and resuming from the latest complete one (--resume), bit for bit, as all else
step N depends on comes from (seed, N); docs/outputs.md lists the files, docs/cluster.md explains."""
import glob
import json
import os
import re
import shutil
import signal
import time

import numpy as np

from harness import UsageError

# The complete checkpoints kept: older ones, and every incomplete one older than the newest, are removed.
KEEP = 3
# "STEP:STAGE" in the chief's environment (the launcher's --fault=checkpoint:STEP:STAGE): it kills itself with
# SIGKILL at that point of writing that checkpoint. The stages, in the order they are written:
FAULT_ENV = "CHECKPOINT_FAULT"
STAGES = ("state", "variables", "marker")  # after the state file, after the Saver's files, before the rename
# The flags whose values shape what a run computes (those a runner has), and the worker count.
SHAPING_FLAGS = ("model", "config", "seed", "batch_size", "data_path", "partitions", "partition_strategy",
                 "average_sparse", "local_aggregation", "sparse_as_dense", "reduction")


class Checkpoints:
    """A run's checkpoints; with saver None (the launcher's, without TensorFlow) only `resumable` works."""

    def __init__(self, args, saver, num_workers, workers_flag="--workers"):
        """`num_workers`: the workers whose shards a step combines, as the flag `workers_flag` gives them."""
        self.directory, self.save_every, self.saver = args.ckpt_dir, args.save_every, saver
        self.save_step = getattr(args, "save_step", 0)
        self.shape = {flag: getattr(args, flag) for flag in SHAPING_FLAGS if hasattr(args, flag)}
        self.shape["workers"] = num_workers
        self.workers_flag = workers_flag

    def prefix(self, steps):
        return os.path.join(self.directory, f"model.ckpt-{steps}")

    def due(self, steps_done, last_step):
        """Whether a checkpoint is due after `steps_done` steps; not after the last (the Recorder saves that one)."""
        periodic = bool(self.save_every) and steps_done % self.save_every == 0
        return (periodic or steps_done == self.save_step) and steps_done < last_step

    def save(self, session, steps_done, state):
        """Write the checkpoint after `steps_done` steps (`state`: the global batch's, or None); its run.json, renamed
        into place last, marks it complete. A failed write ends the run with one line; earlier ones stay usable."""
        import tensorflow as tf  # (the runner has loaded it)
        prefix, started = self.prefix(steps_done), time.perf_counter()
        try:
            _remove(prefix + ".run.json")  # a checkpoint written again is incomplete until its marker is
            if state is not None:
                np.save(prefix + ".state.npy", state)
            _fault_point(steps_done, "state")
            self.saver.save(session, os.path.join(self.directory, "model.ckpt"), global_step=steps_done,
                            write_meta_graph=False)
            _fault_point(steps_done, "variables")
            with open(prefix + ".run.json.partial", "w") as f:
                json.dump({"steps_done": steps_done, "stateful": state is not None, **self.shape}, f)
            _fault_point(steps_done, "marker")
            os.replace(prefix + ".run.json.partial", prefix + ".run.json")
        except (OSError, tf.errors.OpError) as error:
            latest = self.complete()
            raise SystemExit(f"checkpoint: cannot write {prefix} ({_why(error)}); the latest complete one is "
                             f"{self.prefix(latest[0][0]) if latest else 'none'}")
        size = sum(os.path.getsize(path) for path in glob.glob(prefix + ".*"))
        print(f"checkpoint: {prefix} after step {steps_done}: {size / 1e6:.2f} MB in "
              f"{time.perf_counter() - started:.3f} s", flush=True)
        self.prune()

    def prune(self):
        """Remove every checkpoint but the KEEP newest complete ones, any newer and --save_step's, whichever run wrote
        them: a run restarted many times keeps a bounded disk, and no incomplete checkpoint lingers behind a complete
        one."""
        kept = [steps for steps, _ in self.complete()[:KEEP]]
        for path in glob.glob(os.path.join(self.directory, "model.ckpt-*")):
            steps = int(re.match(r"model\.ckpt-(\d+)", os.path.basename(path))[1])
            if kept and steps not in kept and steps < kept[0] and steps != self.save_step:
                _remove(path)

    def complete(self):
        """[(steps done, its record)] of every complete checkpoint whose marker can be read, newest first."""
        found = []
        for marker in glob.glob(os.path.join(self.directory, "model.ckpt-*.run.json")):
            prefix = marker[:-len(".run.json")]
            try:
                with open(marker) as f:
                    record = json.load(f)
            except (OSError, ValueError):
                continue  # unreadable: an earlier one serves
            if os.path.exists(prefix + ".index") and (not record.get("stateful", True)
                                                      or os.path.exists(prefix + ".state.npy")):
                found.append((record["steps_done"], record))
        return sorted(found, key=lambda item: -item[0])

    def resumable(self):
        """The complete checkpoints, newest first; UsageError when there is none or the newest has other flags."""
        candidates = self.complete()
        if not candidates:
            raise UsageError(f"--resume: no complete checkpoint in {self.directory} (--save_every writes them)")
        steps_done, record = candidates[0]
        for flag, value in self.shape.items():
            if record.get(flag) != value:
                name = self.workers_flag if flag == "workers" else f"--{flag}"
                raise UsageError(f"--resume: {name}={value}, but the checkpoint after step {steps_done} in "
                                 f"{self.directory} was written with {record.get(flag)}")
        return candidates

    def restore(self, session):
        """Restore the newest readable complete checkpoint; return (the step to continue from, its state or None)."""
        import tensorflow as tf  # (the runner has loaded it)
        for steps_done, record in self.resumable():
            prefix = self.prefix(steps_done)
            try:
                self.saver.restore(session, prefix)
                state = np.load(prefix + ".state.npy") if record.get("stateful", True) else None
            except (OSError, ValueError, tf.errors.OpError) as error:
                print(f"resume: {prefix} cannot be read ({_why(error)}); trying an earlier one", flush=True)
                continue
            print(f"resume: from {prefix} (after step {steps_done})", flush=True)
            return steps_done, state
        raise UsageError(f"--resume: no checkpoint in {self.directory} can be read")


def _fault_point(steps_done, stage):
    if os.environ.get(FAULT_ENV) == f"{steps_done}:{stage}":
        print(f"checkpoint: fault: killing this task writing the one after step {steps_done}, after its {stage}",
              flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # a crash in the middle of the write, asked for (--fault)


def _remove(path):
    """Remove a file, or a directory (the Saver's *_temp), if it is there."""
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def _why(error):
    """An error's own message, on one line (TensorFlow's str() adds the stack of the op's definition)."""
    message = getattr(error, "message", None) or str(error)  # OpError.message: without that stack
    return " ".join(message.split())[:300]
