"""Typed names: "did you mean" matching, packaged recipes by name, `check_recipe` errors."""

import os
import subprocess
import sys

import pytest

from cmlm_tf import names
from tests.conftest import REPO_DIR, subprocess_env


def test_closest_keeps_the_near_names_best_first():
    # SequenceMatcher ratios: "abcd" 1.0, "abce" 0.75 (more than 0.05 below the best).
    assert names.closest("abcd", ["wxyz", "abce", "abcd"]) == ["abcd"]
    assert names.closest("abcde", ["abcdf", "abcxy", "zzzzz"]) == ["abcdf"]  # 0.8, 0.6, 0
    # Equally close names are all kept.
    assert sorted(names.closest("abcde", ["abcdx", "abcdy"])) == ["abcdx", "abcdy"]
    assert names.closest("learning_rate", ["learning_rat", "learn"])[0] == "learning_rat"
    assert names.closest("zzz", ["abcd", "efgh"]) == []
    assert names.closest("abcd", []) == []


def test_recipe_names_are_the_yaml_files_of_the_recipe_folder():
    recipes = names.recipe_names()
    assert {"cmlm_tiny", "moco_tiny", "mlm_tlm_tiny"} <= set(recipes)
    assert recipes == sorted(recipes)
    assert set(recipes) == {path[:-5] for path in os.listdir(names.recipe_dir())
                            if path.endswith(".yaml")}
    assert not any(name.endswith(".yaml") or name.endswith(".sh") for name in recipes)


def test_packaged_recipe_takes_a_name_a_file_name_or_configs_path():
    path = names.packaged_recipe("cmlm_tiny")
    assert path is not None and os.path.basename(path) == "cmlm_tiny.yaml"
    assert os.path.samefile(path, REPO_DIR / "configs" / "cmlm_tiny.yaml")
    assert names.packaged_recipe("cmlm_tiny.yaml") == path
    assert names.packaged_recipe("configs/cmlm_tiny.yaml") == path
    assert names.packaged_recipe("elsewhere/cmlm_tiny.yaml") is None
    assert names.packaged_recipe("cmlm_tny") is None


def test_unknown_recipe_message_suggests_the_near_name_or_lists_all():
    message = names.unknown_recipe_message("configs/cmlm_tny.yaml")
    assert message.startswith("--config_file configs/cmlm_tny.yaml: no such file")
    assert "did you mean 'cmlm_tiny'?" in message
    assert "\n" not in message
    listing = names.unknown_recipe_message("qqqqqqqq")
    assert "did you mean" not in listing
    assert all(name in listing for name in names.recipe_names())


def test_check_recipe_raises_only_for_what_cannot_be_read(tmp_path):
    own = tmp_path / "mine.yaml"
    own.write_text("task: {}\n", encoding="utf-8")
    for value in (str(own), "cmlm_tiny", "moco_tiny.yaml", "gs://bucket/missing.yaml"):
        names.check_recipe(value)  # no error
    with pytest.raises(FileNotFoundError, match="did you mean 'moco_tiny'"):
        names.check_recipe("moco_tin")
    with pytest.raises(FileNotFoundError, match="no such file and no packaged recipe"):
        names.check_recipe(str(tmp_path / "missing.yaml"))


def test_names_does_not_import_tensorflow():
    code = "import sys, cmlm_tf.names; print('tensorflow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=subprocess_env(), timeout=3600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"
