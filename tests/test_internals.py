"""The libraries' private attributes cmlm_tf uses are still there (`cmlm_tf.internals`)."""

import ast

from cmlm_tf import internals
from tests.conftest import REPO_DIR


def test_the_installed_libraries_have_every_private_attribute_used():
    assert not internals.missing(), "\n".join(internals.missing())


def test_a_renamed_attribute_is_reported_with_its_user():
    renamed = internals.Internal("orbit.standard_runner", "StandardTrainer",
                                 ("_train_loop_fn", "_train_loop_function_v2"),
                                 "runner.ThroughputTrainer.train")
    gone = internals.Internal("orbit.no_such_module", "", ("x",), "nothing")
    assert internals.missing([renamed, gone]) == [
        "orbit.standard_runner.StandardTrainer no longer has _train_loop_function_v2; used "
        "by runner.ThroughputTrainer.train",
        "orbit.no_such_module: cannot import (No module named 'orbit.no_such_module'); "
        "used by nothing"]


def test_every_private_attribute_the_runner_reads_is_listed():
    """`runner.py` reads no private attribute of another object that `internals` does not
    list (its own classes' attributes aside)."""
    tree = ast.parse((REPO_DIR / "cmlm_tf" / "runner.py").read_text(encoding="utf-8"))
    own = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
           and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
           and node.value.id == "self" and node.attr.startswith("_")}
    read = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and node.attr.startswith("_") and not node.attr.startswith("__")}
    listed = {name for internal in internals.USED for name in internal.names}
    defined = {node.name for node in ast.walk(tree)
               if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    unlisted = sorted(read - listed - defined - own - {"_initialized"})
    assert not unlisted, f"runner.py uses private attributes not in internals.USED: {unlisted}"
