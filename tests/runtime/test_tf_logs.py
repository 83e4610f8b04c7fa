"""`cmlm_tf.runtime.tf_logs`: TensorFlow's C++ log level, set at the package's import."""

import ast
import os
import subprocess
import sys

from cmlm_tf.runtime import tf_logs
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
    assert root == ["cmlm_tf.runtime.tf_logs", "cmlm_tf.text.text_ops"]
    for module in root:
        path = REPO_DIR / (module.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    and "cmlm_tf" in ast.dump(n)]
        assert not imported, f"{module} imports the package: {ast.unparse(imported[0])}"


def test_cpp_log_filter_follows_the_log_level(capfd):
    """Lines written to file descriptor 2 meanwhile: C++ log lines below the level go;
    everything else stays, in order."""
    lines = ["W0000 00:00:1795644329.903746   15949 helpers.cc:364] Ignored output_format.",
             "I0000 00:00:1795644329.998592   15949 pass.cc:437] MLIR V1 pass",
             "2026-11-25 21:46:12.260032: I tensorflow/core/cpu_feature_guard.cc:210] CPU",
             "export: converting to TFLite (10 s so far)",
             "E0000 00:00:1795644329.998592   15949 pass.cc:1] a real error",
             "WARNING: All log messages before absl::InitializeLog() is called are written "
             "to STDERR"]
    for level, kept in ((2, [3, 4]), (3, [3]), (1, [0, 3, 4, 5]), (0, [0, 1, 2, 3, 4, 5])):
        with tf_logs.filtered_cpp_logs(level):
            for line in lines:
                os.write(2, (line + "\n").encode())
        assert capfd.readouterr().err.splitlines() == [lines[i] for i in kept], level


def test_routed_lines_of_a_child_process_go_to_the_file(capfd, tmp_path):
    """A child started inside the block writes to the same pipe: its lines that are not
    kept land in the file, and Python's own kept lines still reach stderr."""
    with open(tmp_path / "rest.log", "wb") as rest, \
            tf_logs.route_stderr(lambda line: line.startswith(b"mine: "), rest):
        print("mine: kept", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "tests.driver.children", "say_on_stderr",
                        "noise", "mine: also kept"], check=True, cwd=REPO_DIR)
    assert capfd.readouterr().err.splitlines() == ["mine: kept", "mine: also kept"]
    assert (tmp_path / "rest.log").read_text().splitlines() == ["noise"]
