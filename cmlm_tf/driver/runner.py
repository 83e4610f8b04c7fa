"""The training driver's runner on Model Garden's `OrbitExperimentRunner`: the checkpoint
manager of `checkpoint_manager.py`, a checkpoint of the step reached when training stops
early, the final evaluation remembered, the training input freed in the background
(`release_in_background`); Orbit's metric lines logged once, as plain numbers
(`orbit_logs_once`); and the count of skipped records (`report_malformed_records`).

`cmlm_tf.commands.train` builds the params and the task and runs these with the trainer of
`chunked_trainer.py`; it imports them only when it trains, so its `--help` and argument
errors come before TensorFlow.
"""

import atexit
import contextlib
import os
import re
import threading
import time

import tensorflow as tf
from absl import logging

from cmlm_tf import distributed
from cmlm_tf.data import records
from cmlm_tf.driver import checkpoint_manager, chunked_trainer, run_checkpoints, run_dir
from cmlm_tf.runtime import internals


class Runner(internals.RunnerBase):
    """Model Garden's runner, with the checkpoint manager above and without counting
    FLOPs after training (a profiler pass that can take minutes on large models)."""

    def replace_checkpoint_manager(self, manager):
        if manager is None:
            return None
        return checkpoint_manager.CheckpointManager(
            self.trainer.checkpoint, directory=manager.directory,
            max_to_keep=internals.max_to_keep(manager), step_counter=self.trainer.global_step,
            checkpoint_interval=self.params.trainer.checkpoint_interval,
            init_fn=self.trainer.initialize)

    def run(self):
        trainer_params = self.params.trainer
        with self.strategy.scope():
            if self.mode == "eval":
                return self.trainer.model, self.controller.evaluate(
                    steps=trainer_params.validation_steps)
            if self.mode not in ("train", "train_and_eval"):
                raise ValueError(f"--mode {self.mode!r}: not eval, train or train_and_eval")
            try:
                if self.mode == "train":
                    self.controller.train(steps=trainer_params.train_steps)
                else:
                    self._evaluate_unfinished()
                    self.controller.train_and_evaluate(
                        train_steps=trainer_params.train_steps,
                        eval_steps=trainer_params.validation_steps,
                        eval_interval=trainer_params.validation_interval)
                    run_dir.record_evaluation(self.model_dir,
                                              int(self.trainer.global_step.numpy()))
            except KeyboardInterrupt:
                self._save_stopped("interrupted")
                raise
            except chunked_trainer.EmptyEvaluationError:
                self._save_stopped("evaluation refused")
                raise
            self._close_train_input()
        return self.trainer.model, {}

    def _evaluate_unfinished(self):
        """A run whose training is done but whose final evaluation never finished (a Ctrl-C
        or a refusal during it) evaluates now: Orbit evaluates only after training steps."""
        step = int(self.trainer.global_step.numpy())
        if step < self.params.trainer.train_steps or not distributed.is_chief() or \
                run_dir.evaluated_step(self.model_dir) == step:
            return
        logging.info("the evaluation of step %d did not finish: evaluating it now", step)
        self.controller.evaluate(steps=self.params.trainer.validation_steps)

    def _save_stopped(self, reason: str):
        """Saves the step reached when training stops early (Ctrl-C, a refused
        evaluation), and says where: the rerun of the same command resumes there
        instead of at the last interval's checkpoint. Steps are whole (Python handles
        the interrupt between two calls of the training loop), and the input resumes
        after the batches of the steps saved."""
        step = int(self.trainer.global_step.numpy())
        manager = self.checkpoint_manager
        latest = manager.latest_checkpoint if manager is not None else None
        if manager is None or step == 0 or run_checkpoints.checkpoint_step(latest) == step:
            logging.info("%s at step %d: latest checkpoint %s in %s", reason, step,
                         os.path.basename(latest or "none"), self.model_dir)
            return
        started = time.perf_counter()
        try:
            path = manager.save(checkpoint_number=step, check_interval=False)
        except checkpoint_manager.SaveInterrupted as again:
            # A second Ctrl-C: the save finished regardless.
            path = again.path
        logging.info("%s at step %d: saved checkpoint %s in %s (%.1f s)", reason, step,
                     os.path.basename(path), self.model_dir,
                     time.perf_counter() - started)

    def _close_train_input(self):
        """Hands the training input to `release_in_background`: freeing the iterator
        (dropping its only reference) is the whole close, and on 2 busy cores it took
        from 0.03 s to 54 s (tf.data stops its reading, featurizing, prefetching and
        autotuning threads first), after the last checkpoint was saved. Returns the
        thread that frees it (None when there is no input to close)."""
        # The list holds the only reference: no frame here keeps the iterator alive.
        box = internals.take_train_input(self.trainer)
        if not box:
            return None
        return release_in_background(box, "the training input pipeline")


def release_in_background(box: list, what: str):
    """Empties `box` in a daemon thread, so that the destructors of what it holds (a
    tf.data iterator stopping its threads) do not hold up the caller; returns the thread.

    `box` must hold the only references (a local variable of the caller would keep its
    value alive, and the caller would free it). Logs how long it took when over 5 s. Python
    joins the thread before its own teardown (an atexit hook): a daemon thread still inside
    TensorFlow when the interpreter finalises could crash the exit. `console_main` ends the
    process without that teardown, so it waits for nothing.
    """
    def release():
        started = time.perf_counter()
        box.clear()
        seconds = time.perf_counter() - started
        if seconds > 5:
            logging.info("released %s in %.0f s, in the background", what, seconds)

    thread = threading.Thread(target=release, name=f"release {what}", daemon=True)
    atexit.register(thread.join)
    thread.start()
    return thread


@contextlib.contextmanager
def orbit_logs_once():
    """Orbit logs and prints every block of metrics, as NumPy scalars: inside this block it
    logs them once, as plain numbers; what it did before is restored after."""

    def format_output(output, indent=4):
        if not isinstance(output, dict):
            return str(output)
        return " ".join(f"{key} {_plain(value)}" for key, value in sorted(output.items()))

    with internals.orbit_log_functions(_orbit_line, format_output):
        yield


# Orbit's lines that repeat the project's own: its restore lines (CheckpointManager logs
# one), and its steps/s (the heartbeat's figure is over the same steps, without the
# compilation and the checkpoints Orbit's timer counts).
_ORBIT_RESTORE_LINES = ("restoring or initializing model", "restoring model from",
                        "restored model from", "restored from checkpoint")


def _orbit_line(message: str) -> None:
    if message.startswith(_ORBIT_RESTORE_LINES):
        return
    logging.info("%s", re.sub(r" \| steps/sec: *[0-9.]+", "", message))


def _plain(value) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{number:.6g}"


def report_malformed_records(model_dir: str, step: int, reports: list) -> None:
    """Logs how many malformed records the input pipelines skipped and writes each count
    as a `input/malformed_records/<field>` summary (TensorBoard, under `model_dir/train`)."""
    totals = records.log_totals(reports)
    if not totals or not distributed.is_chief():
        return
    with tf.summary.create_file_writer(os.path.join(model_dir, "train")).as_default():
        for _, field, count in totals:
            tf.summary.scalar(f"input/malformed_records/{field}", count, step=step)
