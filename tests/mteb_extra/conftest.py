"""What the MTEB venv's tests share: all-MiniLM-L6-v2 exported once, with its
sentence-transformers folder."""

import pytest


@pytest.fixture(scope="session")
def minilm_export(tmp_path_factory, minilm_hf_dir):
    """The real all-MiniLM-L6-v2 exported with `--sentence_transformers`, less the TFLite
    model, which neither MTEB nor sentence-transformers reads: this folder runs alone in CI,
    on a short clock."""
    from cmlm_tf.export import export_lib

    export_dir = tmp_path_factory.mktemp("exports") / "minilm"
    export_lib.export(str(export_dir), hf_dir=str(minilm_hf_dir), sentence_transformers=True)
    return export_dir
