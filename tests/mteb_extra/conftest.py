"""What the MTEB venv's tests share: all-MiniLM-L6-v2 exported once, with its
sentence-transformers folder; the same model fine-tuned a few steps with `cmlm_tf/bitext`,
and a tiny cmlm_tf run, each exported with every format these tests load."""

import pytest

from cmlm_tf.export import export_lib
from tests.conftest import built_once
from tests.fixtures.fine_tune import fine_tuned_minilm


@pytest.fixture(scope="session")
def minilm_export(tmp_path_factory, minilm_hf_dir):
    """The real all-MiniLM-L6-v2 exported with `--onnx` (its sentence-transformers folder
    with the ONNX models), less the TFLite model, which neither MTEB nor sentence-transformers
    reads: this folder runs alone in CI, on a short clock. Built once for both test modules,
    which pytest-xdist runs in two workers (`built_once`)."""
    return built_once(tmp_path_factory, "minilm_onnx_export", lambda path: export_lib.export(
        str(path), hf_dir=str(minilm_hf_dir), onnx=True))


@pytest.fixture(scope="session")
def minilm_bitext_export(tmp_path_factory, minilm_hf_dir):
    """all-MiniLM-L6-v2 fine-tuned with `cmlm_tf/bitext` for 3 steps, exported with
    `--onnx --keras_hub` (its sentence-transformers folder, ONNX models and KerasHub preset,
    the preset's id mismatch measured on the export's own natural probe). Built once."""
    return built_once(tmp_path_factory, "minilm_bitext_export",
                      lambda path: export_lib.export(
                          str(path), model_dir=str(fine_tuned_minilm(
                              minilm_hf_dir, tmp_path_factory.mktemp("minilm_bitext"))),
                          seq_length=256, onnx=True, keras_hub=True))


@pytest.fixture(scope="session")
def tiny_keras_hub_export(tmp_path_factory, tiny_run_dir):
    """The tiny cmlm_tf run of `tiny_run_dir` (a WordPiece vocabulary of its own, mean
    pooling, normalised) exported with `--onnx --keras_hub`. Built once."""
    return built_once(tmp_path_factory, "tiny_keras_hub_export", lambda path: export_lib.export(
        str(path), model_dir=str(tiny_run_dir), seq_length=24, onnx=True, keras_hub=True))
