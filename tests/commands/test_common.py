"""Tests of `cmlm_tf.commands.common`, what every command line shares: the flag check with
"did you mean" (prefixes, negative numbers, subcommands) and `run_main`'s one-line user
errors."""

import pytest

from cmlm_tf.commands import common, evaluate


def test_flag_check_knows_prefixes_numbers_and_subcommands():
    parser = common.ArgumentParser(prog="x")
    parser.add_argument("--model_dir")
    parser.add_argument("--steps", type=int)
    assert parser.unrecognised_flags(["--model=a", "--steps", "-3", "--", "--zzz"]) == []
    assert parser.unrecognised_flags(["--model-dir", "a", "-q"]) == ["--model-dir", "-q"]
    # The top-level parser of a command with subcommands knows their flags.
    assert evaluate.build_parser().unrecognised_flags(["sts", "--model", "m"]) == []


def test_user_errors_are_one_line_and_internal_errors_keep_their_traceback(capsys, monkeypatch):
    def mistake():
        raise ValueError("task.train_data.input_path: no file matches 'x*.txt'\nmore detail")

    def bug():
        raise KeyError("internal")

    monkeypatch.delenv("CMLM_TF_DEBUG", raising=False)
    assert common.run_main(mistake) == 2
    assert capsys.readouterr().err == \
        "error: task.train_data.input_path: no file matches 'x*.txt'\n"
    with pytest.raises(KeyError, match="internal"):
        common.run_main(bug)
    assert common.run_main(lambda: None) == 0 and common.run_main(lambda: 3) == 3
    monkeypatch.setenv("CMLM_TF_DEBUG", "1")  # the full traceback on request
    with pytest.raises(ValueError, match="input_path"):
        common.run_main(mistake)
