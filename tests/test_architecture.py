"""The package's shape, read from its source (docs/architecture.md): no import cycles, the
losses and models below the training mechanics, no class defined inside a function, no
module state written at run time, and tests that mirror the package."""

import ast
import pathlib
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


# Modules tested by a file of another name: {module's path in cmlm_tf/: its test file}. The
# two-line modules that keep `python -m cmlm_tf.<command>` working are run by test_docs
# (`--help` of every documented command); the encoder is tested through the export.
TESTED_ELSEWHERE = {
    "build_vocab.py": "tests/test_docs.py",
    "convert_hf_bert.py": "tests/test_docs.py",
    "convert_nli.py": "tests/test_docs.py",
    "embed_corpus.py": "tests/test_docs.py",
    "evaluate.py": "tests/test_docs.py",
    "import_model.py": "tests/test_docs.py",
    "mine.py": "tests/test_docs.py",
    "mine_hard_negatives.py": "tests/test_docs.py",
    "similarity.py": "tests/test_docs.py",
    "train.py": "tests/test_docs.py",
    "commands/export.py": "tests/driver/test_cli.py",
    "commands/similarity.py": "tests/driver/test_cli.py",
    "modeling/sentence_encoder.py": "tests/export/test_serving.py",
}

# The longest a module and a function of cmlm_tf/, experiments/ and benchmarks/ may be, in
# lines (docstrings and decorators included).
MODULE_LINES, FUNCTION_LINES = 400, 80
# Folders of scripts held to the package's length limits.
SCRIPT_FOLDERS = ("experiments", "benchmarks")


def _test_file_of(relative: pathlib.PurePath) -> pathlib.Path:
    """tests/x/test_y.py for cmlm_tf/x/y.py."""
    return REPO_DIR / "tests" / relative.parent / f"test_{relative.name}"


def test_each_module_has_a_test_file_of_its_name_or_an_entry_in_the_table():
    modules = source_tree.package_modules()
    missing, stale = [], []
    for name, path in sorted(modules.items()):
        relative = path.relative_to(PACKAGE)
        if path.name in ("__init__.py", "__main__.py"):
            continue
        listed = TESTED_ELSEWHERE.get(relative.as_posix())
        if listed is None:
            if not _test_file_of(relative).is_file():
                missing.append(f"cmlm_tf/{relative.as_posix()}: no "
                               f"{_test_file_of(relative).relative_to(REPO_DIR)}")
            continue
        test = REPO_DIR / listed
        if _test_file_of(relative).is_file() or not test.is_file() or not (
                name in source_tree.import_targets(test.stem, test, modules)
                or re.search(rf"\b{re.escape(name)}\b", test.read_text(encoding="utf-8"))):
            stale.append(f"cmlm_tf/{relative.as_posix()}: {listed}")
    assert not missing, f"modules with no test file of their name and no table entry: {missing}"
    assert not stale, ("TESTED_ELSEWHERE entries whose module has its own test file now, or "
                       f"whose test file does not exist or does not name the module: {stale}")
    gone = sorted(set(TESTED_ELSEWHERE) - {path.relative_to(PACKAGE).as_posix()
                                           for path in modules.values()})
    assert not gone, f"TESTED_ELSEWHERE names modules that do not exist: {gone}"


def test_each_test_folder_mirrors_a_subpackage():
    subpackages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    folders = {path.parent.name for path in (REPO_DIR / "tests").glob("*/__init__.py")}
    extra = sorted(folders - subpackages - {"driver", "mteb_extra", "onnx_extra"})
    assert not extra, f"tests/ folders with no cmlm_tf/ subpackage of their name: {extra}"


def _length_checked_files():
    """The package's modules and the scripts of `SCRIPT_FOLDERS`, as paths from the root."""
    paths = [*source_tree.package_modules().values()]
    for folder in SCRIPT_FOLDERS:
        paths += (REPO_DIR / folder).rglob("*.py")
    return sorted(path.relative_to(REPO_DIR) for path in paths)


def test_no_module_or_function_is_too_long():
    too_long = []
    for relative in _length_checked_files():
        text = (REPO_DIR / relative).read_text(encoding="utf-8")
        if len(text.splitlines()) > MODULE_LINES:
            too_long.append(f"{relative.as_posix()}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [item.lineno for item in node.decorator_list])
                if node.end_lineno - start + 1 > FUNCTION_LINES:
                    too_long.append(f"{relative.as_posix()}: {node.name}(), "
                                    f"{node.end_lineno - start + 1} lines")
    assert not too_long, (f"over {MODULE_LINES} lines a module or {FUNCTION_LINES} a "
                          f"function: {too_long}")


def test_no_test_keeps_python_code_in_a_string():
    """A child process runs a module function by name (`python -m tests.driver.children
    NAME`), never code passed with `-c` or written to a file."""
    found = []
    for path in sorted((REPO_DIR / "tests").rglob("*.py")):
        if path == pathlib.Path(__file__).resolve():
            continue  # this check's own "-c"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef,
                                           ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings
                    and (node.value == "-c" or source_tree.is_python_code(node.value))):
                found.append(f"{path.relative_to(REPO_DIR)}:{node.lineno}")
    assert not found, f"Python code kept in a string: {found}"


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
