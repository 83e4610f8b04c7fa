"""Stage lines of long commands (`cmlm_tf.progress.Stages`): a line only for a long silence,
naming the stage that runs, from a fake clock and from the real timer thread."""

import re
import time

from cmlm_tf import progress
from tests.conftest import FakeClock


class ManualTimers:
    """`Stages`' timers on a fake clock: `advance(seconds)` moves the clock and fires, in
    order, every timer that falls due meanwhile (no thread, no sleep)."""

    def __init__(self, clock):
        self.clock = clock
        self.pending = []  # [due, callback, cancelled]

    def __call__(self, delay, callback):
        timer = self.Timer([self.clock.now + delay, callback, False])
        self.pending.append(timer.entry)
        return timer

    class Timer:
        def __init__(self, entry):
            self.entry = entry

        def cancel(self):
            self.entry[2] = True

    def advance(self, seconds):
        end = self.clock.now + seconds
        while True:
            due = [entry for entry in self.pending if not entry[2] and entry[0] <= end]
            if not due:
                break
            entry = min(due, key=lambda item: item[0])
            entry[2] = True
            self.clock.now = entry[0]
            entry[1]()
        self.clock.now = end


def _stages(command, **kwargs):
    clock = FakeClock()
    timers = ManualTimers(clock)
    return progress.Stages(command, clock=clock, start_timer=timers, **kwargs), timers


def test_stage_lines_only_for_long_stages(capsys):
    stage, timers = _stages("export", after=10.0, every=20.0)
    stage("reading the checkpoint")
    timers.advance(3.0)  # quick: no line
    stage("converting to TFLite")  # silent 10 s at its 7th second, then every 20 s
    timers.advance(36.0)
    stage.done()
    stage("writing README.md")
    timers.advance(9.0)  # quick again, the silence counted from done()
    stage.done()
    timers.advance(100.0)  # nothing after the end
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["export: converting to TFLite (7 s so far)",
                     "export: converting to TFLite (27 s so far)"], lines


def test_quick_stages_in_a_row_do_not_add_up_to_a_long_silence(capsys):
    """Four 4 s stages: no stage lasts 10 s, together they do. One line, naming the stage
    that is running when it prints, with that stage's own time (never `0 s so far`)."""
    stage, timers = _stages("export", after=10.0, every=20.0)
    for what in ("reading the checkpoint", "restoring the encoder",
                 "saving encoder/ and preprocessor/", "saving serving/1"):
        stage(what)
        timers.advance(4.0)
    stage.done()
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["export: saving encoder/ and preprocessor/ (2 s so far)"], lines
    # Silence past 10 s when a stage starts: its line waits until it has run 1 s.
    stage, timers = _stages("export", after=10.0, every=20.0)
    stage("reading the checkpoint")
    timers.advance(9.9)
    stage("restoring the encoder")
    timers.advance(0.5)
    stage("saving encoder/ and preprocessor/")  # starts 10.4 s into the silence
    timers.advance(0.9)
    assert capsys.readouterr().err == ""
    timers.advance(0.2)
    stage.done()
    assert capsys.readouterr().err.splitlines() == [
        "export: saving encoder/ and preprocessor/ (1 s so far)"]


def test_stage_lines_from_the_real_timer(capsys):
    """The default timer thread prints while the stage runs (no fixed wait: the test polls
    until the line comes, however slow the machine)."""
    stage = progress.Stages("export", after=0.01, every=3600.0)
    stage("converting to TFLite")
    try:
        deadline = time.monotonic() + 3600  # a safety net
        err = ""
        while "converting to TFLite" not in err and time.monotonic() < deadline:
            time.sleep(0.01)
            err += capsys.readouterr().err
    finally:
        stage.done()
    assert re.fullmatch(r"export: converting to TFLite \(\d+ s so far\)\n", err), err
