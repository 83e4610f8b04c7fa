"""Progress you can see: the training heartbeat, stage lines of long commands."""

import re
import subprocess
import sys
import time

from conftest import REPO_DIR, TINY_CMLM_OVERRIDES, subprocess_env

PROGRESS = re.compile(r"progress: step (\d+)/(\d+) \(\d+%\), ([\d.e+]+) steps/s, "
                      r"([\d.e+]+) examples/s, ETA (\d+h\d\dm|\d+m\d\ds|\d+s)$")


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_heartbeat_comes_every_interval_within_one_long_loop():
    """One loop of 20,000 steps at 0.05 s a step (1,000 s): a line at most every 30 s of
    wall time, each in the documented format, and one at the loop's end."""
    from cmlm_tf.train import Heartbeat, _duration

    clock, lines, times = FakeClock(), [], []
    heartbeat = Heartbeat(20000, 32, clock=clock,
                          log=lambda text: (lines.append(text), times.append(clock.now)))
    heartbeat.begin(0)
    remaining, step, chunks = 20000, 0, []
    while remaining:
        steps = heartbeat.chunk(remaining)
        chunks.append(steps)
        clock.now += 20.0 if step == 0 else 0.05 * steps  # the first step compiles
        step += steps
        remaining -= steps
        heartbeat.after(step, loop_end=remaining == 0)
    assert chunks[:2] == [1, 1] and max(chunks) <= 100  # 5 s chunks at 0.05 s a step
    assert lines[0].startswith("training from step 0 to 20000")
    assert lines[1].startswith("first training step done in 20s")
    assert max(b - a for a, b in zip(times, times[1:])) <= 30.0
    progress = [PROGRESS.match(line) for line in lines[2:]]
    assert all(progress), lines
    assert int(progress[-1].group(1)) == 20000 and times[-1] == clock.now
    rate, examples = float(progress[1].group(3)), float(progress[1].group(4))
    assert abs(rate - 20.0) < 0.1 and abs(examples - 640.0) < 4  # compile left out
    assert progress[1].group(5) == _duration((20000 - int(progress[1].group(1))) / 20.0)
    assert _duration(983) == "16m23s" and _duration(7260) == "2h01m" and _duration(9) == "9s"


def test_heartbeat_prints_at_every_loop_end_even_when_fast():
    from cmlm_tf.train import Heartbeat

    clock, lines = FakeClock(), []
    heartbeat = Heartbeat(30, 8, clock=clock, log=lines.append)
    for loop in range(3):
        heartbeat.begin(loop * 10)
        remaining = 10
        while remaining:
            steps = heartbeat.chunk(remaining)
            clock.now += 0.01 * steps
            remaining -= steps
            heartbeat.after(loop * 10 + 10 - remaining, loop_end=remaining == 0)
    assert [PROGRESS.match(line).group(1) for line in lines if line.startswith("progress")] \
        == ["10", "20", "30"]


def test_stage_lines_only_for_long_stages(capsys):
    from cmlm_tf import cli

    stage = cli.Stages("export", after=0.5, every=1.0)
    stage("reading the checkpoint")  # quick: no line
    stage("converting to TFLite")  # lines at 0.5 s and 1.5 s
    time.sleep(1.9)
    stage.done()
    time.sleep(1.0)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert all(re.fullmatch(r"export: converting to TFLite \(\d+ s so far\)", line)
               for line in lines), lines


def test_quick_stages_in_a_row_do_not_add_up_to_a_long_silence(capsys):
    from cmlm_tf import cli

    stage = cli.Stages("export", after=1.0, every=5.0)
    for what in ("reading the checkpoint", "restoring the encoder", "saving encoder/",
                 "saving serving/1"):
        stage(what)
        time.sleep(0.4)  # no stage lasts 1 s, together they do (one line, at 1 s)
    stage.done()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert re.fullmatch(r"export: (restoring the encoder|saving encoder/|saving serving/1) "
                        r"\(\d+ s so far\)", lines[0]), lines


def test_driver_heartbeat_inside_one_long_loop(tmp_path):
    """The driver, one loop of 120 tiny steps, a heartbeat interval shorter than any step:
    lines inside the loop, before its end, one plain line each (no carriage return), on
    stderr. The loop's first chunk is one step (its speed is unknown), so whatever the
    machine's speed the second chunk ends after the interval and must print a line."""
    env = dict(subprocess_env(), CMLM_TF_HEARTBEAT_SECONDS="0.000001")
    result = subprocess.run(
        [sys.executable, "-m", "cmlm_tf.train", "--experiment=cmlm_tf/cmlm",
         "--config_file=cmlm_tiny", "--mode=train", f"--model_dir={tmp_path / 'run'}",
         f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=120,"
         "trainer.steps_per_loop=120,trainer.summary_interval=120,"
         "trainer.checkpoint_interval=120"],
        capture_output=True, text=True, env=env, cwd=REPO_DIR, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\r" not in result.stderr
    lines = result.stderr.splitlines()
    first = next(i for i, line in enumerate(lines) if "first training step done in" in line)
    matches = [(i, PROGRESS.search(line)) for i, line in enumerate(lines)]
    steps = [int(m.group(1)) for i, m in matches if m and i > first]
    assert steps and steps[-1] == 120 and all(m.group(2) == "120" for _, m in matches if m)
    assert any(step < 120 for step in steps), "no heartbeat inside the loop"
    assert steps == sorted(steps)
