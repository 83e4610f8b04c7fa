"""The recipes that ship with cmlm_tf (`configs/` of a checkout, `cmlm_tf/recipes/` of an
install), by the names `--config_file` takes, checked before TensorFlow starts: a misspelt
recipe name gets the closest known names (`did_you_mean`).
"""

import importlib.resources
import os
from typing import List, Optional

from cmlm_tf.did_you_mean import closest


def recipe_dir() -> Optional[str]:
    """The folder of the recipes that ship with cmlm_tf (`configs/` of a checkout)."""
    try:
        folder = importlib.resources.files("cmlm_tf.recipes")
        if folder.is_dir():
            return str(folder)
    except ModuleNotFoundError:
        pass
    checkout = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "configs")
    return checkout if os.path.isdir(checkout) else None


def recipe_names() -> List[str]:
    """The packaged recipes, by the names `--config_file` takes (`cmlm_tiny`, ...)."""
    folder = recipe_dir()
    if folder is None:
        return []
    return sorted(name[:-5] for name in os.listdir(folder) if name.endswith(".yaml"))


def packaged_recipe(name_or_path: str) -> Optional[str]:
    """The packaged recipe file a `--config_file` value names (`cmlm_tiny`, `cmlm_tiny.yaml`
    or `configs/cmlm_tiny.yaml`), or None."""
    folder = recipe_dir()
    directory, name = os.path.split(name_or_path)
    if folder and os.path.normpath(directory or ".") in (".", "configs"):
        for candidate in (name, name + ".yaml"):
            if os.path.isfile(os.path.join(folder, candidate)):
                return os.path.join(folder, candidate)
    return None


def unknown_recipe_message(name_or_path: str) -> str:
    """The one line for a `--config_file` value that is neither a file nor a recipe: the
    closest recipe names when the value looks like a typo of one, else all of them."""
    names = recipe_names()
    stem = os.path.basename(name_or_path)
    stem = stem[:-5] if stem.endswith(".yaml") else stem
    close = closest(stem, names)
    if close:
        return (f"--config_file {name_or_path}: no such file or packaged recipe; did you mean "
                f"{' or '.join(repr(name) for name in close)}?")
    return (f"--config_file {name_or_path}: no such file and no packaged recipe of that name "
            f"(recipes: {', '.join(names) or 'none found'})")


def check_recipe(name_or_path: str) -> None:
    """Raises FileNotFoundError (with did-you-mean) for a local `--config_file` value that is
    neither an existing file nor a packaged recipe. Remote paths (`gs://...`) are left to
    TensorFlow's file system, which only it can read."""
    if "://" in name_or_path or os.path.exists(name_or_path) or packaged_recipe(name_or_path):
        return
    raise FileNotFoundError(unknown_recipe_message(name_or_path))
