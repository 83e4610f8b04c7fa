"""Progress you can see: the training heartbeat, in the runner and through the driver, and the
export's first stage timed from before TensorFlow loads. (The stage lines themselves:
tests/test_progress.py.)"""

import re
import subprocess
import sys

from cmlm_tf.driver import run_dir
from tests.conftest import (
    REPO_DIR,
    TINY_CMLM_OVERRIDES,
    run_child,
    subprocess_env,
)

PROGRESS = re.compile(r"progress: step (\d+)/(\d+) \(\d+%\), ([\d.e+]+) steps/s, "
                      r"([\d.e+]+) examples/s, ETA (\d+h\d\dm|\d+m\d\ds|\d+s)$")


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


def test_the_export_stage_timer_runs_from_before_tensorflow_loads(tmp_path, tiny_run_dir):
    """The first stage, whose timer prints a line every 10 s of silence, begins before
    TensorFlow is imported: starting TensorFlow is part of what the timer covers."""
    result = run_child("export_reporting_first_stage", "--model_dir", tiny_run_dir,
                       "--export_dir", tmp_path / "out", env=subprocess_env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "first stage: starting TensorFlow; tensorflow imported: False" in result.stdout


def test_training_logs_are_plain_lines_with_the_full_format_in_the_run_folder(tmp_path):
    """A resumed run: no absl prefix on the console, no per-checkpoint chatter from
    libraries, one "restored" line, one steps/s figure; MODEL_DIR/train.log has every line
    in absl's full format."""
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
    assert re.search(r"^I\d{4} .* train_lib\.py:\d+\] finished: step 10 ", log, re.M), log[-2000:]
    assert "Sharding callback" in log or "Sync on async" in log  # kept in the file
