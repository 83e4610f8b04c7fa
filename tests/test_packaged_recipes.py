"""The packaged recipes by name, and the one line for a `--config_file` that names none
(cmlm_tf/packaged_recipes.py)."""

import os

import pytest

from cmlm_tf import packaged_recipes
from tests.conftest import REPO_DIR


def test_recipe_names_are_the_yaml_files_of_the_recipe_folder():
    recipes = packaged_recipes.recipe_names()
    assert {"cmlm_tiny", "moco_tiny", "mlm_tlm_tiny"} <= set(recipes)
    assert recipes == sorted(recipes)
    assert set(recipes) == {path[:-5] for path in os.listdir(packaged_recipes.recipe_dir())
                            if path.endswith(".yaml")}
    assert not any(name.endswith(".yaml") or name.endswith(".sh") for name in recipes)


def test_packaged_recipe_takes_a_name_a_file_name_or_configs_path():
    path = packaged_recipes.packaged_recipe("cmlm_tiny")
    assert path is not None and os.path.basename(path) == "cmlm_tiny.yaml"
    assert os.path.samefile(path, REPO_DIR / "configs" / "cmlm_tiny.yaml")
    assert packaged_recipes.packaged_recipe("cmlm_tiny.yaml") == path
    assert packaged_recipes.packaged_recipe("configs/cmlm_tiny.yaml") == path
    assert packaged_recipes.packaged_recipe("elsewhere/cmlm_tiny.yaml") is None
    assert packaged_recipes.packaged_recipe("cmlm_tny") is None


def test_unknown_recipe_message_suggests_the_near_name_or_lists_all():
    message = packaged_recipes.unknown_recipe_message("configs/cmlm_tny.yaml")
    assert message.startswith("--config_file configs/cmlm_tny.yaml: no such file")
    assert "did you mean 'cmlm_tiny'?" in message
    assert "\n" not in message
    listing = packaged_recipes.unknown_recipe_message("qqqqqqqq")
    assert "did you mean" not in listing
    assert all(name in listing for name in packaged_recipes.recipe_names())


def test_check_recipe_raises_only_for_what_cannot_be_read(tmp_path):
    own = tmp_path / "mine.yaml"
    own.write_text("task: {}\n", encoding="utf-8")
    for value in (str(own), "cmlm_tiny", "moco_tiny.yaml", "gs://bucket/missing.yaml"):
        packaged_recipes.check_recipe(value)  # no error
    with pytest.raises(FileNotFoundError, match="did you mean 'moco_tiny'"):
        packaged_recipes.check_recipe("moco_tin")
    with pytest.raises(FileNotFoundError, match="no such file and no packaged recipe"):
        packaged_recipes.check_recipe(str(tmp_path / "missing.yaml"))
