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
    # Every module may import the package itself (`import cmlm_tf` for `cmlm_tf.load`):
    # Python has imported it first anyway, so those edges are left out.
    graph = {name: targets - {"cmlm_tf"} for name, targets in _graph().items()}
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
    relative = _modules()[name].relative_to(PACKAGE).as_posix()
    for entry, floor in floors.items():
        pattern = re.escape(entry).replace(r"\*", "[^/]*") + (".*" if entry.endswith("/")
                                                              else "")
        if re.fullmatch(pattern, relative):
            return floor
    return None


def test_imports_follow_the_floors_of_the_architecture_page():
    """Every module is on a floor of docs/architecture.md and imports (at module level or
    inside a function) only from its floor or below; the package root's `load` is the one
    upward call the page names."""
    floors = _floors()
    graph = _graph()
    unplaced = sorted(name for name in graph if _floor_of(name, floors) is None)
    assert not unplaced, f"modules on no floor of docs/architecture.md: {unplaced}"
    upward = sorted(f"{name} (floor {_floor_of(name, floors)}) imports {target} "
                    f"(floor {_floor_of(target, floors)})"
                    for name, targets in graph.items() for target in targets
                    if _floor_of(target, floors) > _floor_of(name, floors)
                    and (name, target) != ("cmlm_tf", "cmlm_tf.inference"))
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
    `import cmlm_tf.train as train`)."""
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


def _named_by_tests(modules) -> dict:
    """{module: the test files that import it or name it in full (`-m cmlm_tf.train`)}."""
    named = {name: [] for name in modules}
    for path in (REPO_DIR / "tests").rglob("test_*.py"):
        text = path.read_text(encoding="utf-8")
        mentioned = set(re.findall(r"\bcmlm_tf(?:\.\w+)+", text)) & set(modules)
        for name in _imports(path.stem, path, modules) | mentioned:
            named[name].append(path.relative_to(REPO_DIR / "tests"))
    return named


def test_tests_mirror_the_package_and_name_every_module():
    """Each subpackage of cmlm_tf/ has its folder of tests, and a test there imports or runs
    each of its modules (cmlm_tf/data/bitext.py: a test in tests/data/); a top-level module
    is named by a test in tests/ itself or in tests/driver/ (the command-line runs)."""
    modules = _modules()
    subpackages = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))
    assert subpackages, "no subpackage found"
    missing = [name for name in subpackages if not (REPO_DIR / "tests" / name).is_dir()]
    assert not missing, f"no tests/<name>/ folder for cmlm_tf/<name>/: {missing}"
    unnamed = []
    for name, tests in sorted(_named_by_tests(modules).items()):
        path = modules[name]
        if path.name in ("__init__.py", "__main__.py"):
            continue
        parts = path.relative_to(PACKAGE).parts
        homes = {parts[0]} if len(parts) > 1 else {".", "driver"}
        if not any(str(test.parent) in homes for test in tests):
            unnamed.append(f"{name} (named by {[str(t) for t in tests] or 'no test'})")
    assert not unnamed, f"modules no test of their folder imports or runs: {unnamed}"
