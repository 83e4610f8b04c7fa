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


@pytest.fixture(scope="module")
def tiny_params():
    return train.build_params("cmlm_tf/cmlm", ["cmlm_tiny"])


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
        train.run(tiny_params, str(model_dir), "eval")
    assert (sorted(p.name for p in tmp_path.iterdir())
            == ([] if case == "missing" else ["run"]))
    if case == "empty":
        assert not list(model_dir.iterdir())


def test_an_evaluation_of_named_weights_or_a_trained_run_is_let_through(tiny_params, tmp_path):
    warm = train.build_params("cmlm_tf/cmlm", ["cmlm_tiny"],
                              f"task.init_checkpoint={tmp_path / 'encoder'}")
    train.check_evaluable(warm, str(tmp_path), "eval")
    (tmp_path / "ckpt-3.index").write_bytes(b"")
    (tmp_path / "ckpt-3.data-00000-of-00001").write_bytes(b"")
    train.check_evaluable(tiny_params, str(tmp_path), "eval")
    train.check_evaluable(tiny_params, str(tmp_path / "new"), "train_and_eval")  # trains first


def test_a_misspelt_model_dir_of_an_eval_gets_a_did_you_mean(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    with pytest.raises(SystemExit) as exited:
        train.main(["--experiment", "cmlm_tf/cmlm", "--config_file", "cmlm_tiny",
                    "--mode", "eval", "--model_dir", str(tmp_path / "rnu")])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().endswith(
        f"argument --model_dir: {tmp_path / 'rnu'}: not found; did you mean "
        f"{tmp_path / 'run'}?")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
