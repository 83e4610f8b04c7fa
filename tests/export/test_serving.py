"""One text-to-vector path: the inference forward the export saves, and every way to call it
(serving signatures, a TF Serving PredictRequest, Keras 3's TFSMLayer, TFLite)."""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
import tf_keras

import cmlm_tf
from cmlm_tf.commands import export as export_cli
from cmlm_tf.export import export_lib, serving_forward
from cmlm_tf.modeling import sentence_encoder
from cmlm_tf.runtime import host
from tests.conftest import COMPOSITIONS, REPO_DIR, cosines, tiny_encoder_config

SENTENCES = ["the man is playing a guitar .", "a dog", "", "hello world !",
             "the woman is slicing an onion . the child is eating"]


def run_child(name: str, *args, **env: str) -> subprocess.CompletedProcess:
    """`tests.export.children`' function `name` in a fresh interpreter, without
    TF_USE_LEGACY_KERAS (a plain TensorFlow, as a model server or a Keras 3 user has), with
    the environment variables `env` added."""
    environment = {key: value for key, value in os.environ.items()
                   if key != "TF_USE_LEGACY_KERAS"}
    environment.update(PYTHONPATH=str(REPO_DIR), TF_CPP_MIN_LOG_LEVEL="2", **env)
    return subprocess.run([sys.executable, "-m", "tests.export.children", name, *args],
                          capture_output=True, text=True, env=environment, timeout=3600)


def random_ids(vocab_size, batch=3, seq=9, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab_size, size=[batch, seq]).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 4:] = 0
    mask[2, 2:] = 0
    ids[mask == 0] = 0
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)}


@pytest.mark.parametrize("overrides", [
    {},
    {"pooling": "cls"},
    {"pooling": "max", "hidden_activation": "relu"},
    {"projection_size": 8, "hidden_activation": "gelu_approx"},
], ids=["mean", "cls", "max-relu", "projection-tanh-gelu"])
def test_forward_equals_the_keras_encoder(overrides):
    tf_keras.utils.set_random_seed(3)
    encoder = sentence_encoder.build_sentence_encoder(tiny_encoder_config(60, **overrides))
    forward = serving_forward.InferenceForward(encoder)
    inputs = random_ids(60)
    expected = encoder({k: tf.constant(v) for k, v in inputs.items()},
                       training=False)["pooled_output"].numpy()
    actual = forward(**inputs).numpy()
    assert actual.shape == expected.shape == (3, forward.output_dim)
    np.testing.assert_allclose(actual, expected, atol=2e-5)
    bfloat16 = forward(**inputs, precision="bfloat16").numpy()
    np.testing.assert_allclose(bfloat16, expected, atol=5e-2)
    # The copy is made once: training the encoder further does not move the forward.
    encoder.bert.get_embedding_table().assign_add(tf.ones_like(encoder.bert.get_embedding_table()))
    np.testing.assert_allclose(forward(**inputs).numpy(), actual, atol=0)


class _RecordingForward(serving_forward.InferenceForward):
    """An inference forward that records the [rows, seq] shape of each call."""

    def __init__(self, encoder):
        super().__init__(encoder, precisions=("float32",))
        self.calls = []

    def __call__(self, input_word_ids, *args, **kwargs):
        self.calls.append(tuple(input_word_ids.shape))
        return super().__call__(input_word_ids, *args, **kwargs)


def test_length_buckets_trim_each_sub_batch_and_keep_the_order():
    tf_keras.utils.set_random_seed(4)
    encoder = sentence_encoder.build_sentence_encoder(tiny_encoder_config(60))
    forward = _RecordingForward(encoder)
    rng = np.random.default_rng(1)
    lengths = rng.integers(2, 9, size=21)
    lengths[7] = 20  # one long row among short ones
    ids = rng.integers(5, 60, size=[21, 24]).astype(np.int32)
    mask = (np.arange(24) < lengths[:, None]).astype(np.int32)
    ids[mask == 0] = 0
    types = np.zeros_like(ids)
    bucketed = forward.in_length_buckets(ids, mask, types, bucket_rows=8).numpy()
    # Eager: the loop ran in Python, one forward per sub-batch of 8 sorted rows, each
    # trimmed to its own longest row.
    longest_first = np.sort(lengths)[::-1]
    assert forward.calls == [(8, 20), (8, int(longest_first[8])), (5, int(longest_first[16]))]
    whole = forward(ids, mask, types).numpy()
    np.testing.assert_allclose(bucketed, whole, atol=1e-5)
    alone = np.concatenate([forward(ids[i:i + 1, :n], mask[i:i + 1, :n], types[i:i + 1, :n])
                            for i, n in enumerate(lengths)])
    np.testing.assert_allclose(bucketed, alone, atol=1e-5)
    # A mask with a hole keeps every token up to its last unmasked one.
    mask[0, 1] = 0
    np.testing.assert_allclose(forward.in_length_buckets(ids, mask, types).numpy()[0],
                               forward(ids, mask, types).numpy()[0], atol=1e-5)
    empty = forward.in_length_buckets(*[np.zeros([0, 5], np.int32)] * 3)
    assert empty.shape == (0, forward.output_dim)


def test_serving_default_in_buckets_equals_one_sentence_at_a_time(tiny_export):
    serving = tf.saved_model.load(str(tiny_export / "serving" / "1"))
    signature = serving.signatures["serving_default"]

    def embed(sentences):
        return signature(sentences=tf.constant(sentences, tf.string))["embeddings"].numpy()

    alone = {text: embed([text])[0] for texts in COMPOSITIONS.values() for text in texts}
    # Distinct texts, distinct vectors: a row served in another's place cannot pass.
    assert len({vector.round(4).tobytes() for vector in alone.values()}) == len(alone)
    for name, texts in COMPOSITIONS.items():
        for request in (texts, texts[::-1]):
            expected = np.stack([alone[text] for text in request])
            assert cosines(embed(request), expected).min() >= 0.99999, name
            assert cosines(serving(tf.constant(request)).numpy(), expected).min() >= 0.99999
    assert embed([]).shape == (0, 32)


def test_minilm_serving_default_in_buckets_equals_one_sentence_at_a_time(minilm_export,
                                                                           golden):
    """The real weights, on the golden sentences (empty, whitespace, emoji, CJK) mixed with
    one long text, in several orders."""
    sentences, _ = golden
    long_text = " ".join(sentences)
    signature = tf.saved_model.load(str(minilm_export / "serving" / "1")).signatures[
        "serving_default"]

    def embed(texts):
        return signature(sentences=tf.constant(texts, tf.string))["embeddings"].numpy()

    texts = sentences + [long_text] + sentences[::-1]
    alone = np.concatenate([embed([text]) for text in sentences + [long_text]])
    expected = np.concatenate([alone[:-1], alone[-1:], alone[:-1][::-1]])
    assert cosines(embed(texts), expected).min() >= 0.99999
    assert cosines(embed(texts[::-1]), expected[::-1]).min() >= 0.99999


def test_export_refuses_a_forward_that_disagrees(tmp_path, tiny_run_dir, monkeypatch):
    original = serving_forward.InferenceForward.__call__

    def shifted(self, *args, **kwargs):
        return original(self, *args, **kwargs) + 0.5

    monkeypatch.setattr(serving_forward.InferenceForward, "__call__", shifted)
    with pytest.raises(RuntimeError, match="inference forward differs"):
        export_lib.export(str(tmp_path / "out"), model_dir=str(tiny_run_dir))
    assert not list(tmp_path.iterdir())


def test_serving_runs_the_saved_forward_without_xla(tiny_export):
    ops = export_lib.saved_model_ops(str(tiny_export / "serving" / "1"))
    # No XLA (TF Serving runs it only with --xla_cpu_compilation_enabled), and no Keras
    # BertEncoderV2 graph: the fused query/key/value matmul of the inference forward.
    assert not any("Xla" in op for op in ops)
    assert ops & {"While", "StatelessWhile"}  # the length-bucket loop of every request
    meta = json.loads((tiny_export / "cmlm_tf_export.json").read_text())
    assert meta["custom_ops"]["serving"] == ["FastBertNormalize",
                                             "FastWordpieceTokenizeWithOffsets"]
    assert meta["custom_ops"]["encoder"] == []
    assert meta["tokenizer"]["implementation"] == {"name": "fast_wordpiece"}
    assert meta["forward_max_relative_error"] < 1e-4
    serving = tf.saved_model.load(str(tiny_export / "serving" / "1"))
    tokens = serving.tokenize(tf.constant(SENTENCES))
    pooled = serving.pooled_float32(**tokens).numpy()
    embeddings = serving.signatures["serving_default"](
        sentences=tf.constant(SENTENCES))["embeddings"].numpy()
    np.testing.assert_allclose(embeddings, pooled / np.linalg.norm(pooled, axis=1, keepdims=True),
                               atol=1e-6)


def test_serving_needs_tensorflow_text_and_the_encoder_does_not(tiny_export):
    """What the README's table says: serving/1 needs `import tensorflow_text` first."""
    result = run_child("serving_without_and_with_tensorflow_text",
                       str(tiny_export / "serving" / "1"))
    assert "FAILED" in result.stdout and "True" in result.stdout, result.stderr[-2000:]
    assert "LOADED (1, 32)" in result.stdout, result.stderr[-2000:]


def test_predict_request_round_trip_in_a_fresh_process(tiny_export, tmp_path):
    """A TF Serving gRPC PredictRequest, answered in a process with only TensorFlow and
    tensorflow_text, as the model server would: the response equals `encode()`."""
    predict_pb2 = pytest.importorskip(
        "tensorflow_serving.apis.predict_pb2",
        reason="tensorflow-serving-api is not installed (pip install -e '.[test]')")
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "encoder"
    request.model_spec.signature_name = "serving_default"
    request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(SENTENCES, dtype=tf.string))
    (tmp_path / "request.pb").write_bytes(request.SerializeToString())
    result = run_child("answer_predict_request", str(tmp_path / "request.pb"),
                       str(tiny_export / "serving" / "1"), str(tmp_path / "response.pb"))
    assert result.returncode == 0, result.stderr[-2000:]
    response = predict_pb2.PredictResponse.FromString((tmp_path / "response.pb").read_bytes())
    assert list(response.outputs) == ["embeddings"]
    served = tf.make_ndarray(response.outputs["embeddings"])
    np.testing.assert_allclose(served, cmlm_tf.load(str(tiny_export)).encode(SENTENCES),
                               atol=2e-5)


def test_keras3_tfsmlayer_in_a_fresh_process(tiny_export, tmp_path):
    result = run_child("keras3_tfsmlayer", str(tiny_export / "serving" / "1"),
                       str(tmp_path / "tfsm.npy"), json.dumps(SENTENCES))
    assert result.returncode == 0, result.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "tfsm.npy"),
                               cmlm_tf.load(str(tiny_export)).encode(SENTENCES), atol=2e-5)


def test_hub_keras_layer_maps_text_to_vectors(tiny_export):
    """serving/1's root call: one `hub.KerasLayer`, strings in, normalised vectors out."""
    layer = hub.KerasLayer(str(tiny_export / "serving" / "1"))
    text = tf_keras.Input(shape=(), dtype=tf.string)
    model = tf_keras.Model(text, layer(text))
    assert model.output_shape == (None, 32)
    vectors = model(tf.constant(SENTENCES)).numpy()
    np.testing.assert_allclose(vectors, cmlm_tf.load(str(tiny_export)).encode(SENTENCES),
                               atol=2e-5)


def test_bfloat16_warns_once_where_the_cpu_emulates_it(tiny_export, monkeypatch):
    real_devices = tf.config.list_physical_devices
    gpus = []  # faked too, so that the test means the same on a machine with a GPU
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: gpus if kind == "GPU" else real_devices(kind))
    host.warn_once.cache_clear()
    monkeypatch.setattr(host, "cpu_flags", lambda: {"sse4_2", "avx2", "fma"})
    with pytest.warns(RuntimeWarning, match="neither AVX512_BF16 nor AMX"):
        cmlm_tf.load(str(tiny_export), precision="bfloat16")
    with _no_warning():
        cmlm_tf.load(str(tiny_export), precision="bfloat16")  # once per process
    for flags in ({"avx2", "avx512_bf16"}, {"avx2", "amx_bf16"}):
        host.warn_once.cache_clear()
        monkeypatch.setattr(host, "cpu_flags", lambda flags=flags: flags)
        with _no_warning():
            cmlm_tf.load(str(tiny_export), precision="bfloat16")
    # An AVX2-only CPU beside a GPU: bfloat16 runs on the GPU, no warning.
    host.warn_once.cache_clear()
    monkeypatch.setattr(host, "cpu_flags", lambda: {"sse4_2", "avx2", "fma"})
    gpus.append("fake GPU")
    with _no_warning():
        cmlm_tf.load(str(tiny_export), precision="bfloat16")


class _no_warning:
    def __enter__(self):
        self._catcher = warnings.catch_warnings(record=True)
        self._caught = self._catcher.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc):
        self._catcher.__exit__(*exc)
        assert not [w for w in self._caught if issubclass(w.category, RuntimeWarning)], \
            [str(w.message) for w in self._caught]


def test_classic_wordpiece_serving_for_older_model_servers(tmp_path, tiny_run_dir, tiny_export):
    export_dir = tmp_path / "classic"
    assert export_cli.main(["--model_dir", str(tiny_run_dir), "--export_dir", str(export_dir),
                     "--seq_length", "12", "--classic_wordpiece"]) == 0
    meta = json.loads((export_dir / "cmlm_tf_export.json").read_text())
    assert meta["tokenizer"]["implementation"]["name"] == "wordpiece"
    assert meta["custom_ops"]["serving"] == ["CaseFoldUTF8", "NormalizeUTF8",
                                             "RegexSplitWithOffsets",
                                             "WordpieceTokenizeWithOffsets"]
    assert str(tmp_path) not in (export_dir / "cmlm_tf_export.json").read_text()
    np.testing.assert_allclose(cmlm_tf.load(str(export_dir)).encode(SENTENCES),
                               cmlm_tf.load(str(tiny_export)).encode(SENTENCES), atol=1e-6)


def test_fpmath_bf16_is_an_opt_in_that_reaches_onednn(tiny_export, tmp_path, monkeypatch):
    """`TF_SET_ONEDNN_FPMATH_MODE=BF16` on the serving process (docs/serving.md) lets
    oneDNN's float32 matmuls of `serving/1` round their inputs to bfloat16: oneDNN reports
    the mode on the primitives it runs, and the vectors stay within bfloat16 rounding of
    float32 (equal on CPUs without bfloat16 matmul kernels). Without the variable, no
    primitive runs in that mode."""
    texts = tmp_path / "texts.json"
    texts.write_text(json.dumps(SENTENCES), encoding="utf-8")
    reference = cmlm_tf.load(str(tiny_export)).encode(SENTENCES)
    for mode, expected in (("BF16", True), ("", False)):
        monkeypatch.setenv("ONEDNN_VERBOSE", "1")
        monkeypatch.setenv("TF_SET_ONEDNN_FPMATH_MODE", mode)
        result = run_child("serving_default_vectors", str(tiny_export / "serving" / "1"),
                           str(texts), str(tmp_path / f"fpmath{mode}.npy"))
        assert result.returncode == 0, result.stderr[-2000:]
        assert ("attr-fpmath:bf16" in result.stdout + result.stderr) is expected, mode
        vectors = np.load(tmp_path / f"fpmath{mode}.npy")
        assert cosines(vectors, reference).min() >= 0.999, mode
