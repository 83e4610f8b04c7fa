r"""Training driver on Model Garden's `official.core` (Task, registry, trainer) and Orbit.

    python -m cmlm_tf.train --experiment=cmlm_tf/cmlm --config_file=cmlm_tiny \
        --mode=train --model_dir=runs/cmlm_tiny [--params_override=trainer.train_steps=40] \
        [--tpu=grpc://...]

`--config_file` takes a packaged recipe's name (`cmlm_tiny`) or a YAML file, repeatable;
`--params_override` then applies `a.b=1,c=2`. Rerunning the same command resumes from the
last readable checkpoint in `--model_dir` (global step, optimizer state, and the input
where it stopped); raising `trainer.train_steps` continues a finished run. One trainer at a
time may use a `--model_dir` (a lock file). `runtime.distribution_strategy` is
`one_device`, `mirrored` (with `runtime.num_gpus`), `multi_worker_mirrored` (TF_CONFIG) or
`tpu`. Before the run starts, a SentencePiece tokenizer without a model file gets one
learned from the task's data (`prepare_vocabulary`).
"""

import argparse
import contextlib
import os
import sys
import time
from typing import List, Optional

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

MODES = ("train", "eval", "train_and_eval")


def build_parser() -> argparse.ArgumentParser:
    from cmlm_tf import cli, experiments, names

    listing = "\n".join(f"  {name:22s} {what}" for name, what in experiments.EXPERIMENTS.items())
    parser = cli.ArgumentParser(
        prog="python -m cmlm_tf.train",
        description="Train or evaluate a cmlm_tf experiment (Model Garden driver).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"experiments:\n{listing}\n\npackaged recipes (--config_file NAME): "
               f"{', '.join(names.recipe_names())}\n\n"
               "Rerunning the same command resumes from the last readable checkpoint.")
    parser.add_argument("--experiment", required=True, metavar="NAME",
                        help="registered experiment (listed below)")
    parser.add_argument("--mode", required=True, choices=MODES)
    parser.add_argument("--model_dir", required=True,
                        help="checkpoints, params.yaml and TensorBoard summaries go here")
    parser.add_argument("--config_file", action="append", default=[],
                        help="packaged recipe name or YAML file; repeat to stack them "
                             "(applied in order)")
    parser.add_argument("--params_override", default="",
                        help="a.b=1,c.d=x (applied last), a YAML mapping, or a YAML file")
    parser.add_argument("--tpu", default="", help="Cloud TPU name or grpc:// address")
    return parser


def build_params(experiment: str, config_files: Optional[List[str]] = None,
                 params_override: str = "", tpu: str = ""):
    """The experiment's registered config, then YAML files, then overrides; strict."""
    from official.core import exp_factory

    from cmlm_tf import configs, experiments

    experiments.register()
    if experiment not in experiments.EXPERIMENTS:
        raise ValueError(f"--experiment: unknown experiment {experiment!r} (registered: "
                         f"{', '.join(experiments.EXPERIMENTS)})")
    params = exp_factory.get_exp_config(experiment)
    params = configs.load_experiment_config(config_files, params_override, base=params)
    if tpu:
        params.override({"runtime": {"tpu": tpu}}, is_strict=True)
    try:
        params.validate()
    except (KeyError, ValueError) as e:
        raise ValueError(f"invalid config: {str(e).splitlines()[0]}") from None
    configs.validate_run_config(params)
    params.lock()
    return params


def prepare_vocabulary(params, model_dir: str):
    """The run's SentencePiece model, learned before the config is written and locked.

    When `task.model.tokenizer.type` is sentencepiece, its `sp_model_file` is empty and the
    task says what text to learn from (`SentenceTask.sentencepiece_corpus`; BGT: both sides
    of its pairs), trains `MODEL_DIR/sp.model` with `cmlm_tf.build_vocab.train_sentencepiece`
    unless an earlier start of the run wrote it, and returns params that name it, with
    `task.model.encoder.vocab_size` its piece count, so `params.yaml` records both (an
    existing `MODEL_DIR/sp.model` is named for any task). Otherwise returns `params`
    unchanged.
    """
    import tensorflow as tf
    from absl import logging
    from official.core import task_factory

    from cmlm_tf import build_vocab, tokenization
    from cmlm_tf.tasks import base

    tokenizer = params.task.model.tokenizer
    if tokenizer.type != "sentencepiece" or tokenizer.sp_model_file:
        return params
    sp_model_file = os.path.join(os.path.abspath(model_dir), tokenization.SP_MODEL_FILE)
    if not tf.io.gfile.exists(sp_model_file):
        corpus = task_factory.get_task_cls(type(params.task)).sentencepiece_corpus(params.task)
        if corpus is None:
            return params
        sentences, max_pieces = corpus
        pieces = build_vocab.train_sentencepiece(sentences, sp_model_file, max_pieces,
                                                 lower_case=tokenizer.lower_case)
        logging.info("Trained a SentencePiece model of %d pieces (asked for at most %d) on "
                     "the task's training text: %s", pieces, max_pieces, sp_model_file)
    params = params.replace(task=base.with_run_sentencepiece(params.task, model_dir))
    params.lock()
    return params


def check_learning_rate(params, start_step: int) -> None:
    """Stops a run that would train its remaining steps at learning rate 0.

    That happens when a finished run is resumed with a larger `trainer.train_steps` while
    its schedule's decay (set explicitly) ended earlier, or when a short run's warm-up lasts
    as long as its decay. The error ends with the `--params_override` that fixes it.
    """
    from official.modeling import optimization

    if start_step >= params.trainer.train_steps:
        return
    schedule = optimization.OptimizerFactory(params.trainer.optimizer_config)\
        .build_learning_rate()
    # Not only the first step: a linear warm-up starts at 0.
    probes = {start_step, start_step + 1, (start_step + params.trainer.train_steps) // 2}
    if max(float(schedule(step)) for step in probes) > 0.0:
        return
    learning_rate = params.trainer.optimizer_config.learning_rate
    field = f"trainer.optimizer_config.learning_rate.{learning_rate.type}"
    decay = getattr(learning_rate.get(), "decay_steps", None)
    warmup = params.trainer.optimizer_config.warmup
    warmup_steps = getattr(warmup.get(), "warmup_steps", None) if warmup.type else None
    if decay and warmup_steps and warmup_steps >= decay:
        # A linear warm-up ramps towards the decayed rate at its last step: 0 here. A tenth
        # of the decay is the tiny recipes' proportion (configs/labse_tiny.sh).
        warmup_field = f"trainer.optimizer_config.warmup.{warmup.type}.warmup_steps"
        raise ValueError(
            f"the learning rate is 0 for the whole run: the warm-up ({warmup_field} = "
            f"{warmup_steps}) is not shorter than the decay ({field}.decay_steps = {decay}); "
            f"shorten the warm-up (with your other overrides): "
            f"--params_override={warmup_field}={max(1, decay // 10)}")
    if decay is None:
        raise ValueError(
            f"the learning rate is 0 from step {start_step} on, so steps {start_step}-"
            f"{params.trainer.train_steps} would train nothing: set a positive {field}")
    raise ValueError(
        f"the learning rate is 0 from step {start_step} on ({field}.decay_steps is {decay}), "
        f"so steps {start_step}-{params.trainer.train_steps} would train nothing: make the "
        f"decay follow trainer.train_steps (with your other overrides): "
        f"--params_override={field}.decay_steps=0")


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
        from absl import logging

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
def _ctrl_c_between_chunks():
    """While the training loop runs, a first Ctrl-C (SIGINT) stops it after the current
    chunk of steps (at most a few seconds), where the loop raises KeyboardInterrupt itself:
    never inside a lock, a log line or a timer of the loop. A second Ctrl-C interrupts at
    once. Outside the main thread (no signal handlers there), nothing changes."""
    import signal
    import threading

    stop = _StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def request(signum, frame):
        stop.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = signal.signal(signal.SIGINT, request)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _trainer_class():
    import tensorflow as tf
    from official.core import base_trainer

    from cmlm_tf import cli

    class ThroughputTrainer(base_trainer.Trainer):
        """Adds `examples_per_second` to the logged and summarised training outputs, and
        runs each loop in chunks with a `Heartbeat` line (on the chief)."""

        _compiled = False

        def train(self, num_steps):
            """Orbit's `StandardTrainer.train`, the loop function called per chunk."""
            self.train_loop_begin()
            if self._train_loop_fn is None:
                self._train_loop_fn = self.create_train_loop_fn()
            if self._train_iter is None:
                self._train_iter = tf.nest.map_structure(iter, self.train_dataset)
            heartbeat = self._heartbeat()
            step = int(self.global_step.numpy())
            heartbeat.begin(step)
            slow = cli.Stages("training", after=SLOW_CHUNK_SECONDS,
                              every=SLOW_CHUNK_SECONDS) if _chief() else None
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
                    log=None if _chief() else (lambda text: None))
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

    return ThroughputTrainer


def _runner_class():
    import tensorflow as tf
    from absl import logging
    from official.core import train_lib

    from cmlm_tf import disk, run_dir

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
            with disk.reporting_disk_full(f"{self._checkpoint_prefix}-{int(number)}"):
                return super().save(checkpoint_number=checkpoint_number,
                                    check_interval=check_interval, options=options)

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
                    raise ValueError(f"--mode must be one of {MODES}, got {self._mode!r}")
                try:
                    if self._mode == "train":
                        self.controller.train(steps=trainer_params.train_steps)
                    else:
                        self.controller.train_and_evaluate(
                            train_steps=trainer_params.train_steps,
                            eval_steps=trainer_params.validation_steps,
                            eval_interval=trainer_params.validation_interval)
                except KeyboardInterrupt:
                    self._save_stopped("interrupted")
                    raise
                except EmptyEvaluationError:
                    self._save_stopped("evaluation refused")
                    raise
                self._close_train_input()
            return self.trainer.model, {}

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
            path = manager.save(checkpoint_number=step, check_interval=False)
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

    return Runner


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

    from absl import logging

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


def _chief() -> bool:
    """Whether this process is the chief of a multi-worker run (or the only worker)."""
    import json

    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task") or {}
    if not task:
        return True
    if task.get("type") == "chief":
        return True
    has_chief = "chief" in (config.get("cluster") or {})
    return task.get("type") == "worker" and int(task.get("index", 0)) == 0 and not has_chief


def _log_once():
    """Orbit logs and prints every block of metrics, as NumPy scalars: log it once, as plain
    numbers."""
    from absl import logging

    try:
        from orbit import controller
    except ImportError:
        return
    if getattr(controller, "_cmlm_tf_quiet", False):
        return

    def format_output(output, indent=4):
        if not isinstance(output, dict):
            return str(output)
        return " ".join(f"{key} {_plain(value)}" for key, value in sorted(output.items()))

    controller._log = logging.info
    controller._format_output = format_output
    controller._cmlm_tf_quiet = True


def _plain(value) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{number:.6g}"


def report_malformed_records(model_dir: str, step: int) -> None:
    """Logs how many malformed records the input pipelines skipped and writes each count
    as a `input/malformed_records/<field>` summary (TensorBoard, under `model_dir/train`)."""
    import tensorflow as tf

    from cmlm_tf.data import records

    totals = records.log_totals()
    if not totals or not _chief():
        return
    with tf.summary.create_file_writer(os.path.join(model_dir, "train")).as_default():
        for _, field, count in totals:
            tf.summary.scalar(f"input/malformed_records/{field}", count, step=step)


def run(params, model_dir: str, mode: str = "train", strategy=None):
    """Trains and/or evaluates; returns (model, eval logs)."""
    import tensorflow as tf
    import tf_keras
    from absl import logging
    from official.common import distribute_utils
    from official.core import task_factory, train_utils
    from official.modeling import performance

    from cmlm_tf import disk, run_dir
    from cmlm_tf.data import pipeline
    from cmlm_tf.training import steps

    if mode not in MODES:
        raise ValueError(f"--mode must be one of {MODES}, got {mode!r}")
    _log_once()
    started = time.perf_counter()
    training = "train" in mode
    lock = run_dir.RunLock(model_dir)
    if training and _chief():
        try:
            tf.io.gfile.makedirs(model_dir)
        except tf.errors.OpError as e:
            raise ValueError(f"--model_dir {model_dir}: cannot create it "
                             f"({e.message.splitlines()[0]})") from None
        if not os.access(model_dir, os.W_OK) and run_dir.is_local(model_dir):
            raise ValueError(f"--model_dir {model_dir}: not writable")
        lock.acquire()
    try:
        if _chief():
            run_dir.remove_temp_checkpoints(model_dir)
            latest = run_dir.recover_latest_checkpoint(model_dir)
        else:
            latest = tf.train.latest_checkpoint(model_dir)
        start_step = run_dir.checkpoint_step(latest)
        params = prepare_vocabulary(params, model_dir)
        runtime = params.runtime
        if strategy is None:
            strategy = distribute_utils.get_distribution_strategy(
                distribution_strategy=runtime.distribution_strategy,
                all_reduce_alg=runtime.all_reduce_alg, num_gpus=runtime.num_gpus,
                tpu_address=runtime.tpu)
        # `runtime.mixed_precision_dtype: bfloat16` (CPU with AMX, TPU, GPU) or `float16`
        # (GPU; create_trainer then wraps the optimizer in loss scaling). The tasks cast
        # logits and losses to float32. The Keras policy is process-global: restored when
        # training ends.
        previous_policy = tf_keras.mixed_precision.global_policy()
        if runtime.mixed_precision_dtype:
            performance.set_mixed_precision_policy(runtime.mixed_precision_dtype)
        try:
            # The training input continues where the restored checkpoint left it; a finished
            # run (no step left to train) reads none of it, so it skips nothing.
            resume_step = start_step if training and \
                start_step < params.trainer.train_steps else 0
            with strategy.scope(), pipeline.resuming_at(resume_step):
                task = task_factory.get_task(params.task, logging_dir=model_dir)
                if runtime.enable_xla:
                    steps.compile_steps(task, runtime)
                trainer = train_utils.create_trainer(
                    params, task, train=training, evaluate="eval" in mode,
                    checkpoint_exporter=None, trainer_cls=_trainer_class())
            if training:
                # After the data (a bad input file is the first thing to report), before
                # params.yaml: a refused run leaves the run directory as it was.
                check_learning_rate(params, start_step)
                run_dir.write_params(params, model_dir)
            # Summaries and the checkpoint state: a full disk names the run folder
            # (checkpoint saves name their own prefix).
            with disk.reporting_disk_full(model_dir):
                result = _runner_class()(
                    distribution_strategy=strategy, task=task, mode=mode, params=params,
                    model_dir=model_dir, trainer=trainer).run()
        finally:
            tf_keras.mixed_precision.set_global_policy(previous_policy)
        if training:
            with disk.reporting_disk_full(model_dir):
                report_malformed_records(model_dir, int(trainer.global_step.numpy()))
            logging.info("finished: step %d in %s (%.0f s); latest checkpoint %s",
                         int(trainer.global_step.numpy()), model_dir,
                         time.perf_counter() - started,
                         os.path.basename(tf.train.latest_checkpoint(model_dir) or "none"))
        return result
    finally:
        lock.release()


def main(argv=None) -> int:
    from cmlm_tf import cli

    cli.quiet_tensorflow_logs()
    args = build_parser().parse_args(argv)

    def body():
        from cmlm_tf import experiments, names

        # Typos stop here, before TensorFlow is imported (under a second).
        if args.experiment not in experiments.EXPERIMENTS:
            # Compared without the shared `cmlm_tf/`, which would make every name look close.
            short = {name.rpartition("/")[2]: name for name in experiments.EXPERIMENTS}
            close = [short[name] for name in
                     names.closest(args.experiment.rpartition("/")[2], list(short))]
            raise cli.UsageError(
                f"--experiment {args.experiment}: unknown experiment"
                + (f"; did you mean {' or '.join(close)}?" if close else "")
                + f" (registered: {', '.join(experiments.EXPERIMENTS)})")
        for name in args.config_file:
            names.check_recipe(name)
        from absl import flags, logging

        flags.FLAGS.mark_as_parsed()  # absl logging without absl.app: no flags of its own
        logging.use_absl_handler()
        logging.set_verbosity(logging.INFO)
        params = build_params(args.experiment, args.config_file, args.params_override,
                              args.tpu)
        run(params, args.model_dir, args.mode)

    return cli.run_main(body)


def console_main() -> None:
    """`python -m cmlm_tf.train` and `cmlm-tf-train`: `main`, then the process ends as soon
    as its output is flushed, without Python's teardown. By then every file is written
    and closed (checkpoints, params.yaml, summaries: Orbit flushes its writers), the run
    lock is released, and what is left is freeing memory: the training input's tf.data
    threads (`release_in_background`) and hundreds of thousands of Python objects, which
    took from seconds to a minute on 2 busy cores, also after Ctrl-C."""
    import logging

    from absl import logging as absl_logging

    code = main()
    absl_logging.flush()
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    console_main()
