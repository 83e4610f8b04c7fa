"""`cmlm_tf.tf_logs`: TensorFlow's C++ log level, set at the package's import."""

import ast

from cmlm_tf import tf_logs
from tests.conftest import REPO_DIR


def test_sets_a_level_unless_the_user_did(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.setattr(tf_logs.os.path, "exists", lambda path: False)  # no NVIDIA driver
    tf_logs.quiet_tensorflow_logs()
    assert tf_logs.os.environ["TF_CPP_MIN_LOG_LEVEL"] == "3"
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    tf_logs.quiet_tensorflow_logs()
    assert tf_logs.os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"


def test_the_package_root_imports_only_modules_that_import_nothing_of_it():
    """`cmlm_tf/__init__.py` runs at every import of the package: what it imports at its
    top level imports nothing of the package back (no loop through the root)."""
    def package_imports(path):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        return [node.module for node in tree.body if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("cmlm_tf")] + [
            alias.name for node in tree.body if isinstance(node, ast.Import)
            for alias in node.names if alias.name.startswith("cmlm_tf")]

    root = package_imports(REPO_DIR / "cmlm_tf" / "__init__.py")
    assert root == ["cmlm_tf.tf_logs", "cmlm_tf.text_ops"]
    for module in root:
        path = REPO_DIR / (module.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    and "cmlm_tf" in ast.dump(n)]
        assert not imported, f"{module} imports the package: {ast.unparse(imported[0])}"
