"""Progress of a long command on stderr: which stage runs, and for how long (`Stages`).

Nothing here imports TensorFlow: a command starts its timer before TensorFlow loads, which
takes seconds on busy cores.
"""

import sys
import threading
import time
from typing import Callable, Optional


class Stages:
    """Says on stderr which stage of a long command is running, while it runs.

    A timer prints `command: what (N s so far)` for the running stage, N being that stage's
    own time: first once the stage has lasted `after` seconds, then every `every` seconds.
    So that quick stages in a row do not leave a long silence, a stage that starts after
    the command has been silent for `after` seconds (since this object was made, its last
    line or the last `done()`) gets its line once it has run for `min_age` seconds (1 s):
    a line never names a stage that has only just begun, nor counts another stage's time.
    A quick command or a one-line error prints nothing more.

        stage = Stages("export"); stage("converting to TFLite"); ...; stage.done()
        -> export: converting to TFLite (10 s so far)

    Call `done()` when the command ends, also when it fails. `clock` (seconds) and
    `start_timer(delay, callback)` (returns an object with `cancel()`) are injectable for
    tests; by default `time.perf_counter` and a daemon `threading.Timer`.
    """

    def __init__(self, command: str, *, after: float = 10.0, every: float = 20.0,
                 min_age: float = 1.0, clock: Optional[Callable[[], float]] = None,
                 start_timer: Optional[Callable[[float, Callable[[], None]], object]] = None):
        self.command = command
        self.after = after
        self.every = every
        self.min_age = min(min_age, after)
        self._clock = clock or time.perf_counter
        self._start_timer = start_timer or _daemon_timer
        self._lock = threading.Lock()
        self._current = None  # (generation, what, started)
        self._generation = 0
        self._timer = None
        self._quiet_since = self._clock()  # the last line, the last done(), or the start

    def __call__(self, what: str) -> None:
        with self._lock:
            self._generation += 1
            now = self._clock()
            self._current = (self._generation, what, now)
            silent_until = self._quiet_since + self.after
            self._arm(min(self.after, max(silent_until - now, self.min_age)))

    def done(self) -> None:
        """Ends the current stage; the next one counts its silence from here."""
        with self._lock:
            self._generation += 1
            self._current = None
            self._quiet_since = self._clock()
            self._cancel()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, delay: float) -> None:
        self._cancel()
        generation = self._generation
        self._timer = self._start_timer(delay, lambda: self._report(generation))

    def _report(self, generation: int) -> None:
        with self._lock:
            if self._current is None or self._current[0] != generation:
                return  # a later stage began, or the command ended
            _, what, started = self._current
            now = self._clock()
            print(f"{self.command}: {what} ({now - started:.0f} s so far)",
                  file=sys.stderr, flush=True)
            self._quiet_since = now
            self._arm(self.every)


def _daemon_timer(delay: float, callback: Callable[[], None]):
    """`callback` after `delay` seconds on a daemon thread (never holds up the exit)."""
    timer = threading.Timer(delay, callback)
    timer.daemon = True
    timer.start()
    return timer
