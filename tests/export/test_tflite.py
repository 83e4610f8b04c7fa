"""The TFLite models of an export (`cmlm_tf/export/tflite.py`): a quiet conversion, text
and token-id signatures that agree with the SavedModel, in length buckets, and the errors
of `tflite.embed`."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import cmlm_tf
from cmlm_tf.commands import export as export_cli
from cmlm_tf.export import tflite
from tests.conftest import COMPOSITIONS, cli_env, cosines

SENTENCES = ["the man is playing a guitar .", "a dog", "", "hello world !",
             "the woman is slicing an onion . the child is eating"]


@pytest.fixture(scope="module")
def tiny_tflite_export(tmp_path_factory, tiny_run_dir):
    """The export command with `--tflite`, run as a user runs it (its stderr is in
    `export.stderr` beside the export)."""
    export_dir = tmp_path_factory.mktemp("tflite") / "tiny"
    result = subprocess.run([sys.executable, "-m", "cmlm_tf.export", "--model_dir",
                             str(tiny_run_dir), "--export_dir", str(export_dir), "--tflite"],
                            capture_output=True, text=True, env=cli_env(), timeout=3600)
    assert result.returncode == 0, result.stderr[-2000:]
    (export_dir.parent / "export.stderr").write_text(result.stderr, encoding="utf-8")
    return export_dir


def test_tflite_export_is_quiet(tiny_tflite_export):
    """No C++ INFO or WARNING line from the TFLite converter reaches the user's terminal."""
    stderr = (tiny_tflite_export.parent / "export.stderr").read_text(encoding="utf-8")
    # absl's `W0000 00:00:...`, TensorFlow's `2026-11-25 21:46:12.260032: W ...`.
    log_line = re.compile(r"^(?:[IW]\d{4} \d\d:\d\d:|\d{4}-\d\d-\d\d [\d:.]+: [IW] |"
                          r"WARNING: All log messages)")
    assert not [line for line in stderr.splitlines() if log_line.match(line)], stderr
    assert stderr.count("Customized initialization") <= 1, stderr


def test_tflite_text_and_token_ids(tiny_tflite_export):
    meta = json.loads((tiny_tflite_export / "cmlm_tf_export.json").read_text())
    files = {entry["quantization"]: entry for entry in meta["tflite"]["models"]}
    assert set(files) == {"float32", "int8"}
    assert files["int8"]["bytes"] < files["float32"]["bytes"]
    assert files["float32"]["custom_ops"] == ["FastBertNormalize",
                                              "FastWordpieceTokenizeWithOffsets"]
    model = cmlm_tf.load(str(tiny_tflite_export))
    reference = model.encode(SENTENCES)
    tokens = {key: value.numpy() for key, value in
              model._serving.tokenize(tf.constant(SENTENCES)).items()}
    interpreters = {}
    for quantization, tolerance in (("float32", 0.9999), ("int8", 0.98)):
        interpreter = tflite.load_interpreter(
            str(tiny_tflite_export / "tflite" / files[quantization]["file"]))
        interpreters[quantization] = interpreter
        assert set(interpreter.get_signature_list()) == {"serving_default", "from_token_ids"}
        text = interpreter.get_signature_runner("serving_default")(
            sentences=np.array(SENTENCES, dtype=object))["embeddings"]
        ids = interpreter.get_signature_runner("from_token_ids")(**tokens)["embeddings"]
        for vectors in (text, ids):
            assert vectors.shape == reference.shape
            assert (vectors * reference).sum(axis=1).min() >= tolerance, quantization
        np.testing.assert_array_equal(tflite.embed(interpreter, sentences=SENTENCES), text)
        np.testing.assert_array_equal(tflite.embed(interpreter, "from_token_ids", **tokens), ids)
    # The float32 model's length buckets: odd requests, each vector as its text alone.
    float32 = interpreters["float32"]
    assert "WHILE" in {op["op_name"] for op in float32._get_ops_details()}
    for name, texts in COMPOSITIONS.items():
        alone = np.concatenate([tflite.embed(float32, sentences=[text]) for text in texts])
        for request, expected in ((texts, alone), (texts[::-1], alone[::-1])):
            vectors = tflite.embed(float32, sentences=request)
            assert cosines(vectors, expected).min() >= 0.99999, name
    # An empty batch, which the interpreter's kernels refuse (unpack.cc: NumElements > 0).
    empty_ids = {key: np.zeros([0, 4], np.int32) for key in tokens}
    for signature, inputs in (("serving_default", {"sentences": []}),
                              ("from_token_ids", empty_ids)):
        vectors = tflite.embed(interpreter, signature, **inputs)
        assert vectors.shape == (0, 32) and vectors.dtype == np.float32
    for inputs, message in (({"sentences": "a dog"}, "got one string"),
                            ({"sentences": [["a", "b"]]}, r"\[batch\], got \[1, 2\]"),
                            ({"text": ["a"]}, r"takes the inputs \['sentences'\]")):
        with pytest.raises(ValueError, match=message):
            tflite.embed(interpreter, **inputs)
    with pytest.raises(ValueError, match="one shape"):
        tflite.embed(interpreter, "from_token_ids",
                     **{**tokens, "input_mask": tokens["input_mask"][:, :2]})
    with pytest.raises(ValueError, match="input_word_ids must be integers"):
        tflite.embed(interpreter, "from_token_ids",
                     **{**tokens, "input_word_ids": tokens["input_word_ids"][0]})
    assert "tflite/model_int8.tflite" in (tiny_tflite_export / "README.md").read_text()


def test_tflite_sentencepiece_exports_token_ids_and_the_tokenizer(tmp_path, tiny_sp_run_dir,
                                                                   tiny_sp_model):
    export_dir = tmp_path / "sp"
    assert export_cli.main(["--model_dir", str(tiny_sp_run_dir), "--export_dir", str(export_dir),
                            "--tflite"]) == 0
    meta = json.loads((export_dir / "cmlm_tf_export.json").read_text())
    assert meta["tflite"]["tokenizer"] == "sp.model"
    assert (export_dir / "tflite" / "sp.model").read_bytes() == tiny_sp_model.read_bytes()
    interpreter = tflite.load_interpreter(str(export_dir / "tflite" / "model_float32.tflite"))
    assert set(interpreter.get_signature_list()) == {"from_token_ids"}
    model = cmlm_tf.load(str(export_dir))
    tokens = {key: value.numpy() for key, value in
              model._serving.tokenize(tf.constant(SENTENCES)).items()}
    vectors = interpreter.get_signature_runner("from_token_ids")(**tokens)["embeddings"]
    assert (vectors * model.encode(SENTENCES)).sum(axis=1).min() >= 0.9999
