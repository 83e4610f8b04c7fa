"""Parity with sentence-transformers on the real all-MiniLM-L6-v2 weights, through every
path from text to vector."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
import tensorflow_text  # noqa: F401

import cmlm_tf
from cmlm_tf.export import tflite
from tests.conftest import REPO_DIR, SHARED_DATA

# sentence-transformers (independent implementation) scores STS-B dev at 0.8672.
STSB_DEV_SPEARMAN = 0.8672


def test_golden_vectors(minilm_export, golden):
    """Reference vectors: sentence-transformers 6.2.0 / torch 2.13 CPU float32."""
    sentences, expected = golden
    vectors = cmlm_tf.load(str(minilm_export)).encode(sentences)
    cosines = (vectors * expected).sum(axis=1)
    assert cosines.min() >= 0.9999, dict(zip(sentences, cosines.round(6)))


def test_minilm_export_metadata(minilm_export):
    meta = json.loads((minilm_export / "cmlm_tf_export.json").read_text())
    assert meta["seq_length"] == 256  # the folder's sentence_bert_config max_seq_length
    assert meta["dim"] == 384 and meta["vocab_size"] == 30522
    assert meta["encoder"]["pooling"] == "mean" and meta["tokenizer"]["lower_case"] is True


def stsb_rows():
    path = SHARED_DATA / "stsb" / "sts-dev.csv"
    return [line.rstrip("\n").split("\t")[:7]
            for line in path.read_text(encoding="utf-8").splitlines()]


def tfsm_vectors(export, texts, tmp_path):
    """`serving_default` through Keras 3's `TFSMLayer`, in a fresh process without the
    legacy-Keras switch, on batches of 64."""
    texts_file = tmp_path / "tfsm_texts.json"
    texts_file.write_text(json.dumps(texts), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env.update(PYTHONPATH=str(REPO_DIR), TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-m", "tests.driver.children", "tfsm_vectors",
                             str(export / "serving" / "1"), str(texts_file),
                             str(tmp_path / "tfsm.npy")], capture_output=True, text=True,
                            env=env, cwd=REPO_DIR, timeout=3600)
    assert result.returncode == 0, result.stderr[-2000:]
    return np.load(tmp_path / "tfsm.npy")


def test_every_path_gives_the_same_vectors(minilm_export, golden, tmp_path):
    """encode(), serving_default, from_token_ids, hub.KerasLayer (padded to the export's
    length, and packed to the batch's own length as TF Hub users skip padding), TFSMLayer
    (Keras 3, fresh process) and TFLite float32 agree on the golden sentences (and 200 STS-B
    sentences when the shared data is present), and each matches sentence-transformers'
    golden vectors. With cosines of at least 0.9999 to `encode()`, every path scores STS-B
    as `encode()` does, which `test_stsb_dev_spearman_of_every_path_in_fresh_process`
    checks on all of STS-B dev."""
    sentences, expected = golden
    texts = list(sentences)
    if (SHARED_DATA / "stsb" / "sts-dev.csv").exists():
        texts += [row[5] for row in stsb_rows()[:200]]
    model = cmlm_tf.load(str(minilm_export))
    serving = model._serving
    preprocessor = hub.KerasLayer(str(minilm_export / "preprocessor"))
    encoder = hub.KerasLayer(str(minilm_export / "encoder"))
    hub_preprocessor = hub.load(str(minilm_export / "preprocessor"))

    def packed_to_batch_length(batch):
        # The preprocessor's `tokenize` and `bert_pack_inputs(seq_length=)`: the batch's
        # longest text rounded up to 32 instead of the export's 256 tokens.
        tokens = hub_preprocessor.tokenize(batch)
        longest = int(tf.reduce_max(tokens.merge_dims(1, -1).row_lengths())) + 2
        packed = hub_preprocessor.bert_pack_inputs(
            [tokens], seq_length=tf.constant(min(256, -(-longest // 32) * 32)))
        return encoder(packed)["default"].numpy()

    interpreter = tflite.load_interpreter(str(minilm_export / "tflite" / "model_float32.tflite"))
    text_runner = interpreter.get_signature_runner("serving_default")
    batch = tf.constant(texts)
    paths = {
        "encode": model.encode(texts),
        "serving_default": serving.signatures["serving_default"](
            sentences=batch)["embeddings"].numpy(),
        "from_token_ids": serving.signatures["from_token_ids"](
            **serving.tokenize(batch))["embeddings"].numpy(),
        "hub.KerasLayer": np.concatenate([
            encoder(preprocessor(batch[start:start + 32]))["default"].numpy()
            for start in range(0, len(texts), 32)]),
        "hub_packed_to_batch_length": np.concatenate([
            packed_to_batch_length(batch[start:start + 64])
            for start in range(0, len(texts), 64)]),
        "tflite_float32": np.concatenate([
            text_runner(sentences=np.array(texts[start:start + 64], dtype=object))["embeddings"]
            for start in range(0, len(texts), 64)]),
    }
    paths["TFSMLayer"] = tfsm_vectors(minilm_export, texts, tmp_path)
    names = sorted(paths)
    for name in names:
        assert paths[name].shape == (len(texts), 384), name
        golden_cosines = (paths[name][:len(sentences)] * expected).sum(axis=1)
        assert golden_cosines.min() >= 0.9999, (name, golden_cosines.round(6))
        for other in names:
            cosines = (paths[name] * paths[other]).sum(axis=1)
            assert cosines.min() >= 0.9999, (name, other, cosines.min())


@pytest.mark.skipif(not (SHARED_DATA / "stsb" / "sts-dev.csv").exists(),
                    reason="STS-B dev (../shared/data/stsb) is not present beside the checkout")
def test_stsb_dev_spearman_of_every_path_in_fresh_process(minilm_export):
    env = dict(os.environ, PYTHONPATH=str(REPO_DIR), TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-m", "tests.driver.children",
                             "stsb_spearman_of_every_path",
                             str(SHARED_DATA / "stsb" / "sts-dev.csv"), str(minilm_export)],
                            capture_output=True, text=True, env=env, cwd=REPO_DIR,
                            timeout=3600)
    assert result.returncode == 0, result.stderr[-2000:]
    spearman = json.loads(result.stdout.strip().splitlines()[-1])
    for path in ("encode", "serving_default"):
        assert abs(spearman[path] - STSB_DEV_SPEARMAN) <= 0.0005, spearman
    # Dynamic-range int8 weights cost at most 0.01 of Spearman.
    assert abs(spearman["tflite_int8"] - STSB_DEV_SPEARMAN) <= 0.01, spearman
    # The other precisions' serving models, and encode() on the same graphs: bfloat16 within
    # 0.002 of float32, int8 within 0.005.
    for precision, allowed in (("bfloat16", 0.002), ("int8", 0.005)):
        for path in (f"serving_{precision}", f"encode_{precision}"):
            assert abs(spearman[path] - spearman["serving_default"]) <= allowed, spearman
