"""Model Garden's trainer running each training loop in chunks of steps, with a progress line
between chunks (`heartbeat.Heartbeat`), `examples_per_second` in its outputs, Ctrl-C between
chunks, and no evaluation over zero examples (`EmptyEvaluationError`)."""

import time

import tensorflow as tf
from official.core import base_trainer

from cmlm_tf import distributed, progress
from cmlm_tf.driver import deferred_interrupt, heartbeat
from cmlm_tf.runtime import internals


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


class ChunkedTrainer(base_trainer.Trainer):
    """Adds `examples_per_second` to the logged and summarised training outputs, and
    runs each loop in chunks with a `Heartbeat` line (on the chief)."""

    _compiled = False

    def train(self, num_steps):
        """Orbit's `StandardTrainer.train`, the loop function called per chunk."""
        self.train_loop_begin()
        # The optimizer's slots exist before the first trace, which then creates no
        # variable: `tf.function` traces a loop that creates variables twice.
        internals.build_train_loop(self, lambda: internals.create_optimizer_slots(
            self.optimizer, self.model.trainable_variables))
        beat = self._heartbeat()
        step = int(self.global_step.numpy())
        beat.begin(step)
        slow = None
        if distributed.is_chief():
            slow = progress.Stages("training", after=heartbeat.SLOW_CHUNK_SECONDS,
                                   every=heartbeat.SLOW_CHUNK_SECONDS)
        remaining = int(num_steps)
        with deferred_interrupt.ctrl_c_between_chunks() as stop:
            while remaining > 0:
                steps = beat.chunk(remaining)
                if slow is not None:
                    slow(f"steps {step + 1}-{step + steps} of {beat.train_steps}"
                         + ("; the first compiles the model" if not self._compiled
                            else ""))
                try:
                    internals.run_train_loop(self, steps)
                finally:
                    if slow is not None:
                        slow.done()
                self._compiled = True
                remaining -= steps
                step = int(self.global_step.numpy())
                beat.after(step, loop_end=remaining == 0)
                if stop:
                    raise KeyboardInterrupt
        return self.train_loop_end()

    def _heartbeat(self) -> heartbeat.Heartbeat:
        if getattr(self, "_cmlm_heartbeat", None) is None:
            interval = heartbeat.heartbeat_seconds()
            self._cmlm_heartbeat = heartbeat.Heartbeat(
                self.config.trainer.train_steps,
                self.config.task.train_data.global_batch_size, interval=interval,
                chunk_seconds=min(heartbeat.CHUNK_SECONDS, interval / 4),
                log=None if distributed.is_chief() else (lambda text: None))
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
