"""Faults of a training run caught before or while it trains: settings with which it would
train nothing and still "finish", and a full disk at each of its write sites (checkpoint,
`params.yaml`, the lock). Each is one line naming the field or file, exit 2, and what was
on disk before stays.

A full disk is made two ways: an injected "no space left on device" at the write
(always), and a small tmpfs the test mounts (where mounting is permitted: root)."""

import errno
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from official.modeling.hyperparams import params_dict
from tensorflow.python.checkpoint import functional_saver

from cmlm_tf.commands import train
from cmlm_tf.driver import run_checkpoints, run_dir, train_lib
from cmlm_tf.files import disk
from tests.conftest import REPO_DIR, TINY_CMLM_OVERRIDES, cli_env, fill_disk, write_bundled_pairs

TRAIN = [sys.executable, "-m", "cmlm_tf.train", "--experiment=cmlm_tf/cmlm",
         "--config_file=cmlm_tiny", "--mode=train"]


def _train(model_dir, override, cwd=REPO_DIR):
    return subprocess.run(TRAIN + [f"--model_dir={model_dir}",
                                   f"--params_override={TINY_CMLM_OVERRIDES},{override}"],
                          capture_output=True, text=True, env=cli_env(), cwd=cwd,
                          timeout=3600)


def _error_line(result):
    """The `error: ...` line of a failed command; asserts there is one and no traceback."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and result.stderr.strip().splitlines()[-1] == errors[0], \
        result.stderr[-3000:]
    return errors[0]


# Settings that would train nothing.

@pytest.mark.parametrize("experiment,override,field", [
    ("cmlm_tf/cmlm", "trainer.train_steps=-5", "trainer.train_steps"),
    ("cmlm_tf/cmlm", "trainer.train_steps=0", "trainer.train_steps"),
    ("cmlm_tf/cmlm", "trainer.steps_per_loop=0", "trainer.steps_per_loop"),
    ("cmlm_tf/cmlm", "trainer.checkpoint_interval=-1", "trainer.checkpoint_interval"),
    ("cmlm_tf/cmlm", "trainer.summary_interval=0", "trainer.summary_interval"),
    ("cmlm_tf/cmlm", "trainer.validation_interval=-10", "trainer.validation_interval"),
    ("cmlm_tf/cmlm", "task.train_data.seq_length=2", "task.train_data.seq_length"),
    ("cmlm_tf/cmlm", "task.train_data.max_predictions_per_seq=0",
     "task.train_data.max_predictions_per_seq"),
    ("cmlm_tf/cmlm_bitext", "task.train_data.seq_length=1", "task.train_data.seq_length"),
    ("cmlm_tf/mlm_tlm", "task.train_data.seq_length=2", "task.train_data.seq_length"),
])
def test_a_run_that_would_train_nothing_is_refused(experiment, override, field):
    with pytest.raises(ValueError, match=f"^{field} must be at least") as caught:
        train_lib.build_params(experiment, params_override=override)
    assert "\n" not in str(caught.value)


def test_the_smallest_masked_lm_sequence_is_accepted():
    params = train_lib.build_params("cmlm_tf/cmlm", params_override="task.train_data.seq_length=3")
    assert params.task.train_data.seq_length == 3


@pytest.mark.parametrize("override,field", [
    ("trainer.train_steps=-5", "trainer.train_steps"),
    ("task.train_data.seq_length=2", "task.train_data.seq_length"),
])
def test_the_driver_refuses_in_one_line_before_touching_the_run(tmp_path, override, field):
    result = _train(tmp_path / "run", override)
    line = _error_line(result)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert line.startswith(f"error: {field} must be at least"), line
    assert not (tmp_path / "run").exists()


def test_an_evaluation_of_fewer_examples_than_one_batch_is_refused(tmp_path):
    """bitext_tiny on 5 validation pairs, batch 32 with drop_remainder: no batch to
    evaluate, so one line naming the file and the batch size, exit 2, and no metrics; a
    `train_and_eval` is refused before it trains, and leaves no checkpoint or params.yaml.
    (`--mode=eval` needs a checkpoint first: without one it is refused before reading any
    data, tests/commands/test_train.py.)"""
    pairs = write_bundled_pairs(tmp_path / "five.tsv", 5)
    model_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "cmlm_tf.train", "--experiment=cmlm_tf/bitext",
         "--config_file=bitext_tiny", "--mode=train_and_eval", f"--model_dir={model_dir}",
         f"--params_override=task.validation_data.input_path={pairs}"],
        capture_output=True, text=True, env=cli_env(), cwd=REPO_DIR, timeout=3600)
    line = _error_line(result)
    assert line.startswith(f"error: task.validation_data.input_path {pairs}: no batch of "
                           "task.validation_data.global_batch_size=32 examples"), line
    assert "ranking_loss" not in result.stderr, result.stderr[-3000:]
    assert "progress:" not in result.stderr, result.stderr[-3000:]
    assert not any(name.startswith("ckpt-") for name in os.listdir(model_dir))
    assert not (model_dir / "params.yaml").exists()


BITEXT_EVAL = ["--experiment=cmlm_tf/bitext", "--config_file=bitext_tiny",
               "--mode=train_and_eval",
               "--params_override=trainer.train_steps=2,trainer.steps_per_loop=2,"
               "trainer.checkpoint_interval=2,trainer.validation_steps=1,"
               "task.validation_data.global_batch_size=4,task.train_data.global_batch_size=4,"
               "trainer.optimizer_config.warmup.linear.warmup_steps=1"]


def test_a_rerun_evaluates_what_an_interrupted_final_evaluation_left(tmp_path):
    """Ctrl-C during the final evaluation: exit 130. The same command run again does not
    just say "finished": it evaluates the step reached, once."""
    args = BITEXT_EVAL + [f"--model_dir={tmp_path / 'run'}"]

    def run(command):
        return subprocess.run(command + args, capture_output=True, text=True, env=cli_env(),
                              cwd=REPO_DIR, timeout=3600)

    interrupted = run([sys.executable, "-m", "tests.driver.children",
                       "train_interrupted_in_evaluation"])
    assert interrupted.returncode == 130, interrupted.stderr[-3000:]
    rerun = run([sys.executable, "-m", "cmlm_tf.train"])
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "the evaluation of step 2 did not finish: evaluating it now" in rerun.stderr
    assert "validation_loss" in rerun.stderr, rerun.stderr[-3000:]
    again = run([sys.executable, "-m", "cmlm_tf.train"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert "evaluating it now" not in again.stderr and "validation_loss" not in again.stderr


# A full disk, injected at the write.

def _no_space(path="somewhere"):
    return OSError(errno.ENOSPC, "No space left on device", path)


def test_full_disk_while_taking_the_lock_leaves_no_lock(tmp_path, monkeypatch):
    def dump(record, f):
        f.write('{"pid": ')
        raise _no_space()

    monkeypatch.setattr(run_dir.json, "dump", dump)
    with pytest.raises(disk.DiskFullError) as caught:
        run_dir.RunLock(str(tmp_path)).acquire()
    assert str(caught.value).startswith(f"{tmp_path / run_dir.LOCK_FILE}: no space left")
    assert os.listdir(tmp_path) == []  # neither an empty lock nor a temporary file
    monkeypatch.undo()
    with run_dir.RunLock(str(tmp_path)) as lock:  # the next start takes it cleanly
        assert json.loads(open(lock.path).read())["pid"] == os.getpid()


def test_full_disk_while_writing_params_keeps_the_previous_file(tmp_path, monkeypatch):
    params = train_lib.build_params("cmlm_tf/cmlm", ["cmlm_tiny"])
    path = run_dir.write_params(params, str(tmp_path))
    before = open(path).read()

    def dump(data, f, **kwargs):
        f.write("task:\n  model:\n")
        raise _no_space()

    monkeypatch.setattr(params_dict.yaml, "dump", dump)
    with pytest.raises(disk.DiskFullError) as caught:
        run_dir.write_params(params, str(tmp_path))
    assert str(caught.value).startswith(f"{tmp_path / 'params.yaml'}: no space left")
    assert open(path).read() == before
    assert os.listdir(tmp_path) == ["params.yaml"]


def test_full_disk_at_a_checkpoint_is_one_line_and_keeps_the_older_one(
        tmp_path, monkeypatch, capsys):
    """The second checkpoint's `SaveV2` fails as TensorFlow reports a full disk."""
    save_v2, calls = functional_saver.io_ops.save_v2, []

    def failing_save_v2(prefix, *args, **kwargs):
        calls.append(prefix)
        if len(calls) == 2:
            raise tf.errors.ResourceExhaustedError(
                None, None, f"{prefix}/part-00000; No space left on device [Op:SaveV2]")
        return save_v2(prefix, *args, **kwargs)

    monkeypatch.setattr(functional_saver.io_ops, "save_v2", failing_save_v2)
    monkeypatch.delenv("CMLM_TF_DEBUG", raising=False)
    model_dir = tmp_path / "run"
    code = train.main(["--experiment=cmlm_tf/cmlm", "--config_file=cmlm_tiny", "--mode=train",
                       f"--model_dir={model_dir}",
                       f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=20"])
    err = capsys.readouterr().err
    assert code == 2, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err[-3000:]
    assert errors[0].startswith(f"error: {model_dir / 'ckpt-20'}: no space left on device")
    assert "MiB free there" in errors[0] and "ResourceExhaustedError" in errors[0]
    # The older checkpoint is intact and still the run's latest; the lock is released.
    assert tf.train.latest_checkpoint(str(model_dir)) == str(model_dir / "ckpt-10")
    assert run_checkpoints.checkpoint_problem(str(model_dir / "ckpt-10")) is None
    assert not (model_dir / run_dir.LOCK_FILE).exists()


def test_lock_on_a_full_tmpfs_leaves_no_empty_lock(small_disk):
    folder = small_disk("64k")
    fill_disk(folder)
    with pytest.raises(disk.DiskFullError) as caught:
        run_dir.RunLock(str(folder)).acquire()
    assert str(caught.value).startswith(f"{folder / run_dir.LOCK_FILE}: no space left")
    assert "MiB free there" in str(caught.value)
    assert sorted(os.listdir(folder)) == ["filler"]


def test_params_on_a_full_tmpfs_keep_the_previous_file(small_disk):
    folder = small_disk("64k")
    params = train_lib.build_params("cmlm_tf/cmlm", ["cmlm_tiny"])
    run_dir.write_params(params, str(folder))
    before = (folder / "params.yaml").read_text()
    fill_disk(folder)
    with pytest.raises(disk.DiskFullError, match="params.yaml: no space left"):
        run_dir.write_params(params.replace(trainer={"train_steps": 7}), str(folder))
    assert (folder / "params.yaml").read_text() == before
    assert sorted(os.listdir(folder)) == ["filler", "params.yaml"]


def test_training_onto_a_full_tmpfs_is_one_line_and_keeps_the_older_checkpoint(small_disk):
    """The run's folder holds its first checkpoint but not the second."""
    folder = small_disk(TMPFS_FOR_ONE_CHECKPOINT)
    model_dir = folder / "run"
    result = _train(model_dir, "trainer.train_steps=20,trainer.max_to_keep=5")
    line = _error_line(result)
    assert line.startswith(f"error: {model_dir / 'ckpt-20'}: no space left on device"), line
    assert "MiB free there" in line
    assert tf.train.latest_checkpoint(str(model_dir)) == str(model_dir / "ckpt-10")
    assert run_checkpoints.checkpoint_problem(str(model_dir / "ckpt-10")) is None
    assert not (model_dir / run_dir.LOCK_FILE).exists()


# One checkpoint of the shrunk tiny recipe (`TINY_CMLM_OVERRIDES`) with its LAMB slots takes
# 1.8 MiB; params.yaml and the summaries of 20 steps take a few KiB: 3 MiB hold one, not two.
TMPFS_FOR_ONE_CHECKPOINT = "3m"
