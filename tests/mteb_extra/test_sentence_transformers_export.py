"""An export's sentence-transformers folder (`--sentence_transformers`, with its ONNX models
by `--onnx`) loaded by sentence-transformers and ONNX Runtime in a fresh process that never
imports cmlm_tf (`sentence_transformers_child.py`): its vectors and token ids are cmlm_tf's,
MTEB scores it as it scores cmlm_tf's own adapter, and its int8 ONNX model scores as its
float32 one.

Runs in the MTEB venv, which has torch and sentence-transformers (`.ci/run`).
"""

import gzip
import json
import subprocess
import sys

import mteb
import numpy as np
import pytest

import cmlm_tf
from cmlm_tf.evaluation import mteb_adapter, readers
from cmlm_tf.export import export_lib
from tests import test_docs
from tests.conftest import (
    REPO_DIR,
    SHARED_DATA,
    TESTS_DIR,
    cosines,
    preprocessor_ids,
    subprocess_env,
)
from tests.mteb_extra.test_mteb import STS_DEV, LocalSTSBenchmarkDev, needs_sts_dev

GOLDEN = TESTS_DIR / "testdata" / "st_standins_golden.json.gz"
# Beside the UDHR lines: the cases on which tokenizers are known to part ways.
EDGE_CASES = ["Ｗｈａｔ？ ＡＢＣ", "zero\u200bwidth space, joiner\u200d and non\u200cjoiner",
              "مَرْحَبًا بِالعَالَمِ", "ក្រុង​ភ្នំពេញ", "Café crème BRÛLÉE", "\ufeffbom", "",
              "x " * 300]


def _texts() -> list:
    """The stand-ins' golden texts (2 UDHR lines in each of 68 languages and scripts), the
    next 2 lines of each where the UDHR is beside the checkout, and the edge cases."""
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        golden = json.load(f)
    texts = list(golden["texts"])
    udhr = SHARED_DATA / "udhr"
    for source in dict.fromkeys(s.split(":")[0] for s in golden["sources"]):
        if (udhr / source).is_file():
            lines = (udhr / source).read_text(encoding="utf-8").splitlines()
            texts += [line for line in lines[2:4] if line.strip()]
    return texts + EDGE_CASES


def _child(command: str, folder, payload, tmp_path) -> dict:
    """Runs `sentence_transformers_child.py`'s command on `payload` (JSON) in a fresh
    interpreter; returns its output, after checking it loaded neither cmlm_tf nor TF."""
    given, out = tmp_path / f"{command}_in.json", tmp_path / f"{command}_out.json"
    given.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
    child = subprocess.run([sys.executable, "-m", "tests.mteb_extra.sentence_transformers_child",
                            command, str(folder), str(given), str(out)], capture_output=True,
                           text=True, env=subprocess_env(), cwd=REPO_DIR, timeout=3600)
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["imported"] == []
    return result


@pytest.fixture(scope="module")
def st_exports(tmp_path_factory, tiny_keras_hub_export, minilm_export, minilm_bitext_export):
    """name -> an export with its sentence-transformers folder and its ONNX models:
    all-MiniLM-L6-v2, the same fine-tuned a few steps with `cmlm_tf/bitext`, a tiny cmlm_tf
    run (a WordPiece vocabulary of its own, mean pooling, normalised), the LaBSE-layout
    stand-in (cased, CLS pooling, tanh Dense, Normalize) and the XLM-R stand-in
    (XLM-RoBERTa, XLM-R's SentencePiece tokenizer, mean pooling)."""
    root = tmp_path_factory.mktemp("st_exports")
    exports = {"minilm": minilm_export, "minilm_bitext": minilm_bitext_export}
    for name in ("labse_layout", "xlmr_layout"):
        export_lib.export(str(root / name),
                          hf_dir=str(TESTS_DIR / "testdata" / "st_standins" / name), onnx=True)
        exports[name] = root / name
    exports.update(tiny=tiny_keras_hub_export)
    return exports


@pytest.mark.parametrize("name, modules", [
    ("minilm", ["Transformer", "Pooling", "Normalize"]),
    ("minilm_bitext", ["Transformer", "Pooling", "Normalize"]),
    ("tiny", ["Transformer", "Pooling", "Normalize"]),
    ("labse_layout", ["Transformer", "Pooling", "Dense", "Normalize"]),
    ("xlmr_layout", ["Transformer", "Pooling"])])
def test_sentence_transformers_gives_cmlm_tf_ids_and_vectors(st_exports, name, modules,
                                                              tmp_path):
    export_dir = st_exports[name]
    texts = _texts()
    theirs = _child("encode", export_dir / "sentence_transformers", texts, tmp_path)
    model = cmlm_tf.load(str(export_dir))
    assert theirs["modules"] == modules and theirs["max_seq_length"] == model.seq_length
    expected_ids = preprocessor_ids(export_dir, texts)
    differing = [text for text, a, b in zip(texts, theirs["ids"], expected_ids) if a != b]
    assert not differing, differing[:3]
    ours = model.encode(texts)
    assert len(texts) >= 136 and sorted(theirs["onnx_vectors"]) == ["float32", "int8"]
    # sentence-transformers' torch model, then ONNX Runtime on onnx/model.onnx.
    for vectors in (theirs["vectors"], theirs["onnx_vectors"]["float32"]):
        vectors = np.asarray(vectors, np.float64)
        if "Normalize" in modules:
            np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        found = cosines(vectors, ours)
        assert found.min() >= 0.99999, \
            [(texts[i][:30], found[i]) for i in np.argsort(found)[:3]]


def test_the_fine_tuned_minilm_is_not_the_imported_one(st_exports):
    """The few `cmlm_tf/bitext` steps moved every vector of the import's well past the
    0.99999 the formats are held to, and kept them near it: the checks of the fine-tuned
    export are checks of other weights, trained by cmlm_tf."""
    texts = _texts()
    found = cosines(cmlm_tf.load(str(st_exports["minilm_bitext"])).encode(texts),
                    cmlm_tf.load(str(st_exports["minilm"])).encode(texts))
    assert 0.9 < found.min() and found.max() < 0.9999, (found.min(), found.max())


@needs_sts_dev
def test_mteb_through_sentence_transformers_scores_as_cmlm_tf(minilm_export, tmp_path):
    """MTEB's STS score of the folder, through sentence-transformers, equals its score of
    `MTEBEncoder(cmlm_tf.load(export))` to 4 decimals."""
    first, second, gold = readers.read_sts(str(STS_DEV), "stsb")
    theirs = _child("sts", minilm_export / "sentence_transformers",
                    {"first": list(first), "second": list(second), "gold": gold.tolist()},
                    tmp_path)["cosine_spearman"]
    result = mteb.evaluate(mteb_adapter.MTEBEncoder(cmlm_tf.load(str(minilm_export))),
                           [LocalSTSBenchmarkDev()], cache=None, show_progress_bar=False,
                           encode_kwargs={"batch_size": 32})
    ours = result.task_results[0].scores["validation"][0]["cosine_spearman"]
    assert abs(theirs - ours) < 5e-5 and 0.8 < ours < 0.9, (theirs, ours)


@needs_sts_dev
def test_the_int8_onnx_model_scores_as_float32_on_sts_dev(minilm_export, tmp_path):
    """all-MiniLM-L6-v2's int8 ONNX model (dynamic quantisation) keeps STS-B dev's cosine
    Spearman of its float32 model within 0.005, both run by ONNX Runtime."""
    first, second, gold = readers.read_sts(str(STS_DEV), "stsb")
    scores = _child("onnx_sts", minilm_export / "sentence_transformers",
                    {"first": list(first), "second": list(second), "gold": gold.tolist()},
                    tmp_path)["cosine_spearman"]
    assert abs(scores["int8"] - scores["float32"]) < 0.005 and \
        0.8 < scores["float32"] < 0.9, scores


def test_the_documented_snippet_runs_without_cmlm_tf(st_exports, tmp_path):
    """docs/serving.md's sentence-transformers snippet, pasted as a user would (it imports
    sentence-transformers only), beside an `exports/cmlm_tiny` that holds the folder."""
    (snippet,) = [code for _, code in test_docs.python_blocks(REPO_DIR / "docs" / "serving.md")
                  if test_docs.SENTENCE_TRANSFORMERS_SNIPPETS in code
                  and test_docs.ONNX_SNIPPETS not in code]
    (tmp_path / "exports").mkdir()
    (tmp_path / "exports" / "cmlm_tiny").symlink_to(st_exports["tiny"])
    script = tmp_path / "snippet.py"
    script.write_text(snippet, encoding="utf-8")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                            text=True, env=subprocess_env(), timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
