"""Tests of the training driver's steps that need no training: a bad mode, the latest
checkpoint of a new run, and evaluations refused or let through. (Runs end to end:
tests/driver/test_cli.py and tests/driver/test_run_faults.py.)"""

import pytest

from cmlm_tf.driver import run_checkpoints, train_lib


def test_an_unknown_mode_is_refused_before_the_run_directory_is_touched(tmp_path):
    with pytest.raises(ValueError, match=r"--mode must be one of \('train', 'eval', "
                                         r"'train_and_eval'\), got 'fit'"):
        train_lib.run(None, str(tmp_path / "run"), mode="fit")
    assert not (tmp_path / "run").exists()


def test_a_new_run_directory_has_no_checkpoint_and_is_locked_while_training(tmp_path):
    model_dir = tmp_path / "run"
    lock = train_lib.lock_run_dir(str(model_dir), training=True)
    try:
        assert model_dir.is_dir()
        assert train_lib.latest_checkpoint(str(model_dir)) is None
        assert run_checkpoints.checkpoint_step(None) == 0
    finally:
        lock.release()


@pytest.fixture(scope="module")
def tiny_params():
    return train_lib.build_params("cmlm_tf/cmlm", ["cmlm_tiny"])


@pytest.mark.parametrize("case", ["missing", "empty"])
def test_an_evaluation_of_untrained_weights_is_refused(case, tiny_params, tmp_path):
    """`--mode=eval` on a folder without a checkpoint, or on none at all (a typo), would
    report random weights' metrics: one line naming the folder, and the folder neither
    created nor written."""
    model_dir = tmp_path / "run"
    if case == "empty":
        model_dir.mkdir()
    expected = ("not found; --mode=eval evaluates a training run's checkpoints" if
                case == "missing" else "no checkpoint to evaluate, so --mode=eval would")
    with pytest.raises(ValueError, match=f"^--model_dir {model_dir}: {expected}"):
        train_lib.run(tiny_params, str(model_dir), "eval")
    assert (sorted(p.name for p in tmp_path.iterdir())
            == ([] if case == "missing" else ["run"]))
    if case == "empty":
        assert not list(model_dir.iterdir())


def test_an_evaluation_of_named_weights_or_a_trained_run_is_let_through(tiny_params, tmp_path):
    warm = train_lib.build_params("cmlm_tf/cmlm", ["cmlm_tiny"],
                                  f"task.init_checkpoint={tmp_path / 'encoder'}")
    train_lib.check_evaluable(warm, str(tmp_path), "eval")
    (tmp_path / "ckpt-3.index").write_bytes(b"")
    (tmp_path / "ckpt-3.data-00000-of-00001").write_bytes(b"")
    train_lib.check_evaluable(tiny_params, str(tmp_path), "eval")
    train_lib.check_evaluable(tiny_params, str(tmp_path / "new"), "train_and_eval")  # trains first
