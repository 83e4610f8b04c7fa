"""`cmlm_tf.text.text_ops`: `import cmlm_tf` registers the TF-Text ops the exports need, as
soon as TensorFlow is imported, or says to install and import tensorflow_text."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_DIR


@pytest.mark.parametrize("first", ["cmlm_tf", "nothing"])
def test_import_cmlm_tf_registers_the_text_ops_the_exports_need(tiny_export, first):
    """After `import cmlm_tf`, `tf.saved_model.load` and `hub.KerasLayer` read serving/1 and
    the preprocessor without `import tensorflow_text`; without it, TensorFlow cannot."""
    result = subprocess.run([sys.executable, "-m", "tests.driver.children", "load_export",
                             first, str(tiny_export)],
                            cwd=REPO_DIR, env=dict(os.environ, PYTHONPATH=str(REPO_DIR)),
                            capture_output=True, text=True, timeout=3600)
    if first == "cmlm_tf":
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.split() == ["1", "1"]
    else:
        assert result.returncode != 0 and "not registered" in result.stderr


def test_without_tensorflow_text_the_warning_says_import_tensorflow_text():
    result = subprocess.run([sys.executable, "-m", "tests.driver.children",
                             "import_without_tensorflow_text"], cwd=REPO_DIR,
                            env=dict(os.environ, PYTHONPATH=str(REPO_DIR)),
                            capture_output=True, text=True, timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "import tensorflow_text" in result.stderr and "pip install" in result.stderr
