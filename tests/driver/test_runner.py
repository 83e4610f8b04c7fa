"""The training driver's runner (cmlm_tf/driver/runner.py): the stop's own checkpoint, and Orbit's
metric lines logged once, as plain numbers."""

import os
import signal
import types

import numpy as np
import tensorflow as tf
from absl import logging
from orbit import controller

from cmlm_tf.driver import checkpoint_manager, run_checkpoints, runner


def _manager(model_dir):
    step = tf.Variable(0, dtype=tf.int64)
    manager = checkpoint_manager.CheckpointManager(
        tf.train.Checkpoint(step=step), str(model_dir), max_to_keep=2, step_counter=step,
        checkpoint_interval=1)
    return manager, step


def test_a_second_ctrl_c_during_the_stops_own_save_still_saves_and_records(
        tmp_path, monkeypatch, ctrl_c_as_in_a_terminal):
    """The first Ctrl-C stopped the loop; the second comes while the stop saves the step
    reached: that save finishes, is recorded, and the stop reports it."""
    manager, step = _manager(tmp_path)
    step.assign(10)
    manager.save(checkpoint_number=10)
    real = tf.train.Checkpoint._write

    def interrupting(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(tf.train.Checkpoint, "_write", interrupting)
    step.assign(17)
    stopping = types.SimpleNamespace(trainer=types.SimpleNamespace(global_step=step),
                                     checkpoint_manager=manager, model_dir=str(tmp_path))
    runner.Runner._save_stopped(stopping, "interrupted")
    assert run_checkpoints.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-17")
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-17")


def test_orbit_metric_lines_are_logged_once_as_plain_numbers(monkeypatch):
    lines = []
    monkeypatch.setattr(logging, "info", lambda fmt, *args: lines.append(fmt % args))
    with runner.orbit_logs_once():
        text = controller._format_output({"loss": np.float32(0.5), "step": 3})
        controller._log("train | step: 3 | steps/sec: 12.5 | output: " + text)
        controller._log("restoring or initializing model...")
    assert text == "loss 0.5 step 3"
    assert lines == ["train | step: 3 | output: loss 0.5 step 3"]
