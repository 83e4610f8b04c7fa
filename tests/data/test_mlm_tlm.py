"""MLM + TLM examples (`cmlm_tf.data.mlm_tlm`): TLM packing and masks, the MLM/TLM mix."""

import numpy as np
import tensorflow as tf

from cmlm_tf import configs
from cmlm_tf.data import mlm_tlm
from tests.conftest import TINY_WORDS

CLS, SEP, PAD = 2, 3, 0  # ids of the tiny vocabulary (conftest.write_tiny_vocab)


def _sentences(count, words, offset=0):
    return [" ".join(words[(i + j + offset) % len(words)] for j in range(6 + i % 5))
            for i in range(count)]


def _featurizer(vocab, seq_length=40, seed=3):
    tokenizer = configs.TokenizerConfig(vocab_file=str(vocab), lower_case=True)
    return mlm_tlm.MLMTLMFeaturizer(tokenizer, seq_length, max_predictions_per_seq=80,
                                    mask_ratio=0.2, seed=seed)


def test_tlm_packs_both_sides_with_type_ids_and_masks_both(tiny_vocab):
    count = 64
    first, second = _sentences(count, TINY_WORDS), _sentences(count, TINY_WORDS, offset=7)
    features = _featurizer(tiny_vocab)({
        "first": tf.constant(first), "second": tf.constant(second),
        "is_tlm": tf.ones([count])})
    masked_ids = features["input_word_ids"].numpy()
    mask = features["input_mask"].numpy()
    types = features["input_type_ids"].numpy()
    positions = features["masked_lm_positions"].numpy()
    weights = features["masked_lm_weights"].numpy()
    ids = masked_ids.copy()
    rows = np.repeat(np.arange(count)[:, None], positions.shape[1], axis=1)
    live = weights > 0
    ids[rows[live], positions[live]] = features["masked_lm_ids"].numpy()[live]
    masked_per_side, tokens_per_side = np.zeros(2), np.zeros(2)
    for row in range(count):
        length = mask[row].sum()
        seps = np.flatnonzero(ids[row, :length] == SEP)
        assert ids[row, 0] == CLS and len(seps) == 2 and seps[1] == length - 1
        np.testing.assert_array_equal(types[row, :seps[0] + 1], 0)
        np.testing.assert_array_equal(types[row, seps[0] + 1:length], 1)
        np.testing.assert_array_equal(ids[row, length:], PAD)
        chosen = positions[row][live[row]]
        # 20 % of the maskable tokens, never a special token.
        assert len(chosen) == max(1, round(0.2 * (length - 3)))
        assert not np.isin(ids[row, chosen], [CLS, SEP, PAD]).any()
        np.add.at(masked_per_side, types[row, chosen], 1)
        tokens_per_side += [seps[0] - 1, length - seps[0] - 2]
    # Masks fall on both sides, in proportion to their lengths.
    share = masked_per_side[1] / masked_per_side.sum()
    assert abs(share - tokens_per_side[1] / tokens_per_side.sum()) < 0.1, share


def test_mlm_examples_are_one_segment_and_long_pairs_keep_both_sides(tiny_vocab):
    long = " ".join(TINY_WORDS * 2)
    features = _featurizer(tiny_vocab, seq_length=24)({
        "first": tf.constant(["the man is playing", long]),
        "second": tf.constant(["", long]), "is_tlm": tf.constant([0.0, 1.0])})
    mask, types = features["input_mask"].numpy(), features["input_type_ids"].numpy()
    assert mask[0].sum() == 6 and types[0].sum() == 0  # [CLS] 4 words [SEP]
    assert mask[1].sum() == 24 and types[1].sum() == 12  # 10 + 11 tokens, trimmed evenly


def _strings(items):
    return tf.data.Dataset.from_tensor_slices(items).repeat()


def test_mix_ratio_and_random_order_hold_on_average():
    lines = _strings(["monolingual"])
    pairs = _strings({"source": ["source"], "target": ["target"]})
    examples = mlm_tlm.mixed_examples(lines, pairs, tlm_fraction=0.3, seed=5)
    batch = next(iter(examples.batch(4000)))
    is_tlm = batch["is_tlm"].numpy()
    assert abs(is_tlm.mean() - 0.3) < 0.03
    first, second = batch["first"].numpy(), batch["second"].numpy()
    assert set(first[is_tlm == 0]) == {b"monolingual"} and set(second[is_tlm == 0]) == {b""}
    source_first = (first[is_tlm == 1] == b"source").mean()
    assert abs(source_first - 0.5) < 0.05
    assert set(second[is_tlm == 1][first[is_tlm == 1] == b"target"]) == {b"source"}
