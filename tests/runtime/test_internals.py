"""The libraries' private attributes cmlm_tf uses are still there (`cmlm_tf.runtime.internals`)."""

import ast
import importlib.metadata
import re

import pytest
import tensorflow as tf
import tf_keras
from official.nlp.modeling.layers import text_layers

from cmlm_tf.runtime import internals
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


def _defined(trees) -> set:
    """The names cmlm_tf defines itself: functions, classes, variables and the attributes
    its own code assigns to `self`."""
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
    return defined


LISTED = {name for internal in internals.USED for name in internal.names}


def test_no_module_but_internals_reads_a_private_attribute_of_the_libraries():
    """Outside `internals.py`, every `x._name` (or `self._name`) names something cmlm_tf
    defines itself (a function, a class, a module variable, an attribute its own code
    assigns), and no name of `internals.USED` is read, written or overridden."""
    trees = _package_trees()
    defined, listed = _defined(trees), LISTED
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


_BY_NAME = {"getattr", "setattr", "hasattr", "delattr"}


def _imported_modules(node) -> list:
    """The dotted names an import statement binds (`from a.b import c`: `a.b.c`)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [f"{node.module}.{alias.name}" for alias in node.names]
    return []


def _escapes(tree, defined) -> list:
    """(line, what) for each way around `internals.py` in `tree` that the attribute rule
    cannot see: an import of `tensorflow.python` (TensorFlow's private modules), a write
    past Keras' attribute tracking with `object.__setattr__`, and a private name given as a
    string to `getattr`/`setattr`/`hasattr`/`delattr`, except a class's own attribute on
    `self` (`getattr(self, "_initialized", False)`: a name in `defined`, not in `USED`)."""
    found = []
    for node in ast.walk(tree):
        found += [(node.lineno, f"imports {module}") for module in _imported_modules(node)
                  if module == "tensorflow.python" or module.startswith("tensorflow.python.")]
        if isinstance(node, ast.Attribute) and node.attr in ("__setattr__", "__delattr__") \
                and isinstance(node.value, ast.Name) and node.value.id == "object":
            found.append((node.lineno, f"object.{node.attr}"))
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _BY_NAME and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            continue
        name = node.args[1].value
        if not name.startswith("_") or name.startswith("__"):
            continue
        on_self = isinstance(node.args[0], ast.Name) and node.args[0].id == "self"
        if not on_self or name not in defined or name in LISTED:
            found.append((node.lineno, f"{node.func.id}(..., {name!r})"))
    return found


def test_no_module_but_internals_imports_tensorflow_python_or_goes_past_keras_tracking():
    """Outside `internals.py` no module imports `tensorflow.python`, calls
    `object.__setattr__`, or names a private attribute in a string (`_escapes`)."""
    trees = _package_trees()
    defined = _defined(trees)
    found = [f"{path.relative_to(REPO_DIR)}:{line} {what}" for path, tree in trees.items()
             for line, what in _escapes(tree, defined)]
    assert not found, ("private TensorFlow modules, untracked writes or private attributes "
                       "by name outside cmlm_tf/runtime/internals.py (add a function there): "
                       f"{found}")


@pytest.mark.parametrize("source, what", [
    ("import tensorflow.python.ops.control_flow_util as cfu",
     "imports tensorflow.python.ops.control_flow_util"),
    ("from tensorflow.python.checkpoint import checkpoint_management",
     "imports tensorflow.python.checkpoint.checkpoint_management"),
    ("from tensorflow import python", "imports tensorflow.python"),
    ("object.__setattr__(layer, 'marked', True)", "object.__setattr__"),
    ("getattr(tokenizer, '_model_serialized_proto', None)",
     "getattr(..., '_model_serialized_proto')"),
    ("setattr(layer, '_own', 1)", "setattr(..., '_own')"),
    ("hasattr(self, '_not_assigned')", "hasattr(..., '_not_assigned')"),
    ("getattr(self, '_train_iter', None)", "getattr(..., '_train_iter')"),
])
def test_each_way_around_internals_is_found(source, what):
    assert _escapes(ast.parse(source), {"_own", "_train_iter"}) == [(1, what)]


def test_a_class_reading_its_own_attribute_by_name_is_not_an_escape():
    source = "getattr(self, '_own', None), getattr(layer, '__name__'), getattr(x, 'public')"
    assert _escapes(ast.parse(source), {"_own"}) == []


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
    assigned = internals.Internal("tests.runtime.test_internals", "TupleAssigned",
                                  ("_first", "_second", "_third"), "nothing")
    renamed = internals.Internal("tests.runtime.test_internals", "TupleAssigned", ("_fourth",),
                                 "nothing")
    assert internals.missing([assigned, renamed]) == [
        "tests.runtime.test_internals.TupleAssigned no longer has _fourth; used by nothing"]


def test_the_attention_core_and_its_replacement():
    """`attention_core` reads a built MultiHeadAttention's settings, and its attention core
    replaced with `replace_compute_attention` is the one it calls."""
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


def test_in_xla_context_inside_a_compiled_function_only():
    seen = []

    def record():
        seen.append(internals.in_xla_context())
        return tf.constant(0)

    record()
    tf.function(record)()
    tf.function(record, jit_compile=True)()
    assert seen == [False, False, True]


def test_the_checkpoint_state_lists_relative_paths_with_their_timestamps(tmp_path):
    """As `tf.train.CheckpointManager` reads it back, and movable: the entries are relative."""
    paths = [str(tmp_path / "ckpt-1"), str(tmp_path / "ckpt-2")]
    internals.write_checkpoint_state(str(tmp_path), paths, [10.0, 20.0], 5.0)
    text = (tmp_path / "checkpoint").read_text(encoding="utf-8")
    assert 'model_checkpoint_path: "ckpt-2"' in text and str(tmp_path) not in text
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert list(state.all_model_checkpoint_paths) == paths
    assert list(state.all_model_checkpoint_timestamps) == [10.0, 20.0]
    assert state.last_preserved_timestamp == 5.0


def test_an_untracked_layer_stays_out_of_the_weights():
    """A layer assigned with `set_untracked` is reachable but adds no weights (nor
    checkpoint entries); one assigned plainly does."""
    def built_dense():
        layer = tf_keras.layers.Dense(2)
        layer.build((None, 3))
        return layer

    untracked, tracked, extra = built_dense(), built_dense(), built_dense()
    internals.set_untracked(untracked, "extra", extra)
    tracked.extra = extra
    assert untracked.extra is extra
    assert (len(untracked.weights), len(tracked.weights)) == (2, 4)


def test_the_sentencepiece_model_of_model_gardens_tokenizer(tiny_sp_model):
    layer = text_layers.SentencepieceTokenizer(model_file_path=str(tiny_sp_model),
                                               lower_case=False)
    assert internals.sentencepiece_model(layer) == tiny_sp_model.read_bytes()
    assert internals.sentencepiece_model(tf_keras.layers.Dense(2)) is None
