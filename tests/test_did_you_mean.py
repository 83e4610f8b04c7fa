"""The "did you mean" of every name a user types (cmlm_tf/did_you_mean.py)."""

import argparse

import pytest

from cmlm_tf import did_you_mean
from cmlm_tf.commands import common
from tests.conftest import run_child, subprocess_env


def test_closest_keeps_the_near_names_best_first():
    # SequenceMatcher ratios: "abcd" 1.0, "abce" 0.75 (more than 0.05 below the best).
    assert did_you_mean.closest("abcd", ["wxyz", "abce", "abcd"]) == ["abcd"]
    assert did_you_mean.closest("abcde", ["abcdf", "abcxy", "zzzzz"]) == ["abcdf"]  # 0.8, 0.6, 0
    # Equally close names are all kept.
    assert sorted(did_you_mean.closest("abcde", ["abcdx", "abcdy"])) == ["abcdx", "abcdy"]
    assert did_you_mean.closest("learning_rate", ["learning_rat", "learn"])[0] == "learning_rat"
    assert did_you_mean.closest("zzz", ["abcd", "efgh"]) == []
    assert did_you_mean.closest("abcd", []) == []


def test_one_edit_catches_typos_in_short_names():
    # A swap or a changed letter in 3 letters: SequenceMatcher ratio 0.67, under 0.75.
    assert did_you_mean.closest("rnu", ["run", "runs", "exports"]) == ["run"]
    assert did_you_mean.closest("nil", ["cmlm", "nli", "moco"]) == ["nli"]
    assert did_you_mean.closest("rum", ["run", "tmp"]) == ["run"]
    # A letter dropped or added (ratios 0.8 and 0.86).
    assert did_you_mean.closest("rn", ["run", "README.md"]) == ["run"]
    assert did_you_mean.closest("runn", ["run", "tests"]) == ["run"]
    # Two edits, or one edit in names under 3 letters, are not typos.
    assert did_you_mean.closest("nru", ["run"]) == []
    assert did_you_mean.closest("ab", ["ac", "xyz"]) == []


def test_one_edit_apart_is_damerau_levenshtein_distance_one():
    one_edit = did_you_mean.one_edit_apart
    for first, second in [("abcd", "bacd"), ("abcd", "abdc"), ("abcd", "abcxd"),
                          ("abcd", "abc"), ("abcd", "bcd"), ("abcd", "abxd"), ("abc", "xabc")]:
        assert one_edit(first, second) and one_edit(second, first), (first, second)
    for first, second in [("abcd", "abcd"), ("abcd", "badc"), ("abcd", "ab"),
                          ("abcd", "axyd"), ("abcd", "acdb"), ("ab", "ba"), ("a", "")]:
        assert not one_edit(first, second) and not one_edit(second, first), (first, second)


def test_a_swapped_folder_name_gets_its_sibling(tmp_path, monkeypatch):
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path)
    errors = []

    def error(message):
        errors.append(message)
        raise SystemExit(2)

    parser = argparse.ArgumentParser()
    monkeypatch.setattr(parser, "error", error)
    with pytest.raises(SystemExit):
        common.check_input_paths(parser, {"--model_dir": "rnu"})
    assert errors == ["argument --model_dir: rnu: not found; did you mean run?"]


def test_did_you_mean_and_the_recipes_do_not_import_tensorflow():
    for module in ("cmlm_tf.did_you_mean", "cmlm_tf.packaged_recipes"):
        result = run_child("imports_tensorflow", module, env=subprocess_env())
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.strip() == "False", module
