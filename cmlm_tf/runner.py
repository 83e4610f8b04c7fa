"""The training driver's parts on Model Garden's trainer and runner and Orbit's controller.

- `Heartbeat`: progress lines (steps/s, examples/s, ETA) and the size of each chunk of steps;
- `ThroughputTrainer`: Model Garden's `base_trainer.Trainer` running each loop in chunks,
  with the heartbeat, `examples_per_second`, Ctrl-C between chunks and no evaluation over
  zero examples (`EmptyEvaluationError`);
- `CheckpointManager`: restores with one log line and reports a full disk by its checkpoint;
- `Runner`: Model Garden's `OrbitExperimentRunner` with that manager, a checkpoint of the
  step reached when training stops early, and the training input freed in the background
  (`release_in_background`);
- `orbit_logs_once`: Orbit's metric lines logged once, as plain numbers, without its restore
  lines and steps/s (the project logs its own), inside a block;
- `report_malformed_records`: the count of skipped records, logged and summarised.

`cmlm_tf.train` builds the params and the task and runs these; it imports this module only
when it trains, so its `--help` and argument errors come before TensorFlow.
"""

import contextlib
import json
import os
import re
import time

import tensorflow as tf
from absl import logging
from official.core import base_trainer, train_lib

from cmlm_tf import disk, progress, run_dir

# Training progress: a heartbeat line about this often (seconds of wall time; the
# environment variable CMLM_TF_HEARTBEAT_SECONDS changes it) and at the end of every loop.
# The loop runs in chunks of about CHUNK_SECONDS (at most a quarter of the interval), so a
# long `trainer.steps_per_loop` cannot hold a line back, and a chunk that runs longer than
# SLOW_CHUNK_SECONDS (the first compiles; a step may be slow) says so from a timer thread:
# lines stay under 30 s apart.
HEARTBEAT_SECONDS = 15.0
CHUNK_SECONDS = 3.0
SLOW_CHUNK_SECONDS = 10.0


def _duration(seconds: float) -> str:
    """`1h02m`, `4m05s`, `12s`."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Heartbeat:
    """Training progress as one plain line each (`log`, absl's logging.info by default):

        progress: step 300/1200 (25%), 2.41 steps/s, 77.1 examples/s, ETA 6m13s

    `chunk(remaining)` says how many steps the next call of the training loop may run so
    that it takes about `chunk_seconds` (1 while the speed is unknown: the first call
    compiles); `after(step, loop_end)` logs a line when `interval` seconds have passed since
    the last one, at the end of every loop, and once `chunk_seconds` of steps after the
    first are measured (the first ETA, early in a long run). Rates are over the steps since
    the last line; the first call's compilation is reported on its own and left out of them.
    """

    def __init__(self, train_steps: int, global_batch_size: int,
                 interval: float = HEARTBEAT_SECONDS, chunk_seconds: float = CHUNK_SECONDS,
                 clock=time.perf_counter, log=None):
        self.train_steps = train_steps
        self.global_batch_size = global_batch_size
        self.interval = interval
        self.chunk_seconds = chunk_seconds
        self.clock = clock
        self.log = log
        self._window = None  # (time, step) the rates are measured from
        self._last_line = None
        self._step_seconds = None  # the latest chunk's time per step
        self._chunk_steps = 1
        self._chunk_start = None
        self._estimated = False  # whether a line has given the rate and ETA yet

    def begin(self, step: int) -> None:
        """Called before a loop's first chunk."""
        now = self.clock()
        if self._window is None:
            self._window = (now, step)
            self._last_line = now
            self._emit(f"training from step {step} to {self.train_steps}; the first step "
                       "compiles the model")
        self._chunk_start = (now, step)

    def chunk(self, remaining: int) -> int:
        if self._step_seconds is None:
            return min(1, remaining)
        steps = int(self.chunk_seconds / max(self._step_seconds, 1e-9))
        # At most 4x the last chunk: one fast chunk does not commit to a long one.
        return max(1, min(remaining, steps, 4 * self._chunk_steps))

    def after(self, step: int, loop_end: bool = False) -> None:
        """Called after each chunk with the global step reached."""
        now = self.clock()
        start_time, start_step = self._chunk_start
        if step > start_step:
            first = self._step_seconds is None
            self._step_seconds = (now - start_time) / (step - start_step)
            self._chunk_steps = step - start_step
            if first:
                self._emit(f"first training step done in {_duration(now - start_time)} "
                           "(tracing and compiling included)")
                self._window = (now, step)
                self._last_line = now
        self._chunk_start = (now, step)
        # The first estimate comes once `chunk_seconds` of steps after the compiling one are
        # measured, not an interval later: a long run gives its ETA as soon as it can.
        window_time, window_step = self._window
        first_estimate = not self._estimated and step > window_step and \
            now - window_time >= self.chunk_seconds
        if loop_end or first_estimate or now - self._last_line >= self.interval:
            self._progress(now, step)

    def _progress(self, now: float, step: int) -> None:
        window_time, window_step = self._window
        elapsed = now - window_time
        text = f"progress: step {step}/{self.train_steps} " \
               f"({100.0 * step / max(self.train_steps, 1):.0f}%)"
        if step > window_step and elapsed > 0:
            rate = (step - window_step) / elapsed
            eta = _duration(max(self.train_steps - step, 0) / rate)
            text += f", {rate:.3g} steps/s, {rate * self.global_batch_size:.3g} " \
                    f"examples/s, ETA {eta}"
            self._window = (now, step)
            self._estimated = True
        self._last_line = now
        self._emit(text)

    def _emit(self, text: str) -> None:
        if self.log is not None:
            self.log(text)
            return
        logging.info("%s", text)


def _heartbeat_seconds() -> float:
    text = os.environ.get("CMLM_TF_HEARTBEAT_SECONDS", "")
    if not text:
        return HEARTBEAT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(f"CMLM_TF_HEARTBEAT_SECONDS must be a positive number of seconds, "
                         f"got {text!r}")
    return seconds


class EmptyEvaluationError(ValueError):
    """An evaluation found no complete batch in `task.validation_data`."""

    def __init__(self, data_config, field: str = "task.validation_data"):
        batch_size = data_config.global_batch_size
        path = getattr(data_config, "input_path", "") or "(no input_path)"
        remainder = "the last, partial batch is dropped (drop_remainder: true)" \
            if data_config.drop_remainder else "no example was read"
        super().__init__(
            f"{field}.input_path {path}: no batch of {field}.global_batch_size="
            f"{batch_size} examples to evaluate ({remainder}); metrics over zero examples "
            f"are not reported: use a smaller {field}.global_batch_size or a larger file")


class _StopRequest:
    """Whether Ctrl-C asked the training loop to stop (true once it did)."""

    def __init__(self):
        self.requested = False

    def __bool__(self):
        return self.requested


@contextlib.contextmanager
def _deferred_ctrl_c(second_interrupts: bool = True):
    """Inside the block, Ctrl-C (SIGINT) only records the request (the yielded object is
    true once it came); the caller stops where it is safe. With `second_interrupts`, a
    second Ctrl-C interrupts at once; otherwise every one waits for the block's end.
    Outside the main thread (no signal handlers there), nothing changes."""
    import signal
    import threading

    stop = _StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def request(signum, frame):
        stop.requested = True
        if second_interrupts:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = signal.signal(signal.SIGINT, request)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_between_chunks():
    """While the training loop runs, a first Ctrl-C stops it after the current chunk of
    steps (at most a few seconds), where the loop raises KeyboardInterrupt itself: never
    inside a lock, a log line or a timer of the loop. A second Ctrl-C interrupts at once."""
    return _deferred_ctrl_c(second_interrupts=True)


def create_optimizer_slots(optimizer, variables) -> None:
    """Creates `optimizer`'s slot variables for `variables` now, as its first
    `apply_gradients` would. The first trace of the train loop then creates no variable, and
    `tf.function` traces it once: a trace that creates variables is traced again without
    them, which doubled the tracing before every first step. (Keras' legacy optimizers,
    Model Garden's, do it in `_create_all_weights`; the newer ones in `build`.)"""
    if hasattr(optimizer, "_create_all_weights"):
        optimizer._create_all_weights(variables)
    else:
        optimizer.build(variables)


class ThroughputTrainer(base_trainer.Trainer):
    """Adds `examples_per_second` to the logged and summarised training outputs, and
    runs each loop in chunks with a `Heartbeat` line (on the chief)."""

    _compiled = False

    def train(self, num_steps):
        """Orbit's `StandardTrainer.train`, the loop function called per chunk."""
        self.train_loop_begin()
        if self._train_loop_fn is None:
            create_optimizer_slots(self.optimizer, self.model.trainable_variables)
            self._train_loop_fn = self.create_train_loop_fn()
        if self._train_iter is None:
            self._train_iter = tf.nest.map_structure(iter, self.train_dataset)
        heartbeat = self._heartbeat()
        step = int(self.global_step.numpy())
        heartbeat.begin(step)
        slow = progress.Stages("training", after=SLOW_CHUNK_SECONDS,
                               every=SLOW_CHUNK_SECONDS) if is_chief() else None
        remaining = int(num_steps)
        with _ctrl_c_between_chunks() as stop:
            while remaining > 0:
                steps = heartbeat.chunk(remaining)
                if slow is not None:
                    slow(f"steps {step + 1}-{step + steps} of {heartbeat.train_steps}"
                         + ("; the first compiles the model" if not self._compiled
                            else ""))
                try:
                    self._train_loop_fn(self._train_iter, tf.constant(steps, tf.int32))
                finally:
                    if slow is not None:
                        slow.done()
                self._compiled = True
                remaining -= steps
                step = int(self.global_step.numpy())
                heartbeat.after(step, loop_end=remaining == 0)
                if stop:
                    raise KeyboardInterrupt
        return self.train_loop_end()

    def _heartbeat(self) -> Heartbeat:
        if getattr(self, "_cmlm_heartbeat", None) is None:
            interval = _heartbeat_seconds()
            self._cmlm_heartbeat = Heartbeat(
                self.config.trainer.train_steps,
                self.config.task.train_data.global_batch_size, interval=interval,
                chunk_seconds=min(CHUNK_SECONDS, interval / 4),
                log=None if is_chief() else (lambda text: None))
        return self._cmlm_heartbeat

    def train_loop_begin(self):
        self._loop_start = (time.perf_counter(), int(self.global_step.numpy()))
        super().train_loop_begin()

    def eval_end(self, aggregated_logs=None):
        # Every validation step updates the validation loss: a count of 0 means no
        # batch was evaluated, and the metrics would be zeros over zero examples.
        if int(self.validation_loss.count.numpy()) == 0:
            raise EmptyEvaluationError(self.config.task.validation_data)
        return super().eval_end(aggregated_logs)

    def train_loop_end(self):
        logs = super().train_loop_end()
        start_time, start_step = self._loop_start
        steps = int(self.global_step.numpy()) - start_step
        elapsed = max(time.perf_counter() - start_time, 1e-9)
        batch = self.config.task.train_data.global_batch_size
        logs["examples_per_second"] = steps * batch / elapsed
        return logs


class SaveInterrupted(KeyboardInterrupt):
    """Ctrl-C came during a checkpoint save, which finished first; `path` is the checkpoint
    it wrote (None when the interval skipped it)."""

    def __init__(self, path):
        super().__init__(path)
        self.path = path


class CheckpointManager(tf.train.CheckpointManager):
    """Restores with a one-line log; values a run does not use now (a finished run's
    optimizer slots, another stage's heads) are not reported as failures."""

    def restore_or_initialize(self):
        latest = self._latest_checkpoint
        if latest is None:
            # Orbit's controller asks more than once; the task's initialisation (a
            # warm start) runs, and is logged, only the first time.
            if not getattr(self, "_initialized", False):
                self._initialized = True
                if self._init_fn is not None:
                    self._init_fn()
                logging.info("no checkpoint in %s: starting at step 0", self.directory)
            return None
        self._checkpoint.restore(latest).expect_partial()
        if self._checkpoint_interval is not None:
            self._last_checkpoint_step = int(self._step_counter.numpy())
        logging.info("restored step %d from %s", int(self._step_counter.numpy()),
                     os.path.basename(latest))
        return latest

    def save(self, checkpoint_number=None, check_interval: bool = True, options=None):
        """Saves as tf.train.CheckpointManager does; a full disk is one error naming
        the checkpoint (the previous ones stay: nothing is pruned before a save ends)."""
        number = checkpoint_number if checkpoint_number is not None else \
            int(self._step_counter.numpy())
        # Ctrl-C waits for the whole save: the files, their recording in the `checkpoint`
        # state and the pruning of old ones. Then it stops the run (KeyboardInterrupt).
        with _deferred_ctrl_c(second_interrupts=False) as stop:
            with disk.reporting_disk_full(f"{self._checkpoint_prefix}-{int(number)}"):
                path = super().save(checkpoint_number=checkpoint_number,
                                    check_interval=check_interval, options=options)
        if stop:
            raise SaveInterrupted(path)
        return path


class Runner(train_lib.OrbitExperimentRunner):
    """Model Garden's runner, with the checkpoint manager above and without counting
    FLOPs after training (a profiler pass that can take minutes on large models)."""

    def _maybe_build_checkpoint_manager(self):
        manager = super()._maybe_build_checkpoint_manager()
        if manager is None:
            return None
        return CheckpointManager(
            self.trainer.checkpoint, directory=manager.directory,
            max_to_keep=manager._max_to_keep, step_counter=self.trainer.global_step,
            checkpoint_interval=self.params.trainer.checkpoint_interval,
            init_fn=self.trainer.initialize)

    def run(self):
        trainer_params = self.params.trainer
        with self.strategy.scope():
            if self._mode == "eval":
                return self.trainer.model, self.controller.evaluate(
                    steps=trainer_params.validation_steps)
            if self._mode not in ("train", "train_and_eval"):
                raise ValueError(f"--mode {self._mode!r}: not eval, train or train_and_eval")
            try:
                if self._mode == "train":
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
            except EmptyEvaluationError:
                self._save_stopped("evaluation refused")
                raise
            self._close_train_input()
        return self.trainer.model, {}

    def _evaluate_unfinished(self):
        """A run whose training is done but whose final evaluation never finished (a Ctrl-C
        or a refusal during it) evaluates now: Orbit evaluates only after training steps."""
        step = int(self.trainer.global_step.numpy())
        if step < self.params.trainer.train_steps or not is_chief() or \
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
        if manager is None or step == 0 or run_dir.checkpoint_step(latest) == step:
            logging.info("%s at step %d: latest checkpoint %s in %s", reason, step,
                         os.path.basename(latest or "none"), self.model_dir)
            return
        started = time.perf_counter()
        try:
            path = manager.save(checkpoint_number=step, check_interval=False)
        except SaveInterrupted as again:  # a second Ctrl-C: the save finished regardless
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
        if getattr(self.trainer, "_train_iter", None) is None:
            return None
        # The list holds the only reference: no frame here keeps the iterator alive.
        box = [self.trainer._train_iter]
        self.trainer._train_iter = None
        return release_in_background(box, "the training input pipeline")


def check_evaluation_input(trainer, field: str = "task.validation_data") -> None:
    """Reads one batch of the trainer's evaluation input: a `train_and_eval` whose
    evaluation could not run is refused before it trains (`EmptyEvaluationError`)."""
    dataset = trainer.eval_dataset
    if dataset is None:
        return
    try:
        next(iter(dataset))
    except (StopIteration, tf.errors.OutOfRangeError):
        raise EmptyEvaluationError(trainer.config.task.validation_data, field) from None


def release_in_background(box: list, what: str):
    """Empties `box` in a daemon thread, so that the destructors of what it holds (a
    tf.data iterator stopping its threads) do not hold up the caller; returns the thread.

    `box` must hold the only references (a local variable of the caller would keep its
    value alive, and the caller would free it). Logs how long it took when over 5 s. Python
    joins the thread before its own teardown (an atexit hook): a daemon thread still inside
    TensorFlow when the interpreter finalises could crash the exit. `console_main` ends the
    process without that teardown, so it waits for nothing.
    """
    import atexit
    import threading

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


def is_chief() -> bool:
    """Whether this process is the chief of a multi-worker run (or the only worker)."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task") or {}
    if not task:
        return True
    if task.get("type") == "chief":
        return True
    has_chief = "chief" in (config.get("cluster") or {})
    return task.get("type") == "worker" and int(task.get("index", 0)) == 0 and not has_chief


@contextlib.contextmanager
def orbit_logs_once():
    """Orbit logs and prints every block of metrics, as NumPy scalars: inside this block it
    logs them once, as plain numbers; what it did before is restored after."""
    from orbit import controller

    def format_output(output, indent=4):
        if not isinstance(output, dict):
            return str(output)
        return " ".join(f"{key} {_plain(value)}" for key, value in sorted(output.items()))

    saved = controller._log, controller._format_output
    controller._log, controller._format_output = _orbit_line, format_output
    try:
        yield
    finally:
        controller._log, controller._format_output = saved


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
    from cmlm_tf.data import records

    totals = records.log_totals(reports)
    if not totals or not is_chief():
        return
    with tf.summary.create_file_writer(os.path.join(model_dir, "train")).as_default():
        for _, field, count in totals:
            tf.summary.scalar(f"input/malformed_records/{field}", count, step=step)
