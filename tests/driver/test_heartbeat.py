"""The training heartbeat (cmlm_tf/driver/heartbeat.py): a progress line every interval within one
long loop, at every loop's end, and an ETA as soon as a chunk after the compiling step is
measured. (Through the driver: tests/driver/test_progress.py.)"""

import re

from cmlm_tf.driver import heartbeat
from tests.conftest import FakeClock

PROGRESS = re.compile(r"progress: step (\d+)/(\d+) \(\d+%\), ([\d.e+]+) steps/s, "
                      r"([\d.e+]+) examples/s, ETA (\d+h\d\dm|\d+m\d\ds|\d+s)$")


def test_heartbeat_comes_every_interval_within_one_long_loop():
    """One loop of 20,000 steps at 0.05 s a step (1,000 s): a line at most every 30 s of
    wall time, each in the documented format, and one at the loop's end."""
    clock, lines, times = FakeClock(), [], []
    beat = heartbeat.Heartbeat(20000, 32, clock=clock,
                          log=lambda text: (lines.append(text), times.append(clock.now)))
    beat.begin(0)
    remaining, step, chunks = 20000, 0, []
    while remaining:
        steps = beat.chunk(remaining)
        chunks.append(steps)
        clock.now += 20.0 if step == 0 else 0.05 * steps  # the first step compiles
        step += steps
        remaining -= steps
        beat.after(step, loop_end=remaining == 0)
    assert chunks[:2] == [1, 1] and max(chunks) <= 100  # 5 s chunks at 0.05 s a step
    assert lines[0].startswith("training from step 0 to 20000")
    assert lines[1].startswith("first training step done in 20s")
    assert max(b - a for a, b in zip(times, times[1:])) <= 30.0
    progress = [PROGRESS.match(line) for line in lines[2:]]
    assert all(progress), lines
    assert int(progress[-1].group(1)) == 20000 and times[-1] == clock.now
    rate, examples = float(progress[1].group(3)), float(progress[1].group(4))
    assert abs(rate - 20.0) < 0.1 and abs(examples - 640.0) < 4  # compile left out
    remaining = 20000 - int(progress[1].group(1))
    assert progress[1].group(5) == heartbeat.duration(remaining / 20.0)
    assert heartbeat.duration(983) == "16m23s" and heartbeat.duration(7260) == "2h01m"
    assert heartbeat.duration(9) == "9s"


def test_heartbeat_prints_at_every_loop_end_even_when_fast():
    clock, lines = FakeClock(), []
    beat = heartbeat.Heartbeat(30, 8, clock=clock, log=lines.append)
    for loop in range(3):
        beat.begin(loop * 10)
        remaining = 10
        while remaining:
            steps = beat.chunk(remaining)
            clock.now += 0.01 * steps
            remaining -= steps
            beat.after(loop * 10 + 10 - remaining, loop_end=remaining == 0)
    assert [PROGRESS.match(line).group(1) for line in lines if line.startswith("progress")] \
        == ["10", "20", "30"]


def test_a_long_run_gives_its_eta_a_chunk_after_the_compiling_step():
    """2,000 steps at 4 s a step after a 33 s first step (docs/bitext.md's MiniLM fine-tune
    on 2 cores): the rate and the ETA come as soon as one chunk's 3 s are measured, not a
    15 s heartbeat interval later."""
    clock, lines = FakeClock(), []
    beat = heartbeat.Heartbeat(2000, 32, clock=clock,
                          log=lambda text: lines.append((clock.now, text)))
    beat.begin(0)
    step = 0
    while not any(PROGRESS.match(text) for _, text in lines) and step < 2000:
        steps = beat.chunk(2000 - step)
        clock.now += 33.0 if step == 0 else 4.0 * steps
        step += steps
        beat.after(step)
    when, text = lines[-1]
    assert when == 37.0, lines  # the first chunk after the compiling step: one step, 4 s
    progress = PROGRESS.match(text)
    assert progress.group(1) == "2" and float(progress.group(3)) == 0.25, text
    assert progress.group(5) == "2h13m", text  # 1,998 steps at 0.25 steps/s
