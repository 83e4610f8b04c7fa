"""Token masking (`cmlm_tf.data.masking`): how many tokens, which positions, 80/10/10."""

import numpy as np

from cmlm_tf.data import masking

SPECIAL = [0, 2, 3, 4]  # [PAD], [CLS], [SEP], [MASK]


def test_masking_statistics():
    rng = np.random.default_rng(0)
    batch, seq, vocab = 512, 40, 1000
    lengths = rng.integers(3, seq + 1, size=batch)
    ids = rng.integers(5, vocab, size=(batch, seq)).astype(np.int32)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
    ids[:, 0] = 2
    ids[np.arange(batch), lengths - 1] = 3
    ids[mask == 0] = 0
    out = masking.mask_tokens(ids, mask, vocab_size=vocab, mask_id=4, special_ids=SPECIAL,
                              max_predictions=8, mask_ratio=0.25, seed=7)
    positions = out["masked_lm_positions"].numpy()
    weights = out["masked_lm_weights"].numpy()
    corrupted = out["input_word_ids"].numpy()
    maskable = lengths - 2
    expected = np.minimum(8, np.maximum(1, np.round(maskable * 0.25))).astype(int)
    np.testing.assert_array_equal(weights.sum(1), expected)
    rows, slots = np.nonzero(weights)
    chosen = positions[rows, slots]
    assert (chosen >= 1).all() and (chosen < lengths[rows] - 1).all()  # no [CLS]/[SEP]/pad
    np.testing.assert_array_equal(out["masked_lm_ids"].numpy()[rows, slots], ids[rows, chosen])
    new = corrupted[rows, chosen]
    as_mask = np.mean(new == 4)
    unchanged = np.mean(new == ids[rows, chosen])
    randomised = 1 - as_mask - unchanged
    assert abs(as_mask - 0.8) < 0.03 and abs(unchanged - 0.1) < 0.03
    assert abs(randomised - 0.1) < 0.03
    assert not np.isin(new[new != 4], SPECIAL).any()
    untouched = np.ones_like(ids, bool)
    untouched[rows, chosen] = False
    np.testing.assert_array_equal(corrupted[untouched], ids[untouched])
    # A fixed count: mask_ratio 1.0 predicts max_predictions tokens in every long row.
    fixed = masking.mask_tokens(ids, mask, vocab_size=vocab, mask_id=4, special_ids=SPECIAL,
                                max_predictions=3, mask_ratio=1.0, seed=1)
    np.testing.assert_array_equal(fixed["masked_lm_weights"].numpy().sum(1),
                                  np.minimum(3, maskable))
