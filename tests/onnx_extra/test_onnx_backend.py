"""An export's ONNX models (`--onnx`) loaded by sentence-transformers' own `backend="onnx"`
(Optimum and ONNX Runtime) in a fresh process that never imports cmlm_tf or TensorFlow
(`onnx_backend_child.py`): the float32 model gives the vectors of sentence-transformers'
torch model and of cmlm_tf, the int8 model (`model_kwargs={"file_name": ...}`) vectors close
to them.

Runs in a venv of its own (`.ci/run`): Optimum's ONNX support pins Transformers below 4.58,
which the MTEB venv's sentence-transformers 6 has outgrown.
"""

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import cmlm_tf
from cmlm_tf.export import export_lib, keras_hub_preset
from tests import test_docs
from tests.conftest import REPO_DIR, TESTS_DIR, subprocess_env
from tests.fixtures.fine_tune import fine_tuned_minilm

GOLDEN = TESTS_DIR / "testdata" / "st_standins_golden.json.gz"
EDGE_CASES = ["Ｗｈａｔ？ ＡＢＣ", "zero\u200bwidth\u200d join\u200cer", "مَرْحَبًا بِالعَالَمِ",
              "ក្រុង​ភ្នំពេញ", "Café crème BRÛLÉE", "", "x " * 300]


def _golden() -> dict:
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def onnx_exports(tmp_path_factory, minilm_hf_dir, tiny_run_dir):
    """name -> an export with `--onnx`: the LaBSE-layout stand-in (cased, CLS pooling, tanh
    Dense, Normalize), the XLM-R stand-in (XLM-RoBERTa, XLM-R's tokenizer, mean pooling),
    all-MiniLM-L6-v2 (mean pooling, Normalize), the same fine-tuned a few steps with
    `cmlm_tf/bitext`, and a tiny cmlm_tf run (a WordPiece vocabulary of its own)."""
    root = tmp_path_factory.mktemp("onnx_exports")
    sources = {"labse_layout": TESTS_DIR / "testdata" / "st_standins" / "labse_layout",
               "xlmr_layout": TESTS_DIR / "testdata" / "st_standins" / "xlmr_layout",
               "minilm": minilm_hf_dir}
    for name, source in sources.items():
        export_lib.export(str(root / name), hf_dir=str(source), onnx=True)
    run_dir = fine_tuned_minilm(minilm_hf_dir, tmp_path_factory.mktemp("minilm_bitext"))
    export_lib.export(str(root / "minilm_bitext"), model_dir=str(run_dir), seq_length=256,
                      onnx=True)
    export_lib.export(str(root / "tiny_run"), model_dir=str(tiny_run_dir), seq_length=24,
                      onnx=True)
    return {name: root / name for name in [*sources, "minilm_bitext", "tiny_run"]}


def _child(folder, texts, tmp_path) -> dict:
    """`onnx_backend_child.py` on `texts` in a fresh interpreter (Transformers told not to
    load TensorFlow, which the venv can see); checks it loaded neither cmlm_tf nor TF."""
    given, out = tmp_path / "texts.json", tmp_path / "vectors.json"
    given.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    child = subprocess.run([sys.executable, "-m", "tests.onnx_extra.onnx_backend_child",
                            str(folder), str(given), str(out)], capture_output=True, text=True,
                           env=dict(subprocess_env(), USE_TF="0"), cwd=REPO_DIR, timeout=3600)
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["imported"] == [] and result["runners"] == ["ORTModelForFeatureExtraction"]
    return {precision: np.asarray(vectors, np.float64)
            for precision, vectors in result["vectors"].items()}


def _check(theirs: dict, expected: np.ndarray, texts: list) -> None:
    """float32 within cosine 0.99999 of `expected`; int8 near it (all-MiniLM-L6-v2's lowest,
    on the empty text, is 0.97) and not the same: its measure is STS-B dev's Spearman
    (tests/mteb_extra/test_sentence_transformers_export.py)."""
    expected = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    for precision, bound in (("float32", 0.99999), ("int8", 0.95)):
        vectors = theirs[precision] / np.linalg.norm(theirs[precision], axis=1, keepdims=True)
        cosines = np.sum(vectors * expected, axis=1)
        assert cosines.min() >= bound, (precision, [(texts[i][:30], cosines[i])
                                                    for i in np.argsort(cosines)[:3]])
    # The int8 file ran: its vectors differ from float32's (by 7e-5 at most on the tiny run,
    # far above the 1e-7 of two float32 runs).
    assert np.abs(theirs["int8"] - theirs["float32"]).max() > 1e-5


def test_backend_onnx_gives_the_torch_models_vectors(onnx_exports, tmp_path):
    """The LaBSE-layout stand-in on its 136 UDHR texts in 68 languages and scripts, against
    the vectors sentence-transformers' torch model gave when the stand-in was made."""
    golden = _golden()
    theirs = _child(onnx_exports["labse_layout"] / "sentence_transformers", golden["texts"],
                    tmp_path)
    _check(theirs, np.asarray(golden["models"]["labse_layout"]["vectors"]), golden["texts"])


def test_backend_onnx_gives_the_xlmr_torch_models_and_cmlm_tf_vectors(onnx_exports, tmp_path):
    """The XLM-R stand-in (no `token_type_ids`, RoBERTa's positions) on its 136 UDHR texts,
    against the torch vectors of when it was made, and with the edge cases (Khmer,
    zero-width characters) against cmlm_tf's."""
    golden = _golden()
    folder = onnx_exports["xlmr_layout"] / "sentence_transformers"
    theirs = _child(folder, golden["texts"], tmp_path)
    _check(theirs, np.asarray(golden["models"]["xlmr_layout"]["vectors"]), golden["texts"])
    theirs = _child(folder, EDGE_CASES, tmp_path)
    _check(theirs, cmlm_tf.load(str(onnx_exports["xlmr_layout"])).encode(EDGE_CASES),
           EDGE_CASES)


@pytest.mark.parametrize("name", ["minilm", "minilm_bitext", "tiny_run"])
def test_backend_onnx_gives_cmlm_tf_vectors(onnx_exports, name, tmp_path):
    """The imported all-MiniLM-L6-v2, the same fine-tuned with `cmlm_tf/bitext`, and a tiny
    cmlm_tf run, on the 136 UDHR texts, 100 English and Spanish verses and the edge cases,
    against cmlm_tf's vectors."""
    texts = _golden()["texts"] + keras_hub_preset.natural_probe_texts() + EDGE_CASES
    theirs = _child(onnx_exports[name] / "sentence_transformers", texts, tmp_path)
    _check(theirs, cmlm_tf.load(str(onnx_exports[name])).encode(texts), texts)


def test_the_documented_onnx_lines_run_without_cmlm_tf(onnx_exports, tmp_path):
    """docs/serving.md's ONNX lines, pasted as a user would, beside an `exports/cmlm_tiny`
    that holds an export with `--onnx`."""
    (snippet,) = [code for _, code in test_docs.python_blocks(REPO_DIR / "docs" / "serving.md")
                  if test_docs.ONNX_SNIPPETS in code]
    (tmp_path / "exports").mkdir()
    (tmp_path / "exports" / "cmlm_tiny").symlink_to(onnx_exports["labse_layout"])
    script = tmp_path / "snippet.py"
    script.write_text(snippet, encoding="utf-8")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                            text=True, env=dict(os.environ, USE_TF="0"), timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
