"""The "did you mean" of every name a user types (cmlm_tf/did_you_mean.py)."""

from cmlm_tf import did_you_mean
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


def test_did_you_mean_and_the_recipes_do_not_import_tensorflow():
    for module in ("cmlm_tf.did_you_mean", "cmlm_tf.packaged_recipes"):
        result = run_child("imports_tensorflow", module, env=subprocess_env())
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.strip() == "False", module
