"""`cmlm_tf.load(...).encode(...)`: order, shapes and bad input; the fast path (length
buckets, order, bfloat16); precisions refused at load. Eight threads on one model are in
test_inference_threads.py."""


import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import cmlm_tf
from cmlm_tf.commands import similarity
from cmlm_tf.export import export_metadata
from cmlm_tf.export.export_metadata import FORMAT_VERSION, METADATA_FILE
from tests.conftest import (
    TINY_EXPORT_SEQ_LENGTH,
    cli_env,
    imported_modules,
    run_child,
    subprocess_env,
)

MIXED = [
    "",
    "   ",
    "the man is playing a guitar . " * 200,  # far longer than seq_length: truncated
    "I love pizza 🍕🍕!",
    "שלום עולם",  # right to left
    "مرحبا بالعالم",
    "这是一个测试句子。",
    "hello\tworld\n",
]


@pytest.fixture(scope="module")
def tiny_model(tiny_export):
    return cmlm_tf.load(str(tiny_export))


def test_encode_shapes_order_and_batching(tiny_model):
    texts = ["the dog", "a man is riding a horse", "hello", "the red car", "blue"]
    full = tiny_model.encode(texts)
    assert full.dtype == np.float32 and full.shape == (5, 32)
    np.testing.assert_allclose(np.linalg.norm(full, axis=1), 1.0, rtol=1e-5)
    # Same vectors one at a time: length sorting must not reorder the output.
    for i, text in enumerate(texts):
        single = tiny_model.encode(text)
        assert single.shape == (32,)
        np.testing.assert_allclose(single, full[i], atol=1e-5)
    np.testing.assert_allclose(tiny_model.encode(texts, batch_size=2), full, atol=1e-5)
    raw = tiny_model.encode(texts, normalize=False)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), full,
                               atol=1e-5)
    assert tiny_model.encode([]).shape == (0, 32)


def test_mixed_bad_strings_give_finite_vectors(tiny_model):
    vectors = tiny_model.encode(MIXED, batch_size=3)
    assert vectors.shape == (len(MIXED), 32)
    assert np.isfinite(vectors).all()
    assert tiny_model.seq_length == TINY_EXPORT_SEQ_LENGTH
    # Truncation: a long text equals its own first tokens.
    long_text = "the man is playing a guitar . " * 200
    prefix = "the man is playing a guitar . the man is playing"
    np.testing.assert_allclose(tiny_model.encode(long_text), tiny_model.encode(prefix),
                               atol=1e-5)


def test_bytes_are_decoded_with_replacement(tiny_model):
    vectors = tiny_model.encode([b"hello \xff world", "hello \ufffd world".encode()])
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)


@pytest.mark.parametrize("bad,index", [(["ok", None], 1), (["ok", "fine", 3], 2),
                                       ([["nested"]], 0)])
def test_non_strings_raise_type_error_naming_the_index(tiny_model, bad, index):
    with pytest.raises(TypeError, match=rf"texts\[{index}\]"):
        tiny_model.encode(bad)


def test_none_raises_type_error(tiny_model):
    with pytest.raises(TypeError, match="texts"):
        tiny_model.encode(None)


def test_load_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing_export"):
        cmlm_tf.load(str(tmp_path / "missing_export"))
    with pytest.raises(FileNotFoundError, match="cmlm_tf_export.json"):
        cmlm_tf.load(str(tmp_path))
    (tmp_path / "cmlm_tf_export.json").write_text("{not json")
    with pytest.raises(ValueError, match="cmlm_tf_export.json"):
        cmlm_tf.load(str(tmp_path))


def test_similarity_cli(tiny_export, capsys):
    assert similarity.main(["--model", str(tiny_export), "the dog", "a dog", "red car"]) == 0
    out = capsys.readouterr().out
    assert "nearest to [0]" in out and " 1.000" in out


def test_sentence_transformers_keyword_names(tiny_model):
    texts = ["the dog", "a man is riding a horse", "hello"]
    raw = tiny_model.encode(texts, normalize=False)
    np.testing.assert_array_equal(tiny_model.encode(texts, normalize_embeddings=False), raw)
    with pytest.raises(ValueError, match="disagree"):
        tiny_model.encode(texts, normalize=True, normalize_embeddings=False)
    unit = tiny_model.encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw, axis=1, keepdims=True),
                               atol=1e-6)
    full = tiny_model.encode(texts, show_progress_bar=False)
    tensor = tiny_model.encode(texts, convert_to_tensor=True)
    assert isinstance(tensor, tf.Tensor) and tensor.shape == (3, 32)
    np.testing.assert_allclose(tensor.numpy(), full)
    rows = tiny_model.encode(texts, convert_to_numpy=False)
    assert isinstance(rows, list) and len(rows) == 3 and rows[0].shape == (32,)
    assert tiny_model.get_sentence_embedding_dimension() == 32
    assert tiny_model.max_seq_length == TINY_EXPORT_SEQ_LENGTH


def test_progress_bar_counts_every_sentence(tiny_model, capsys):
    texts = [f"sentence number {i}" for i in range(10)]
    quiet = tiny_model.encode(texts, batch_size=4, show_progress_bar=False)
    assert capsys.readouterr().err == ""
    shown = tiny_model.encode(texts, batch_size=4, show_progress_bar=True)
    np.testing.assert_array_equal(shown, quiet)
    assert "10/10" in capsys.readouterr().err


def test_similarity_of_texts_and_vectors(tiny_model):
    a, b = ["the dog", "a cat"], ["a dog", "red car", "the cat"]
    scores = tiny_model.similarity(a, b)
    assert scores.shape == (2, 3)
    np.testing.assert_allclose(scores, tiny_model.encode(a) @ tiny_model.encode(b).T,
                               atol=1e-6)
    raw = tiny_model.encode(a, normalize=False)
    np.testing.assert_allclose(tiny_model.similarity(raw, tiny_model.encode(b)), scores,
                               atol=1e-6)
    assert tiny_model.similarity("the dog", "the dog").round(5).tolist() == [[1.0]]


def test_similarity_of_empty_inputs_has_an_empty_side(tiny_model):
    vectors = tiny_model.encode(["the dog", "a cat"])
    for a, b, shape in (([], [], (0, 0)), (["x"], [], (1, 0)), ([], ["x", "y"], (0, 2)),
                        (vectors, (), (2, 0)), (np.zeros([0, 32]), vectors, (0, 2))):
        scores = tiny_model.similarity(a, b)
        assert scores.shape == shape and scores.dtype == np.float32, (a, b)
    with pytest.raises(ValueError, match="a has vectors of dim 32 and b of dim 3"):
        tiny_model.similarity(vectors, np.ones([2, 3]))


@pytest.mark.parametrize("bad", [{"a": 1}, {"a", "b"}, frozenset(["a"])])
def test_unordered_inputs_are_rejected(tiny_model, bad):
    with pytest.raises(TypeError, match="no order"):
        tiny_model.encode(bad)


def test_lone_surrogates_become_replacement_characters(tiny_model):
    vectors = tiny_model.encode(["ok \ud800 fine", "\udfff"])
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(vectors[0], tiny_model.encode(b"ok \xed\xa0\x80 fine"),
                               atol=1e-6)


@pytest.mark.parametrize("batch_size,error", [("8", TypeError), (2.5, TypeError),
                                              (True, TypeError), (0, ValueError)])
def test_batch_size_must_be_a_positive_int(tiny_model, batch_size, error):
    with pytest.raises(error, match="batch_size"):
        tiny_model.encode(["a"], batch_size=batch_size)


def _copy_export(tiny_export, tmp_path, edit):
    target = tmp_path / "copy"
    shutil.copytree(tiny_export, target)
    path = target / "cmlm_tf_export.json"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps(edit(meta)))
    return target


@pytest.mark.parametrize("edit,message", [
    (lambda m: [m], "expected a JSON object"),
    (lambda m: {**m, "format_version": 1}, "export the model again"),
    (lambda m: {k: v for k, v in m.items() if k != "dim"}, "dim is missing"),
    (lambda m: {**m, "dim": 64}, "dim is 64 but serving/1 computes 32"),
    (lambda m: {**m, "encoder": {**m["encoder"], "pooling": "cls"}}, "encoder.pooling"),
    (lambda m: {**m, "encoder": {**m["encoder"], "hidden_activation": "relu"}},
     "encoder.hidden_activation is 'relu'"),
    (lambda m: {**m, "encoder": {**m["encoder"], "num_attention_heads": 7}},
     "encoder.num_attention_heads is 7"),
    (lambda m: {**m, "vocab_size": 5}, "vocab_size is 5"),
    (lambda m: {**m, "seq_length": 99}, "seq_length"),
])
def test_metadata_that_does_not_fit_the_model_is_refused(tiny_export, tmp_path, edit, message):
    target = _copy_export(tiny_export, tmp_path, edit)
    with pytest.raises(ValueError, match=message) as info:
        cmlm_tf.load(str(target))
    assert "cmlm_tf_export.json" in str(info.value) and "\n" not in str(info.value)


def test_random_unicode_gives_finite_deterministic_vectors_in_order(tiny_model):
    """A fuzz of odd text: control characters, NUL, lone surrogates, emoji, RTL, CJK,
    combining marks, very long strings."""
    rng = np.random.default_rng(7)
    blocks = [(0, 0x20), (0x20, 0x7F), (0x300, 0x36F), (0x590, 0x6FF), (0x2000, 0x206F),
              (0x3000, 0x30FF), (0x4E00, 0x4FFF), (0xD800, 0xDFFF), (0xFFF0, 0xFFFF),
              (0x1F300, 0x1F6FF)]
    texts = []
    for _ in range(120):
        low, high = blocks[rng.integers(len(blocks))]
        length = int(rng.choice([0, 1, 5, 40, 3000]))
        texts.append("".join(chr(c) for c in rng.integers(low, high, size=length)))
    vectors = tiny_model.encode(texts, batch_size=16)
    assert vectors.shape == (len(texts), 32) and np.isfinite(vectors).all()
    np.testing.assert_array_equal(tiny_model.encode(texts, batch_size=16), vectors)
    for index in rng.choice(len(texts), 10, replace=False):
        np.testing.assert_allclose(tiny_model.encode(texts[index]), vectors[index], atol=1e-5)


# ---------------------------------------------------------------- the fast path

TEXTS = [
    "the dog",
    "a man is riding a horse on the red house",
    "hello",
    "the woman is slicing an onion . the man is playing a guitar . the child is eating",
    "blue car",
    "a cat is running in the house at night with the dog and the horse",
    "good day",
    "the snake is eating a mouse",
    "",
]
# bfloat16 keeps 8 significant bits: tiny-model vectors agree with float32 within this.
BF16_ATOL = 2e-2


@pytest.fixture(scope="module")
def fp32_model(tiny_export):
    return cmlm_tf.load(str(tiny_export), jit_compile=True)


def reference_vectors(model, texts, key):
    """The saved functions in one call for all texts: `serving_default` for `embeddings`
    (which cuts the request into its own length buckets in the graph), tokenize + the plain
    float32 forward, padded to the longest text, for `pooled_output`."""
    serving = model._serving
    if key == "embeddings":
        return serving.signatures["serving_default"](
            sentences=tf.constant(texts))["embeddings"].numpy()
    return serving.pooled_float32(**serving.tokenize(tf.constant(texts))).numpy()


def test_bucketed_output_equals_unbucketed_signature(fp32_model):
    for normalize, key in ((True, "embeddings"), (False, "pooled_output")):
        vectors = fp32_model.encode(TEXTS, batch_size=3, normalize=normalize)
        np.testing.assert_allclose(vectors, reference_vectors(fp32_model, TEXTS, key),
                                   atol=2e-5)
    # Several batches fell in different buckets; each bucket traced once, then reused.
    assert len({length for _, length in fp32_model._graphs}) >= 2
    graphs = dict(fp32_model._graphs)
    fp32_model.encode(TEXTS, batch_size=3)
    assert fp32_model._graphs == graphs


def test_input_order_is_preserved(fp32_model):
    permutation = np.random.default_rng(0).permutation(len(TEXTS))
    vectors = fp32_model.encode(TEXTS, batch_size=2)
    shuffled = fp32_model.encode([TEXTS[i] for i in permutation], batch_size=2)
    np.testing.assert_allclose(shuffled, vectors[permutation], atol=2e-5)
    # Each row is its own text's vector, as one call of the signature gives it.
    np.testing.assert_allclose(vectors, reference_vectors(fp32_model, TEXTS, "embeddings"),
                               atol=2e-5)
    # Distinct texts get distinct vectors, so a reordering could not go unnoticed.
    assert np.abs(vectors[0] - vectors[1]).max() > 1e-3


def test_length_buckets_in_the_graph_equal_one_text_at_a_time(tiny_export):
    """The default path: each batch runs `bucketed_float32`, which sorts it again and runs
    it in sub-batches of 8 rows padded to their own longest text."""
    model = cmlm_tf.load(str(tiny_export))
    calls = []
    bucketed = model._bucketed
    model._bucketed = lambda *ids: calls.append(ids[0].shape) or bucketed(*ids)
    alone = {text: model.encode(text) for text in TEXTS}
    same_length = ["the dog", "a cat", "blue car", "good day", "the house"] * 4
    alone.update({text: model.encode([text])[0] for text in same_length})
    one_long = ["hello"] * 9 + [TEXTS[3]] + ["blue car", "the dog"] * 5
    for texts in (TEXTS * 3, same_length, one_long):
        expected = np.stack([alone[text] for text in texts])
        for batch_size in (64, 7):
            vectors = model.encode(texts, batch_size=batch_size)
            assert (vectors * expected).sum(axis=1).min() >= 0.99999, (texts, batch_size)
    # Each batch went to the graph whole, trimmed to its longest text but not padded.
    assert calls[-1] == (len(one_long) - 14, 3) and (27, 12) in calls  # 3: [CLS] hello [SEP]
    assert model.encode([]).shape == (0, 32)


def test_bfloat16_within_tolerance_of_float32(tiny_export, fp32_model):
    model = cmlm_tf.load(str(tiny_export), precision="bfloat16")
    assert model.precision == "bfloat16" and not model.jit_compile
    vectors = model.encode(TEXTS, batch_size=4)
    assert vectors.dtype == np.float32
    reference = fp32_model.encode(TEXTS, batch_size=4)
    np.testing.assert_allclose(vectors, reference, atol=BF16_ATOL)
    assert (vectors * reference).sum(axis=1).min() > 0.999


def test_graph_mode_without_xla_matches(tiny_export, fp32_model):
    model = cmlm_tf.load(str(tiny_export), jit_compile=False)
    np.testing.assert_allclose(model.encode(TEXTS), fp32_model.encode(TEXTS), atol=2e-5)


def test_bad_precision_names_the_choices(tiny_export):
    with pytest.raises(ValueError, match="bfloat16"):
        cmlm_tf.load(str(tiny_export), precision="float16")


def test_int8_without_onednn_is_refused_at_load(tmp_path):
    """With TF_ENABLE_ONEDNN_OPTS=0 the int8 matmul runs eagerly but not in a graph: `load`
    refuses the precision before any request, in one line."""
    (tmp_path / export_metadata.METADATA_FILE).write_text(json.dumps({
        "format_version": export_metadata.FORMAT_VERSION, "dim": 4,
        "serving_models": {"int8": {"folder": "serving_int8/1"}}}), encoding="utf-8")
    (tmp_path / "serving_int8" / "1").mkdir(parents=True)
    (tmp_path / "serving_int8" / "1" / "saved_model.pb").write_bytes(b"")  # never read
    result = run_child("int8_load", tmp_path, env={**cli_env(), "TF_ENABLE_ONEDNN_OPTS": "0"})
    assert result.returncode == 0, result.stderr
    runs, error = result.stdout.strip().splitlines()[-2:]
    assert runs == "False"
    assert "precision='int8'" in error and "TF_ENABLE_ONEDNN_OPTS=0" in error
    assert os.path.basename(str(tmp_path)) in error


def test_a_precision_the_export_lacks_is_refused_before_tensorflow_starts(tmp_path):
    """`load(precision="int8")` on an export without `serving_int8/1`: said from the files,
    before TensorFlow is imported (`python -X importtime` lists every import)."""
    (tmp_path / "serving" / "1").mkdir(parents=True)
    (tmp_path / "serving" / "1" / "saved_model.pb").write_bytes(b"")
    (tmp_path / METADATA_FILE).write_text(json.dumps({
        "format_version": FORMAT_VERSION,
        "serving_models": {"float32": {"folder": "serving/1"}}}), encoding="utf-8")
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "tests.export.children",
                           "load_refused", str(tmp_path), "int8"], env=subprocess_env(),
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert done.returncode == 2 and lines == [
        f"error: {tmp_path}: the export has no int8 model (serving_int8/1); export it again "
        "with --int8"], done.stderr[-2000:]
    imported = imported_modules(done.stderr)
    assert "cmlm_tf.inference" in imported and "tensorflow" not in imported
