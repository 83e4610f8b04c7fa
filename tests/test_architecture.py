"""The package's shape, read from its source (docs/architecture.md): no import cycles, the
losses and models below the training mechanics, and no class defined inside a function."""

import ast
import pathlib

from conftest import REPO_DIR

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
