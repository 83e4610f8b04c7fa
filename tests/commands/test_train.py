"""Tests of `python -m cmlm_tf.train`'s steps that need no training: a bad mode and the
latest checkpoint of a new run. (Runs end to end: tests/driver/test_cli.py and
tests/driver/test_run_faults.py.)"""

import pytest

from cmlm_tf.commands import train


def test_an_unknown_mode_is_refused_before_the_run_directory_is_touched(tmp_path):
    with pytest.raises(ValueError, match=r"--mode must be one of \('train', 'eval', "
                                         r"'train_and_eval'\), got 'fit'"):
        train.run(None, str(tmp_path / "run"), mode="fit")
    assert not (tmp_path / "run").exists()


def test_a_new_run_directory_has_no_checkpoint_and_is_locked_while_training(tmp_path):
    from cmlm_tf import run_checkpoints

    model_dir = tmp_path / "run"
    lock = train.lock_run_dir(str(model_dir), training=True)
    try:
        assert model_dir.is_dir()
        assert train.latest_checkpoint(str(model_dir)) is None
        assert run_checkpoints.checkpoint_step(None) == 0
    finally:
        lock.release()
