"""`cmlm_tf.text_ops`: `import cmlm_tf` registers the TF-Text ops the exports need, as
soon as TensorFlow is imported, or says to install and import tensorflow_text."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_DIR

_LOAD_EXPORT = """
import sys
if sys.argv[1] == "cmlm_tf":
    import cmlm_tf  # noqa: F401  (before TensorFlow, as a user's script may)
import tensorflow as tf
import tensorflow_hub as hub
export = sys.argv[2]
serving = tf.saved_model.load(export + "/serving/1").signatures["serving_default"]
print(serving(sentences=tf.constant(["a cat"]))["embeddings"].shape[0])
print(hub.KerasLayer(export + "/preprocessor")(tf.constant(["a cat"]))["input_word_ids"].shape[0])
"""


@pytest.mark.parametrize("first", ["cmlm_tf", "nothing"])
def test_import_cmlm_tf_registers_the_text_ops_the_exports_need(tiny_export, first):
    """After `import cmlm_tf`, `tf.saved_model.load` and `hub.KerasLayer` read serving/1 and
    the preprocessor without `import tensorflow_text`; without it, TensorFlow cannot."""
    result = subprocess.run([sys.executable, "-c", _LOAD_EXPORT, first, str(tiny_export)],
                            cwd=REPO_DIR, env=dict(os.environ, PYTHONPATH=str(REPO_DIR)),
                            capture_output=True, text=True, timeout=3600)
    if first == "cmlm_tf":
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.split() == ["1", "1"]
    else:
        assert result.returncode != 0 and "not registered" in result.stderr


def test_without_tensorflow_text_the_warning_says_import_tensorflow_text():
    code = ("import sys; sys.modules['tensorflow_text'] = None\n"
            "import cmlm_tf, tensorflow\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_DIR,
                            env=dict(os.environ, PYTHONPATH=str(REPO_DIR)),
                            capture_output=True, text=True, timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "import tensorflow_text" in result.stderr and "pip install" in result.stderr
