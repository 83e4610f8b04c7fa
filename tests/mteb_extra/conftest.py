"""What the MTEB venv's tests share: all-MiniLM-L6-v2 exported once, with its
sentence-transformers folder."""

import pytest

from tests.conftest import built_once


@pytest.fixture(scope="session")
def minilm_export(tmp_path_factory, minilm_hf_dir):
    """The real all-MiniLM-L6-v2 exported with `--onnx` (its sentence-transformers folder
    with the ONNX models), less the TFLite model, which neither MTEB nor sentence-transformers
    reads: this folder runs alone in CI, on a short clock. Built once for both test modules,
    which pytest-xdist runs in two workers (`built_once`)."""
    from cmlm_tf.export import export_lib

    return built_once(tmp_path_factory, "minilm_onnx_export", lambda path: export_lib.export(
        str(path), hf_dir=str(minilm_hf_dir), onnx=True))
