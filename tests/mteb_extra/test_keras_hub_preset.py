"""An export's KerasHub preset (`keras_hub_preset.write_preset`, from the export's
sentence-transformers folder; `--keras_hub` for the fine-tuned all-MiniLM-L6-v2 and the tiny
run) loaded by KerasHub in fresh processes that never import cmlm_tf, on the TensorFlow and
the PyTorch backend (`keras_hub_child.py`): on every UDHR text whose token ids agree with
cmlm_tf's preprocessor, the vector is cmlm_tf's; the share of texts whose ids differ is the
one the writer measured and recorded (on the texts given, or on the export's own natural
probe).

Runs in the MTEB venv, which has keras-hub and torch (`.ci/run`).
"""

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest

import cmlm_tf
from cmlm_tf.export import export_lib, export_metadata, keras_hub_preset
from tests import test_docs
from tests.conftest import (
    REPO_DIR,
    SHARED_DATA,
    TESTS_DIR,
    cosines,
    preprocessor_ids,
    subprocess_env,
)

UDHR = SHARED_DATA / "udhr"
# Beside the UDHR lines: texts where BERT's normaliser and KerasHub's tokenizer part ways,
# the empty text and one past the sequence length.
EDGE_CASES = ["Ｗｈａｔ？ ＡＢＣ", "zero\u200bwidth", "Straße", "", "x " * 300]
# The stand-ins exported here: the LaBSE layout (cased, CLS pooling, tanh Dense, Normalize)
# and the XLM-R family (XLM-RoBERTa, XLM-R's SentencePiece model, mean pooling).
STANDINS = ("labse_layout", "xlmr_layout")


def _udhr_texts() -> list:
    """The first 2 lines of the UDHR in the 68 languages and scripts of the stand-ins' golden
    texts, with the next 2 of each where the UDHR is beside the checkout."""
    with gzip.open(TESTS_DIR / "testdata" / "st_standins_golden.json.gz", "rt",
                   encoding="utf-8") as f:
        golden = json.load(f)
    texts = list(golden["texts"])
    for source in dict.fromkeys(name.split(":")[0] for name in golden["sources"]):
        if (UDHR / source).is_file():
            texts += (UDHR / source).read_text(encoding="utf-8").splitlines()[2:4]
    return [text for text in texts if text.strip()]


@pytest.fixture(scope="module")
def presets(tmp_path_factory, minilm_export, minilm_bitext_export, tiny_keras_hub_export):
    """The texts (the UDHR texts and the edge cases, then the exporter's natural probe), and
    name -> (its preset's metadata entry, the preset's folder, the texts its id mismatch was
    measured on (a slice), cmlm_tf's ids and vectors of the texts) for all-MiniLM-L6-v2
    (uncased, mean pooling, Normalize) and the `STANDINS`, written here and probed on the
    UDHR texts and edge cases, and for the fine-tuned all-MiniLM-L6-v2 and the tiny run, whose
    exports wrote their presets and probed them on the natural probe."""
    root = tmp_path_factory.mktemp("keras_hub")
    for standin in STANDINS:
        export_lib.export(str(root / standin), sentence_transformers=True,
                          hf_dir=str(TESTS_DIR / "testdata" / "st_standins" / standin))
    probe = _udhr_texts() + EDGE_CASES
    texts = probe + keras_hub_preset.natural_probe_texts()
    written = {}
    for name, export_dir in (("minilm", minilm_export),
                             *((standin, root / standin) for standin in STANDINS)):
        folder = root / f"{name}_preset"
        entry = keras_hub_preset.write_preset(str(export_dir / "sentence_transformers"),
                                              str(folder), probe_texts=probe,
                                              probe_name="UDHR lines and edge cases")
        written[name] = (export_dir, entry, folder, slice(0, len(probe)))
    for name, export_dir in (("minilm_bitext", minilm_bitext_export),
                             ("tiny", tiny_keras_hub_export)):
        entry = export_metadata.read_metadata(str(export_dir))["keras_hub"]
        written[name] = (export_dir, entry, export_dir / entry["folder"],
                         slice(len(probe), None))
    return texts, {name: (entry, folder, measured, preprocessor_ids(export_dir, texts),
                          cmlm_tf.load(str(export_dir)).encode(texts))
                   for name, (export_dir, entry, folder, measured) in written.items()}


def test_the_writer_records_the_tokenizer_options_and_layout(presets):
    _, built = presets
    minilm, minilm_folder = built["minilm"][:2]
    assert minilm["id_mismatch"]["probe"] == "UDHR lines and edge cases"
    assert minilm["tokenizer"] == {"class": "BertTokenizer", "lowercase": True,
                                   "strip_accents": True, "split_on_cjk": True}
    assert (minilm["pooling"], minilm["normalize"], minilm["dense"], minilm["embedder"]) == \
        ("mean", True, None, True)
    assert (minilm_folder / "task.json").is_file()
    # What KerasHub's own reading of the folder (lowercase only) gets wrong, these options fix.
    assert {"accented Latin", "Arabic and Hebrew with vowel marks",
            "CJK ideographs and kana"} <= set(minilm["agreeing_kinds"])
    labse, labse_folder = built["labse_layout"][:2]
    assert labse["tokenizer"]["lowercase"] is False and labse["pooling"] == "cls"
    assert labse["dense"] == {"file": "projection.npz", "activation": "tanh", "size": 64}
    assert not (labse_folder / "task.json").exists() and labse["embedder"] is False
    assert "plain ASCII" in labse["agreeing_kinds"]
    xlmr, xlmr_folder = built["xlmr_layout"][:2]
    assert xlmr["tokenizer"] == {"class": "XLMRobertaTokenizer",
                                 "proto": "sentencepiece.bpe.model"}
    assert xlmr["backbone"] == {"class": "XLMRobertaBackbone", "notes": []}
    assert (xlmr["pooling"], xlmr["normalize"], xlmr["dense"], xlmr["embedder"]) == \
        ("mean", False, None, True)
    assert (xlmr_folder / "task.json").is_file() and xlmr["differing_kinds"] == []
    assert xlmr["id_mismatch"]["differing"] == xlmr["kind_mismatch"]["differing"] == 0
    card = (xlmr_folder / "README.md").read_text(encoding="utf-8")
    assert "\n".join(keras_hub_preset.vector_lines(xlmr)) in card and \
        "gave the model's token ids on every probe text" in card
    card = (minilm_folder / "README.md").read_text(encoding="utf-8")
    assert "\n".join(keras_hub_preset.pooling_lines(minilm)) in card
    # The kinds' hard samples, besides the natural text: half of them differ for this model.
    assert minilm["kind_mismatch"]["texts"] == sum(map(len, keras_hub_preset.PROBE_KINDS.values()))
    assert 0.3 < minilm["kind_mismatch"]["share"] < 0.7 and \
        minilm["kind_mismatch"]["share"] > minilm["id_mismatch"]["share"]
    # An export's own preset: the natural probe, named in its metadata and both cards.
    exported, exported_folder = built["minilm_bitext"][:2]
    assert exported["id_mismatch"]["probe"] == keras_hub_preset.NATURAL_PROBE
    assert exported["id_mismatch"]["texts"] == len(keras_hub_preset.natural_probe_texts())
    for card in (exported_folder / "README.md", exported_folder.parent / "README.md"):
        assert f"On natural text, 100 texts ({keras_hub_preset.NATURAL_PROBE})" in \
            " ".join(card.read_text(encoding="utf-8").split())


@pytest.mark.parametrize("backend", ["tensorflow", "torch"])
def test_keras_hub_gives_cmlm_tf_vectors_where_the_ids_agree(presets, backend, tmp_path):
    texts, built = presets
    assert len(texts) >= (200 if UDHR.is_dir() else 136)
    payload, out = tmp_path / "payload.json", tmp_path / "out.json"
    payload.write_text(json.dumps({"texts": texts, "presets": {
        name: {"path": str(folder), "vector_lines": keras_hub_preset.vector_lines(entry)}
        for name, (entry, folder, *_) in built.items()}}, ensure_ascii=False), encoding="utf-8")
    env = dict(subprocess_env(), KERAS_BACKEND=backend)
    env.pop("TF_USE_LEGACY_KERAS")
    child = subprocess.run([sys.executable, "-m", "tests.mteb_extra.keras_hub_child",
                            str(payload), str(out)], capture_output=True, text=True, env=env,
                           cwd=REPO_DIR, timeout=1800)
    assert child.returncode == 0, child.stderr[-3000:]
    theirs = json.loads(out.read_text(encoding="utf-8"))
    assert theirs["imported"] == [] and theirs["backend"] == backend
    for name, (entry, _, measured, expected_ids, ours) in built.items():
        result = theirs["presets"][name]
        family = "XLMRoberta" if name == "xlmr_layout" else "Bert"
        assert result["classes"] == [f"{family}Backbone", f"{family}Tokenizer",
                                     f"{family}TextEmbedderPreprocessor"]
        assert result["vocabulary_sizes"][0] == result["vocabulary_sizes"][1]
        differing = [i for i, (a, b) in enumerate(zip(result["ids"], expected_ids)) if a != b]
        # XLM-R's SentencePiece model runs in KerasHub as in cmlm_tf: every id agrees.
        assert family == "Bert" or differing == [], [texts[i][:30] for i in differing]
        probed = range(len(texts))[measured]
        recorded = [i for i in differing if i in probed]
        assert len(recorded) == entry["id_mismatch"]["differing"], \
            (name, [texts[i][:30] for i in recorded])
        assert entry["id_mismatch"]["share"] == len(recorded) / len(probed)
        assert len(differing) / len(texts) < 0.2, (name, [texts[i][:30] for i in differing])
        agreeing = np.setdiff1d(np.arange(len(texts)), differing)
        agreement = cosines(np.asarray(result["vectors"])[agreeing], ours[agreeing])
        assert agreement.min() >= 0.99999, \
            (name, [(texts[agreeing[i]][:30], agreement[i]) for i in np.argsort(agreement)[:3]])
        if entry["embedder"]:
            assert result["embedder_difference"] < 1e-5


def test_the_documented_snippet_runs_without_cmlm_tf(presets, tmp_path):
    """docs/serving.md's KerasHub lines, pasted as a user would (they import keras-hub only),
    on PyTorch, beside an `exports/all-MiniLM-L6-v2/keras_hub` that is the preset."""
    (snippet,) = [code for _, code in test_docs.python_blocks(REPO_DIR / "docs" / "serving.md")
                  if test_docs.KERAS_HUB_SNIPPETS in code]
    (tmp_path / "exports" / "all-MiniLM-L6-v2").mkdir(parents=True)
    (tmp_path / "exports" / "all-MiniLM-L6-v2" / "keras_hub").symlink_to(
        presets[1]["minilm"][1])
    script = tmp_path / "snippet.py"
    script.write_text(snippet, encoding="utf-8")
    env = dict(subprocess_env(), KERAS_BACKEND="torch")
    env.pop("TF_USE_LEGACY_KERAS")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                            text=True, env=env, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
