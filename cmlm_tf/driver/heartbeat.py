"""Training progress lines: steps/s, examples/s and the ETA about every
`HEARTBEAT_SECONDS` (`CMLM_TF_HEARTBEAT_SECONDS`), and the size of each chunk of steps the
training loop runs between two lines (`Heartbeat`)."""

import os
import time

from absl import logging

# Training progress: a heartbeat line about this often (seconds of wall time; the
# environment variable CMLM_TF_HEARTBEAT_SECONDS changes it) and at the end of every loop.
# The loop runs in chunks of about CHUNK_SECONDS (at most a quarter of the interval), so a
# long `trainer.steps_per_loop` cannot hold a line back, and a chunk that runs longer than
# SLOW_CHUNK_SECONDS (the first compiles; a step may be slow) says so from a timer thread:
# lines stay under 30 s apart.
HEARTBEAT_SECONDS = 15.0
CHUNK_SECONDS = 3.0
SLOW_CHUNK_SECONDS = 10.0


def duration(seconds: float) -> str:
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
                 *, interval: float = HEARTBEAT_SECONDS, chunk_seconds: float = CHUNK_SECONDS,
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

    def after(self, step: int, *, loop_end: bool = False) -> None:
        """Called after each chunk with the global step reached."""
        now = self.clock()
        start_time, start_step = self._chunk_start
        if step > start_step:
            first = self._step_seconds is None
            self._step_seconds = (now - start_time) / (step - start_step)
            self._chunk_steps = step - start_step
            if first:
                self._emit(f"first training step done in {duration(now - start_time)} "
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
            eta = duration(max(self.train_steps - step, 0) / rate)
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


def heartbeat_seconds() -> float:
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
