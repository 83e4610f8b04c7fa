"""The repository read as source, for the rules of tests/test_architecture.py: the package's
modules and their imports, the floor table of docs/architecture.md, and what a module binds at
its top level."""

import ast
import pathlib
import re

from tests.conftest import REPO_DIR

PACKAGE = REPO_DIR / "cmlm_tf"


def package_modules():
    """{dotted name: path} of every module of the package."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO_DIR).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def import_targets(name: str, path: pathlib.Path, modules) -> set:
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


def import_graph():
    modules = package_modules()
    return {name: import_targets(name, path, modules) for name, path in modules.items()}


def floor_entries():
    """{path in cmlm_tf/ as docs/architecture.md names it (`x.py`, `x/`, `convert_*.py`):
    floor} from the page's floor table."""
    text = (REPO_DIR / "docs" / "architecture.md").read_text(encoding="utf-8")
    return {entry: int(floor)
            for floor, cells in re.findall(r"^\| (\d) \| ([^|]+) \|", text, re.MULTILINE)
            for entry in re.findall(r"`([^`]+)`", cells)}


def floor_of(name, floors):
    """The floor of the longest entry that names the module (`export/__main__.py` before
    `export/`)."""
    relative = package_modules()[name].relative_to(PACKAGE).as_posix()
    matching = [(len(entry), floor) for entry, floor in floors.items()
                if re.fullmatch(re.escape(entry).replace(r"\*", "[^/]*")
                                + (".*" if entry.endswith("/") else ""), relative)]
    return max(matching)[1] if matching else None


def module_level_names(tree) -> set:
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def package_aliases(tree, modules) -> set:
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


def is_python_code(text: str) -> bool:
    """A string that parses as Python with an import or a function call in it (a script),
    which YAML, TSV and sentences never do."""
    if "\n" not in text.strip() and ";" not in text:
        return False
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    return any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in ast.walk(tree))


SOURCE_FOLDERS = ("cmlm_tf", "experiments", "benchmarks", "tests", "export")


def source_files(root=REPO_DIR):
    """{path from `root` (`cmlm_tf/data/bitext.py`): parsed module} of every Python file of
    the package, the scripts, the tests and `export/`."""
    return {path.relative_to(root).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
            for folder in SOURCE_FOLDERS for path in sorted((root / folder).rglob("*.py"))}


def functions(tree):
    """(function, whether it is a method: defined in a class body) for each of `tree`."""
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield child, isinstance(node, ast.ClassDef)


def positional_parameters(function):
    """The (parameter, its default or None) pairs a call may fill by position, without the
    `self` or `cls` of a method."""
    parameters = [*function.args.posonlyargs, *function.args.args]
    defaults = function.args.defaults
    pairs = list(zip(parameters, [None] * (len(parameters) - len(defaults)) + list(defaults)))
    return pairs[1:] if pairs and pairs[0][0].arg in ("self", "cls") else pairs


def is_boolean(parameter, default) -> bool:
    """A parameter annotated `bool` or defaulting to `True` or `False`."""
    annotation = parameter.annotation
    return (isinstance(annotation, ast.Name) and annotation.id == "bool") or (
        isinstance(default, ast.Constant) and isinstance(default.value, bool))


def nested_imports(tree):
    """(name of the innermost function or class around it, the import) for each `import` or
    `from ... import` inside a function or a class body of `tree`."""
    found = []

    def visit(node, owner):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, child.name)
            elif isinstance(child, (ast.Import, ast.ImportFrom)) and owner:
                found.append((owner, child))
            else:
                visit(child, owner)

    visit(tree, None)
    return found


# The longest a module and a function of the repository's Python may be, in lines (docstrings
# and decorators included).
MODULE_LINES, FUNCTION_LINES = 400, 80


def too_long(root=REPO_DIR) -> list:
    """The modules over `MODULE_LINES` and the functions over `FUNCTION_LINES` of the
    Python files in `root`'s `SOURCE_FOLDERS`."""
    found = []
    for folder in SOURCE_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            relative, text = path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")
            if len(text.splitlines()) > MODULE_LINES:
                found.append(f"{relative}: {len(text.splitlines())} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    start = min([node.lineno] + [item.lineno for item in node.decorator_list])
                    if node.end_lineno - start + 1 > FUNCTION_LINES:
                        found.append(f"{relative}: {node.name}(), "
                                     f"{node.end_lineno - start + 1} lines")
    return found
