"""Tests of `python -m cmlm_tf.train`'s command line that need no training (the driver's
steps: tests/driver/test_train_lib.py; runs end to end: tests/driver/test_cli.py)."""

import pytest

from cmlm_tf.commands import train


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
