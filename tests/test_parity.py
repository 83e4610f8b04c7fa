"""Parity with sentence-transformers on the real all-MiniLM-L6-v2 weights."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO_DIR, SHARED_DATA

import cmlm_tf

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


@pytest.mark.skipif(not (SHARED_DATA / "stsb" / "sts-dev.csv").exists(),
                    reason="STS-B dev (../shared/data/stsb) is not present beside the checkout")
def test_stsb_dev_spearman_in_fresh_process(minilm_export):
    code = f"""
import json, numpy as np, cmlm_tf
from scipy.stats import spearmanr
rows = [l.rstrip("\\n").split("\\t")[:7]
        for l in open({str(SHARED_DATA / 'stsb' / 'sts-dev.csv')!r}, encoding="utf-8")]
model = cmlm_tf.load({str(minilm_export)!r})
a = model.encode([r[5] for r in rows]); b = model.encode([r[6] for r in rows])
print(json.dumps({{"spearman": spearmanr((a * b).sum(1), [float(r[4]) for r in rows])[0]}}))
"""
    env = dict(os.environ, PYTHONPATH=str(REPO_DIR), TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    spearman = json.loads(result.stdout.strip().splitlines()[-1])["spearman"]
    assert abs(spearman - STSB_DEV_SPEARMAN) <= 0.001, spearman
    assert np.isfinite(spearman)
