"""The package's shape, read from its source (docs/architecture.md): no import cycles, the
losses and models below the training mechanics, no class defined inside a function, no
module state written at run time, and tests that mirror the package."""

import ast
import pathlib
import re

from tests.conftest import REPO_DIR

PACKAGE = REPO_DIR / "cmlm_tf"


def _modules():
    """{dotted name: path} of every module of the package."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO_DIR).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imports(name: str, path: pathlib.Path, modules) -> set:
    """The package modules `name` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                module = f"{package}.{module}" if module else package
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules
                       else module for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in modules and target != name)
    return found


def _graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_the_package_has_no_import_cycle():
    # The package root counts like every module: `import cmlm_tf` and `from cmlm_tf import
    # load` are edges to it.
    graph = _graph()
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


def _floors():
    """{path in cmlm_tf/ as docs/architecture.md names it (`x.py`, `x/`, `convert_*.py`):
    floor} from the page's floor table."""
    text = (REPO_DIR / "docs" / "architecture.md").read_text(encoding="utf-8")
    return {entry: int(floor)
            for floor, cells in re.findall(r"^\| (\d) \| ([^|]+) \|", text, re.MULTILINE)
            for entry in re.findall(r"`([^`]+)`", cells)}


def _floor_of(name, floors):
    """The floor of the longest entry that names the module (`export/__main__.py` before
    `export/`)."""
    relative = _modules()[name].relative_to(PACKAGE).as_posix()
    matching = [(len(entry), floor) for entry, floor in floors.items()
                if re.fullmatch(re.escape(entry).replace(r"\*", "[^/]*")
                                + (".*" if entry.endswith("/") else ""), relative)]
    return max(matching)[1] if matching else None


def test_imports_follow_the_floors_of_the_architecture_page():
    """Every module is on a floor of docs/architecture.md and imports (at module level or
    inside a function) only from its floor or below."""
    floors = _floors()
    graph = _graph()
    unplaced = sorted(name for name in graph if _floor_of(name, floors) is None)
    assert not unplaced, f"modules on no floor of docs/architecture.md: {unplaced}"
    upward = sorted(f"{name} (floor {_floor_of(name, floors)}) imports {target} "
                    f"(floor {_floor_of(target, floors)})"
                    for name, targets in graph.items() for target in targets
                    if _floor_of(target, floors) > _floor_of(name, floors))
    assert not upward, upward


def test_losses_and_models_never_import_the_training_package():
    offending = {name: sorted(t for t in targets if t.startswith("cmlm_tf.training"))
                 for name, targets in _graph().items()
                 if name.startswith(("cmlm_tf.losses", "cmlm_tf.modeling"))}
    assert not {name: targets for name, targets in offending.items() if targets}


def test_no_class_is_defined_inside_a_function():
    nested = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nested += [f"{name}.{node.name}: class {inner.name}"
                           for inner in ast.walk(node) if isinstance(inner, ast.ClassDef)]
    assert not nested, nested


def test_no_task_overrides_the_train_step():
    """Tasks shape the one train step through `ranked_part`, `forward_pass` and
    `assemble_outputs` (docs/architecture.md, "A new objective")."""
    overriding = []
    for name, path in _modules().items():
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


def _module_level_names(tree) -> set:
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def _package_aliases(tree, modules) -> set:
    """Names a module binds to modules of the package (`from cmlm_tf.data import pipeline`,
    `import cmlm_tf.commands.train as train`)."""
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cmlm_tf"):
            aliases.update(alias.asname or alias.name for alias in node.names
                           if f"{node.module}.{alias.name}" in modules)
        elif isinstance(node, ast.Import):
            aliases.update(alias.asname for alias in node.names
                           if alias.asname and alias.name in modules)
    return aliases


def test_no_module_state_is_written_at_run_time():
    """Parameters travel as arguments: no `global` statement, no function that assigns into
    a module-level variable of its own module (`_STATE[0] = ...`) or changes one in place
    (`_SEEN.add(...)`), and no assignment to another package module's attributes
    (`pipeline.RESUME = ...`)."""
    modules = _modules()
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own, others = _module_level_names(tree), _package_aliases(tree, modules)
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
    modules = _modules()
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
                name in _imports(test.stem, test, modules)
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
    paths = [*_modules().values()]
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


def _is_python_code(text: str) -> bool:
    """A string that parses as Python with an import or a function call in it (a script),
    which YAML, TSV and sentences never do."""
    if "\n" not in text.strip() and ";" not in text:
        return False
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    return any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in ast.walk(tree))


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
                    and (node.value == "-c" or _is_python_code(node.value))):
                found.append(f"{path.relative_to(REPO_DIR)}:{node.lineno}")
    assert not found, f"Python code kept in a string: {found}"
