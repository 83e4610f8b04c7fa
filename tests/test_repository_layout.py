"""The repository's layout, read from its source: a test file for each module of the package,
test folders that mirror its subpackages, the length rule's reach (the rule itself is in
test_architecture.py), and no test that keeps Python code in a string."""

import ast
import pathlib
import re

from tests import source_tree
from tests.conftest import REPO_DIR
from tests.source_tree import PACKAGE

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
    extra = sorted(folders - subpackages - {"driver", "fixtures", "mteb_extra",
                                                   "onnx_extra"})
    assert not extra, f"tests/ folders with no cmlm_tf/ subpackage of their name: {extra}"


def test_the_length_rule_reads_the_tests_and_export(tmp_path):
    """A test module, a fixture and a function of export/ are held to the package's limits."""
    body = "".join(f"    value_{i} = {i}\n" for i in range(source_tree.FUNCTION_LINES - 1))
    files = {"tests/test_long.py": "x = 1\n" * (source_tree.MODULE_LINES + 1),
             "tests/fixtures/models.py": f"@pytest.fixture\ndef tiny():\n{body}",
             "export/export_tfhub.py": f"def main():\n{body}    return 0\n",
             "cmlm_tf/short.py": f"def short():\n{body}"}
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text, encoding="utf-8")
    assert sorted(source_tree.too_long(tmp_path)) == [
        f"export/export_tfhub.py: main(), {source_tree.FUNCTION_LINES + 1} lines",
        f"tests/fixtures/models.py: tiny(), {source_tree.FUNCTION_LINES + 1} lines",
        f"tests/test_long.py: {source_tree.MODULE_LINES + 1} lines"]


# The files of the repository's rules, which try them on sources kept in strings.
RULE_FILES = ("test_architecture.py", "test_repository_layout.py")


def test_no_test_keeps_python_code_in_a_string():
    """A child process runs a module function by name (`python -m tests.driver.children
    NAME`), never code passed with `-c` or written to a file."""
    found = []
    for path in sorted((REPO_DIR / "tests").rglob("*.py")):
        if path.parent == REPO_DIR / "tests" and path.name in RULE_FILES:
            continue  # this check's own "-c", and the sources the rules are tried on
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
