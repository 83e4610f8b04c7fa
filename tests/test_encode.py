"""`cmlm_tf.load(...).encode(...)`: order, shapes and bad input."""

import numpy as np
import pytest
from conftest import TINY_EXPORT_SEQ_LENGTH

import cmlm_tf

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
