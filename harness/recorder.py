"""Everything a run leaves behind, written by the chief (rank 0) only: the steps log, the summary, TensorBoard's
scalars and the final checkpoint. docs/outputs.md describes each file."""
import dataclasses
import glob
import json
import os
import time

from harness import determinism  # noqa: F401  (before TensorFlow: it fixes TensorFlow's kernels)
import tensorflow as tf  # noqa: E402

import harness
from harness import environment, events, models, results, update
from harness.timer import ThroughputTimer


class Recorder:
    def __init__(self, args, model, config, runner, num_workers, resumed_at=None):
        """`resumed_at`: the step a resumed run continues from; earlier steps stay in the log and the throughput,
        and the warm-up is left out again after the restart."""
        self.args, self.model, self.config, self.runner, self.num_workers = args, model, config, runner, num_workers
        self.unit = models.unit(model)
        self.resumed_at = resumed_at
        os.makedirs(args.results_dir, exist_ok=True)
        os.makedirs(args.ckpt_dir, exist_ok=True)
        self.summary_path = results.summary_path(args.results_dir, args.run_name)
        steps_path = results.steps_path(args.results_dir, args.run_name)
        kept = self._steps_before(steps_path, resumed_at) if resumed_at is not None else []
        results.write_lines(steps_path, kept, "step")
        self.steps_log = open(steps_path, "a")
        self.tensorboard = tf.compat.v1.summary.FileWriter(results.tensorboard_path(args.results_dir, args.run_name))
        measured_before = kept[args.warmup_steps:]
        warmup = self._warmup_after(resumed_at, measured_before)
        self.timer = ThroughputTimer(warmup, self.unit)
        # The step after which this start's measured steps begin: a resumed run's byte window (NET=) starts after
        # the restart, as the counters before it died with the killed launcher.
        self.measured_from = (resumed_at or 0) + max(warmup, 1)
        for record in measured_before:
            self.timer.keep(record["seconds"], record["words_per_sec"] * record["seconds"])
        self.last_metrics = None
        self.progress_seconds = self.progress_words = 0.0
        self.started = time.time()

    def _warmup_after(self, resumed_at, measured_before):
        """The steps left out after this start: --warmup_steps, or all but the last when a restart leaves no more
        than that and no measured step before it (throughput.warmup_steps records it)."""
        remaining = self.args.steps - (resumed_at or 0)
        if resumed_at is None or measured_before or remaining > self.args.warmup_steps:
            return self.args.warmup_steps
        return remaining - 1

    @staticmethod
    def _steps_before(path, step):
        """The steps log's records before `step`: a run killed after its checkpoint logged steps it trains again."""
        return [record for _, record in results.read_lines(path, "step") if record["step"] < step] \
            if os.path.exists(path) else []

    def step(self, step, objective, seconds, words, **extra):
        """Record one step: the global batch's `objective`, the loop iteration's `seconds`, the `words` it trained."""
        metrics = models.metrics(self.model, self.config, objective)
        self.last_metrics = metrics
        self.timer.record(seconds, words)
        record = {"step": step, **metrics, "seconds": seconds, "words_per_sec": words / seconds,
                  **{k: float(v) for k, v in extra.items()}}
        self.steps_log.write(json.dumps(record) + "\n")
        self.progress_seconds += seconds
        self.progress_words += words
        if (step + 1) % self.args.log_every == 0 or step + 1 == self.args.steps:
            # Every log_every steps: per-step events would wake TensorBoard's writer thread inside the timed loop.
            interval_rate = self.progress_words / self.progress_seconds
            shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())
            print(f"[{self.runner}] step {step + 1}/{self.args.steps}  {shown}  {interval_rate:,.0f} {self.unit}/sec",
                  flush=True)
            scalars = dict(**metrics, words_per_sec=interval_rate, **extra)
            self.tensorboard.add_summary(tf.compat.v1.Summary(value=[
                tf.compat.v1.Summary.Value(tag=k, simple_value=float(v)) for k, v in scalars.items()]), step)
            self.steps_log.flush()
            self.progress_seconds = self.progress_words = 0.0
            if self.args.events:  # the launcher's faults act on it (tasks.Fault)
                events.progress(steps_done=step + 1)
        # The links' bytes over the measured steps (netns.ByteCounter): read here, exactly at these two points.
        if step + 1 == self.measured_from:
            self.announce("measured_steps_begin", after_step=step + 1, ports=events.switch_ports())
        if step + 1 == self.args.steps:
            self.announce("measured_steps_end", after_step=step + 1, ports=events.switch_ports())

    def announce(self, name, **fields):
        """An @event line, where a launcher reads them (--events)."""
        if self.args.events:
            events.announce(name, **fields)

    def finish(self, session, saver, variables, **extra):
        """Write the checkpoint, then the summary (`variables`: placement.describe's); return the summary."""
        prefix = saver.save(session, os.path.join(self.args.ckpt_dir, "model.ckpt"),
                            global_step=self.args.steps, write_meta_graph=False)
        self.steps_log.close()
        self.tensorboard.close()
        throughput = self.timer.summary()
        summary = {
            "runner": self.runner,
            "run_name": self.args.run_name,
            "model": self.model.NAME,
            "model_description": models.description(self.model),
            "config": dataclasses.asdict(self.config),
            "update_rule": update.describe(models.update_rule(self.model, self.config), list(variables)),
            "variables": variables,
            "seed": self.args.seed,
            "data": models.data_source(self.model, self.args.data_path),
            "steps": self.args.steps,
            "final_loss": self.last_metrics["loss"],
            "final_metrics": self.last_metrics,
            "checkpoint": prefix,
            "wall_seconds": time.time() - self.started,  # since the last start
            "resumed_at_step": self.resumed_at,
            "throughput": throughput,
            "peak_resident_bytes": harness.peak_resident_bytes(),  # this task's (the chief's)
            "environment": environment.describe(self.args, self.model, self.config, self.num_workers),
            **extra,
        }
        results.write_json(self.summary_path, summary, "summary")
        print(f"[{self.runner}] {throughput['median']:,.0f} {self.unit}/sec median, central 68% "
              f"[{throughput['p16']:,.0f}, {throughput['p84']:,.0f}] over {throughput['measured_steps']} steps "
              f"after {throughput['warmup_steps']} warm-up; checkpoint {prefix}; results {self.summary_path}",
              flush=True)
        return summary


def remove_stale_outputs(args):
    """Remove the summary and checkpoints (not with --resume) an earlier run left at this run's paths, so that a
    run that fails leaves nothing that looks finished. The chief calls it first."""
    checkpoints = [] if args.resume else [os.path.join(args.ckpt_dir, "checkpoint"),
                                          *glob.glob(os.path.join(args.ckpt_dir, "model.ckpt-*"))]
    for stale in [results.summary_path(args.results_dir, args.run_name), *checkpoints]:
        if os.path.isfile(stale):
            os.remove(stale)

