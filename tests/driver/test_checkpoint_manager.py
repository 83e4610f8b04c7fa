"""The training run's checkpoint manager (cmlm_tf/driver/checkpoint_manager.py): one answer to
"which checkpoint is latest", and Ctrl-C deferred through every step of a checkpoint save."""

import os
import re
import signal
import subprocess
import sys

import pytest
import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management

from cmlm_tf.driver import checkpoint_manager, run_checkpoints
from cmlm_tf.modeling import sentence_encoder
from tests.conftest import REPO_DIR, TINY_CMLM_OVERRIDES, cli_env


def _manager(model_dir, max_to_keep=2):
    step = tf.Variable(0, dtype=tf.int64)
    manager = checkpoint_manager.CheckpointManager(
        tf.train.Checkpoint(step=step), str(model_dir), max_to_keep=max_to_keep,
        step_counter=step, checkpoint_interval=1)
    return manager, step


def _steps_on_disk(model_dir):
    return sorted(int(name[5:-6]) for name in os.listdir(model_dir)
                  if name.startswith("ckpt-") and name.endswith(".index"))


# Each step of a save, as tf.train.CheckpointManager.save makes it.
_SAVE_STEPS = {
    "files": (tf.train.Checkpoint, "_write"),
    "recording": (checkpoint_management, "update_checkpoint_state_internal"),
    "pruning": (tf.train.CheckpointManager, "_sweep"),
}


@pytest.mark.parametrize("where", sorted(_SAVE_STEPS))
def test_ctrl_c_at_each_step_of_a_save_stops_after_the_save(tmp_path, monkeypatch, where,
                                                            ctrl_c_as_in_a_terminal):
    """Two Ctrl-C during the files, their recording or the pruning: the save finishes and
    is recorded as the latest checkpoint, then the run stops."""
    manager, step = _manager(tmp_path)
    for number in (10, 20):
        step.assign(number)
        manager.save(checkpoint_number=number)
    owner, name = _SAVE_STEPS[where]
    real = getattr(owner, name)
    interrupted = []

    def interrupting(*args, **kwargs):
        if not interrupted:
            interrupted.append(True)
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, interrupting)
    step.assign(30)
    with pytest.raises(checkpoint_manager.SaveInterrupted) as stopped:
        manager.save(checkpoint_number=30)
    assert interrupted and stopped.value.path == str(tmp_path / "ckpt-30")
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-30")
    assert _steps_on_disk(tmp_path) == [20, 30]  # pruned to max_to_keep as usual


@pytest.mark.parametrize("recorded", ["older", "none"])
def test_a_checkpoint_saved_but_not_recorded_is_the_latest_for_everyone(tmp_path, recorded):
    """The files of ckpt-30 are whole but the `checkpoint` state names ckpt-10 (or, for a
    run's first checkpoint, does not exist): the driver, the restore and the export all
    take ckpt-30."""
    manager, step = _manager(tmp_path, max_to_keep=5)
    step.assign(10)
    manager.save(checkpoint_number=10)
    state = (tmp_path / "checkpoint").read_text()
    step.assign(30)
    manager.save(checkpoint_number=30)
    if recorded == "older":
        (tmp_path / "checkpoint").write_text(state)
    else:
        os.remove(tmp_path / "checkpoint")
        os.remove(tmp_path / "ckpt-10.index")
    newest = str(tmp_path / "ckpt-30")
    assert run_checkpoints.latest_checkpoint(str(tmp_path)) == newest
    assert sentence_encoder.resolve_checkpoint(str(tmp_path)) == newest  # export, warm start
    assert run_checkpoints.recover_latest_checkpoint(str(tmp_path)) == newest  # the driver
    restored, restored_step = _manager(tmp_path)  # what Orbit restores
    assert restored.restore_or_initialize() == newest and int(restored_step.numpy()) == 30


def test_a_run_killed_while_recording_its_first_checkpoint_resumes_from_it(tmp_path):
    """Killed between writing ckpt-5's files and recording them: the rerun restores step 5
    and its input skips the 5 batches trained, in agreement."""
    model_dir = tmp_path / "run"
    args = ["--experiment=cmlm_tf/cmlm", "--config_file=cmlm_tiny", "--mode=train",
            f"--model_dir={model_dir}",
            f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=8,"
            "trainer.steps_per_loop=5,trainer.checkpoint_interval=5,"
            "trainer.summary_interval=5"]
    killed = subprocess.run([sys.executable, "-m", "tests.driver.children",
                             "train_killed_while_recording"] + args, capture_output=True,
                            text=True, env=cli_env(), cwd=REPO_DIR, timeout=3600)
    assert killed.returncode == 137, killed.stderr[-3000:]
    assert _steps_on_disk(model_dir) == [5] and not (model_dir / "checkpoint").exists()
    rerun = subprocess.run([sys.executable, "-m", "cmlm_tf.train"] + args,
                           capture_output=True, text=True, env=cli_env(), cwd=REPO_DIR,
                           timeout=3600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "restored step 5 from ckpt-5" in rerun.stderr, rerun.stderr[-3000:]
    skipped = re.search(r"resuming the input after (\d+) batches", rerun.stderr)
    assert skipped and skipped.group(1) == "5", rerun.stderr[-3000:]
    assert "finished: step 8" in rerun.stderr
