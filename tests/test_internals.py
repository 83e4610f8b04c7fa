"""The libraries' private attributes cmlm_tf uses are still there (`cmlm_tf.internals`)."""

import ast
import importlib.metadata
import re

from cmlm_tf import internals
from tests.conftest import REPO_DIR

# The distributions whose private attributes `internals` lists, as setup.py pins them
# (Orbit ships inside tf-models-official).
PINNED = ("tensorflow", "tf-keras", "tf-models-official")


def pins() -> dict:
    """The `~=` pins of setup.py for `PINNED`: {distribution: "2.20.0"}."""
    setup = (REPO_DIR / "setup.py").read_text(encoding="utf-8")
    return {name: re.search(rf'"{re.escape(name)}~=([\d.]+)"', setup).group(1)
            for name in PINNED}


def installed() -> str:
    """The installed versions of `PINNED`, as one line for failure messages."""
    return ", ".join(f"{name} {importlib.metadata.version(name)}" for name in PINNED)


def test_the_installed_libraries_are_the_pinned_versions():
    """The attributes were checked against tensorflow, tf-keras and tf-models-official
    (with its orbit) 2.20, the versions setup.py pins (`~=2.20.0`)."""
    assert pins() == {name: "2.20.0" for name in PINNED}, pins()
    for name, pin in pins().items():
        major_minor = pin.rsplit(".", 1)[0]
        assert importlib.metadata.version(name).startswith(major_minor + "."), (
            f"{name} {importlib.metadata.version(name)} is installed; setup.py pins ~={pin}")


def test_the_installed_libraries_have_every_private_attribute_used():
    gone = internals.missing()
    assert not gone, (f"private attributes gone in the installed {installed()} "
                      f"(pinned: {pins()}):\n" + "\n".join(gone))


def test_a_renamed_attribute_is_reported_with_its_user():
    renamed = internals.Internal("orbit.standard_runner", "StandardTrainer",
                                 ("_train_loop_fn", "_train_loop_function_v2"),
                                 "chunked_trainer.ChunkedTrainer.train")
    gone = internals.Internal("orbit.no_such_module", "", ("x",), "nothing")
    assert internals.missing([renamed, gone]) == [
        "orbit.standard_runner.StandardTrainer no longer has _train_loop_function_v2; used "
        "by chunked_trainer.ChunkedTrainer.train",
        "orbit.no_such_module: cannot import (No module named 'orbit.no_such_module'); "
        "used by nothing"]


# Private names of the standard library and Apache Beam, which the rule is not about:
# argparse's actions (`common.py`, `scale/options.py`), `os._exit` and Beam's option groups.
NOT_THE_LIBRARIES = {"_actions", "_SubParsersAction", "_exit", "_add_argparse_args"}


def _package_trees():
    return {path: ast.parse(path.read_text(encoding="utf-8"))
            for path in sorted((REPO_DIR / "cmlm_tf").rglob("*.py"))
            if path.name != "internals.py"}


def test_no_module_but_internals_reads_a_private_attribute_of_the_libraries():
    """Outside `internals.py`, every `x._name` (or `self._name`) names something cmlm_tf
    defines itself (a function, a class, a module variable, an attribute its own code
    assigns), and no name of `internals.USED` is read, written or overridden."""
    trees = _package_trees()
    defined = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                defined.add(node.attr)
    listed = {name for internal in internals.USED for name in internal.names}
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else \
                node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            if name is None or not name.startswith("_") or name.startswith("__") \
                    or name in NOT_THE_LIBRARIES:
                continue
            if name in listed or (isinstance(node, ast.Attribute) and name not in defined):
                found.append(f"{path.relative_to(REPO_DIR)}:{node.lineno} {name}")
    assert not found, f"private attributes of the libraries used outside internals: {found}"


class TupleAssigned:
    """Assigns its attributes as Keras' MultiHeadAttention assigns its einsum equations."""

    def __init__(self):
        (
            self._first,
            self._second,
        ) = 1, 2
        self._third: int = 3


def test_attributes_assigned_together_are_found():
    """`self.a, self.b = ...` assigns both: `missing` finds neither gone."""
    assigned = internals.Internal("tests.test_internals", "TupleAssigned",
                                  ("_first", "_second", "_third"), "nothing")
    renamed = internals.Internal("tests.test_internals", "TupleAssigned", ("_fourth",),
                                 "nothing")
    assert internals.missing([assigned, renamed]) == [
        "tests.test_internals.TupleAssigned no longer has _fourth; used by nothing"]


def test_the_attention_core_and_its_replacement():
    """`attention_core` reads a built MultiHeadAttention's settings, and its attention core
    replaced with `replace_compute_attention` is the one it calls."""
    import tensorflow as tf
    import tf_keras

    layer = tf_keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.25)
    inputs = tf.ones([1, 3, 8])
    layer(inputs, inputs)
    core = internals.attention_core(layer)
    assert (core.dropout_rate, core.key_dim) == (0.25, 4)
    assert isinstance(core.dropout_layer, tf_keras.layers.Dropout)
    assert internals.random_generator(core.dropout_layer) is not None
    calls = []

    def wrap(original):
        def compute_attention(*args, **kwargs):
            calls.append(len(args) + len(kwargs))
            return original(*args, **kwargs)
        return compute_attention

    internals.replace_compute_attention(layer, wrap)
    layer(inputs, inputs, training=False)
    assert calls == [5]  # query, key, value, attention_mask, training
