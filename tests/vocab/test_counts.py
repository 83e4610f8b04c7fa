"""Tests of `cmlm_tf.vocab.counts`: the language smoothing's weights."""

import pytest

from cmlm_tf.vocab.counts import VocabError, language_weights


def test_language_weights_900_100():
    weights = language_weights([900, 100], 0.3)
    p = [0.9, 0.1]
    powered = [x**0.3 for x in p]
    q = [x / sum(powered) for x in powered]
    assert q == pytest.approx([0.65907, 0.34093], abs=1e-5)
    assert weights == pytest.approx([q[0] / p[0], q[1] / p[1]], rel=1e-12)
    assert weights == pytest.approx([0.73230, 3.40927], abs=1e-5)
    # The re-weighted counts keep their total and have the smoothed shares.
    weighted = [900 * weights[0], 100 * weights[1]]
    assert sum(weighted) == pytest.approx(1000)
    assert [w / 1000 for w in weighted] == pytest.approx(q)


def test_language_weights_no_smoothing_and_uniform():
    assert language_weights([900, 100], 1.0) == [1.0, 1.0]
    assert language_weights([5, 5, 5], 0.3) == pytest.approx([1.0, 1.0, 1.0])
    # A tiny exponent pushes the shares towards uniform.
    weights = language_weights([990, 10], 1e-6)
    assert [990 * weights[0] / 1000, 10 * weights[1] / 1000] == pytest.approx([0.5, 0.5],
                                                                              abs=1e-4)


@pytest.mark.parametrize("exponent", [0.0, -0.3, float("nan"), float("inf")])
def test_language_weights_rejects_bad_exponent(exponent):
    with pytest.raises(VocabError, match="smoothing_exponent"):
        language_weights([900, 100], exponent)


def test_language_weights_rejects_empty_group():
    with pytest.raises(VocabError):
        language_weights([900, 0], 0.3)
    with pytest.raises(VocabError):
        language_weights([], 0.3)
