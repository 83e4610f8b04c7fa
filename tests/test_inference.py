"""`cmlm_tf.load(...).encode(...)`: order, shapes and bad input."""

import numpy as np
import pytest

import cmlm_tf
from tests.conftest import TINY_EXPORT_SEQ_LENGTH

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
    from cmlm_tf import similarity

    assert similarity.main(["--model", str(tiny_export), "the dog", "a dog", "red car"]) == 0
    out = capsys.readouterr().out
    assert "nearest to [0]" in out and " 1.000" in out


def test_sentence_transformers_keyword_names(tiny_model):
    import tensorflow as tf

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
    import json
    import shutil

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
