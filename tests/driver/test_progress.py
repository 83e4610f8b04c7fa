"""Progress you can see: the training heartbeat, stage lines of long commands."""

import re
import subprocess
import sys
import time

from tests.conftest import REPO_DIR, TINY_CMLM_OVERRIDES, subprocess_env

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
    from cmlm_tf.runner import Heartbeat, _duration

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
    from cmlm_tf.runner import Heartbeat

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
    from cmlm_tf import progress

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
    from cmlm_tf import progress

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
        capture_output=True, text=True, env=env, cwd=REPO_DIR, timeout=3600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\r" not in result.stderr
    lines = result.stderr.splitlines()
    first = next(i for i, line in enumerate(lines) if "first training step done in" in line)
    matches = [(i, PROGRESS.search(line)) for i, line in enumerate(lines)]
    steps = [int(m.group(1)) for i, m in matches if m and i > first]
    assert steps and steps[-1] == 120 and all(m.group(2) == "120" for _, m in matches if m)
    assert any(step < 120 for step in steps), "no heartbeat inside the loop"
    assert steps == sorted(steps)


def test_a_long_run_gives_its_eta_a_chunk_after_the_compiling_step():
    """2,000 steps at 4 s a step after a 33 s first step (docs/bitext.md's MiniLM fine-tune
    on 2 cores): the rate and the ETA come as soon as one chunk's 3 s are measured, not a
    15 s heartbeat interval later."""
    from cmlm_tf.runner import Heartbeat

    clock, lines = FakeClock(), []
    heartbeat = Heartbeat(2000, 32, clock=clock,
                          log=lambda text: lines.append((clock.now, text)))
    heartbeat.begin(0)
    step = 0
    while not any(PROGRESS.match(text) for _, text in lines) and step < 2000:
        steps = heartbeat.chunk(2000 - step)
        clock.now += 33.0 if step == 0 else 4.0 * steps
        step += steps
        heartbeat.after(step)
    when, text = lines[-1]
    assert when == 37.0, lines  # the first chunk after the compiling step: one step, 4 s
    progress = PROGRESS.match(text)
    assert progress.group(1) == "2" and float(progress.group(3)) == 0.25, text
    assert progress.group(5) == "2h13m", text  # 1,998 steps at 0.25 steps/s


_FIRST_STAGE = """
import sys
from cmlm_tf import progress
real = progress.Stages.__call__
def call(self, what):
    if not hasattr(progress, "first_stage"):
        progress.first_stage = what
        print(f"first stage: {what}; tensorflow imported: {'tensorflow' in sys.modules}")
    return real(self, what)
progress.Stages.__call__ = call
from cmlm_tf.export import cli as export_cli
sys.exit(export_cli.main(sys.argv[1:]))
"""


def test_the_export_stage_timer_runs_from_before_tensorflow_loads(tmp_path, tiny_run_dir):
    """The first stage, whose timer prints a line every 10 s of silence, begins before
    TensorFlow is imported: starting TensorFlow is part of what the timer covers."""
    result = subprocess.run(
        [sys.executable, "-c", _FIRST_STAGE, "--model_dir", str(tiny_run_dir),
         "--export_dir", str(tmp_path / "out")], capture_output=True, text=True,
        env=subprocess_env(), cwd=REPO_DIR, timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "first stage: starting TensorFlow; tensorflow imported: False" in result.stdout


def test_training_logs_are_plain_lines_with_the_full_format_in_the_run_folder(tmp_path):
    """A resumed run: no absl prefix on the console, no per-checkpoint chatter from
    libraries, one "restored" line, one steps/s figure; MODEL_DIR/train.log has every line
    in absl's full format."""
    from cmlm_tf import run_dir

    model_dir = tmp_path / "run"

    def train(steps):
        return subprocess.run(
            [sys.executable, "-m", "cmlm_tf.train", "--experiment=cmlm_tf/cmlm",
             "--config_file=cmlm_tiny", "--mode=train", f"--model_dir={model_dir}",
                     f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps={steps},"
                     "trainer.steps_per_loop=5,trainer.checkpoint_interval=5,"
                     "trainer.summary_interval=5"],
            capture_output=True, text=True, env=subprocess_env(), cwd=REPO_DIR, timeout=3600)

    assert train(5).returncode == 0
    resumed = train(10)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    lines = resumed.stderr.splitlines()
    prefixed = [line for line in lines if re.match(r"^[IWEF]\d{4} \d\d:\d\d:\d\d", line)]
    assert not prefixed, prefixed
    assert not [line for line in lines if "Sharding callback" in line or "Sync on async" in line]
    assert [line for line in lines if "restor" in line] == ["restored step 5 from ckpt-5"]
    assert not [line for line in lines if "steps/sec" in line]
    assert len([line for line in lines if "steps/s" in line]) >= 1
    assert "finished: step 10" in lines[-1]
    log = (model_dir / run_dir.LOG_FILE).read_text(encoding="utf-8")
    assert re.search(r"^I\d{4} .* train\.py:\d+\] finished: step 10 ", log, re.M), log[-2000:]
    assert "Sharding callback" in log or "Sync on async" in log  # kept in the file
