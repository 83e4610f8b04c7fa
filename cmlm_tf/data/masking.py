"""BERT-style masking, shared by every masked-language-model objective (CMLM, MLM, TLM).

`mask_tokens` is the masking itself; `BatchMasker` is what a featurizer holds: the tokenizer,
its special ids, the masking budget and a per-batch seed, so that a seeded pipeline masks
every batch the same way on every run.
"""

from typing import Dict, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras

from cmlm_tf import configs
from cmlm_tf.text import packing, tokenization

# The special tokens masking never chooses, by their `get_special_tokens_dict` keys.
MASKING_SPECIAL_KEYS = ("start_of_sequence_id", "end_of_segment_id", "padding_id", "mask_id")


def mask_tokens(word_ids: tf.Tensor, input_mask: tf.Tensor, *, vocab_size: int,
                mask_id: int, special_ids: Sequence[int], max_predictions: int,
                mask_ratio: float, mask_token_rate: float = 0.8,
                random_token_rate: float = 0.1, seed=None) -> Dict[str, tf.Tensor]:
    """Chooses tokens to predict and corrupts them as BERT does.

    Per row, `min(max_predictions, max(1, round(mask_ratio * n)))` of the `n` maskable
    tokens are chosen uniformly (never special tokens, never padding): with `mask_ratio=1.0`
    the budget is the fixed count `max_predictions` (or every token of shorter rows). Each
    chosen token becomes `[MASK]` with probability `mask_token_rate`, a uniformly random
    non-special token with probability `random_token_rate`, and stays unchanged otherwise.

    Args:
        word_ids: int32 [batch, seq].
        input_mask: int32 [batch, seq]; 1 for real tokens.
        special_ids: ids that are never chosen (`[CLS]`, `[SEP]`, `[PAD]`, `[MASK]`...).

    Returns:
        dict with `input_word_ids` (corrupted, int32 [batch, seq]), `masked_lm_positions`,
        `masked_lm_ids` (the original ids) and `masked_lm_weights` (1.0 for a real prediction,
        0.0 for padding), each [batch, max_predictions], positions in increasing order.
    """
    word_ids = tf.convert_to_tensor(word_ids, tf.int32)
    special = tf.constant(sorted(set(int(i) for i in special_ids)), tf.int32)
    is_special = tf.reduce_any(word_ids[:, :, None] == special[None, None, :], axis=-1)
    maskable = tf.logical_and(tf.cast(input_mask, tf.bool), tf.logical_not(is_special))
    seq_length = tf.shape(word_ids)[1]
    num_maskable = tf.reduce_sum(tf.cast(maskable, tf.int32), axis=1)
    budget = tf.cast(tf.round(tf.cast(num_maskable, tf.float32) * mask_ratio), tf.int32)
    budget = tf.minimum(tf.maximum(budget, 1), max_predictions)
    budget = tf.minimum(budget, num_maskable)

    seeds = _split_seed(seed, 3)
    scores = tf.random.stateless_uniform(tf.shape(word_ids), seed=seeds[0])
    scores = tf.where(maskable, scores, -1.0)
    k = tf.minimum(max_predictions, seq_length)
    _, ranked = tf.math.top_k(scores, k=k)
    keep = tf.range(k)[None, :] < budget[:, None]
    # Sort the chosen positions; unused slots get seq_length so they sort last.
    positions = tf.sort(tf.where(keep, ranked, seq_length), axis=1)
    weights = tf.cast(positions < seq_length, tf.float32)
    positions = tf.where(positions < seq_length, positions, 0)
    pad = max_predictions - k
    positions = tf.pad(positions, [[0, 0], [0, pad]])
    weights = tf.pad(weights, [[0, 0], [0, pad]])
    original = tf.gather(word_ids, positions, batch_dims=1)

    choice = tf.random.stateless_uniform(tf.shape(positions), seed=seeds[1])
    num_special = len(special_ids)
    random_ids = tf.random.stateless_uniform(
        tf.shape(positions), seed=seeds[2], minval=0, maxval=vocab_size - num_special,
        dtype=tf.int32)
    # Map 0..vocab-num_special-1 onto the non-special ids.
    random_ids = _skip_ids(random_ids, special)
    replacement = tf.where(choice < mask_token_rate, mask_id,
                           tf.where(choice < mask_token_rate + random_token_rate,
                                    random_ids, original))
    batch_size = tf.shape(word_ids)[0]
    rows = tf.repeat(tf.range(batch_size)[:, None], max_predictions, axis=1)
    indices = tf.stack([rows, positions], axis=-1)
    live = weights > 0
    corrupted = tf.tensor_scatter_nd_update(
        word_ids, tf.boolean_mask(indices, live), tf.boolean_mask(replacement, live))
    return {
        "input_word_ids": corrupted,
        "masked_lm_positions": positions,
        "masked_lm_ids": tf.where(live, original, 0),
        "masked_lm_weights": weights,
    }


def _skip_ids(values: tf.Tensor, sorted_excluded: tf.Tensor) -> tf.Tensor:
    """Maps v in [0, V - len(excluded)) to the v-th id of [0, V) not in `excluded`."""
    for i in range(int(sorted_excluded.shape[0])):
        values = values + tf.cast(values >= sorted_excluded[i], tf.int32)
    return values


def _split_seed(seed, count):
    if seed is None:
        base = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32)
    else:
        base = tf.cast(seed, tf.int64)
        if base.shape.rank == 0:
            base = tf.stack([base, tf.constant(0, tf.int64)])
    return tf.unstack(tf.random.experimental.stateless_split(tf.cast(base, tf.int64), count))


def masking_tokenizer(
        tokenizer_config: configs.TokenizerConfig) -> Tuple[tf_keras.layers.Layer, Dict[str, int]]:
    """The tokenizer and its special-token ids, checked to hold every id masking needs."""
    tokenizer = tokenization.build_tokenizer(tokenizer_config)
    special = tokenization.special_token_ids(tokenizer)
    for key in MASKING_SPECIAL_KEYS:
        if key not in special:
            raise ValueError(f"{tokenizer_config.vocab_file}: vocabulary lacks the token "
                             f"for {key} ([CLS], [SEP], [PAD], [MASK])")
    return tokenizer, special


def batch_seed(seed: Optional[int], batch_index=None) -> Optional[tf.Tensor]:
    """The stateless seed, int64 [2], of batch `batch_index` (default 0) of a pipeline
    seeded with `seed`; None when the pipeline is not seeded."""
    if seed is None:
        return None
    return tf.stack([tf.constant(seed, tf.int64),
                     tf.cast(batch_index if batch_index is not None else 0, tf.int64)])


class BatchMasker:
    """Masks batches of packed token ids as BERT does, reproducibly per batch.

    Args:
        tokenizer_config: `task.model.tokenizer`; its vocabulary must hold [CLS], [SEP],
            [PAD] and [MASK].
        max_predictions_per_seq, mask_ratio: the budget of `mask_tokens`.
        seed: the pipeline's seed (`task.*_data.seed`); batch i is masked with
            `batch_seed(seed, i)`. None draws fresh randomness.

    Attributes:
        tokenizer, special: the tokenizer layer and its special-token ids, for packing.

    Call args:
        word_ids, input_mask: int32 [batch, seq] of the packed sequences.
        batch_index: int64 scalar, the batch's position in the stream.

    Returns:
        The dict of `mask_tokens`.
    """

    def __init__(self, tokenizer_config: configs.TokenizerConfig, max_predictions_per_seq: int,
                 mask_ratio: float, seed: Optional[int] = None):
        self.tokenizer, self.special = masking_tokenizer(tokenizer_config)
        self.max_predictions_per_seq = max_predictions_per_seq
        self.mask_ratio = mask_ratio
        self.seed = seed

    def __call__(self, word_ids: tf.Tensor, input_mask: tf.Tensor,
                 batch_index=None) -> Dict[str, tf.Tensor]:
        return mask_tokens(
            word_ids, input_mask, vocab_size=int(self.special["vocab_size"]),
            mask_id=self.special["mask_id"],
            special_ids=[self.special[k] for k in MASKING_SPECIAL_KEYS],
            max_predictions=self.max_predictions_per_seq, mask_ratio=self.mask_ratio,
            seed=batch_seed(self.seed, batch_index))


class MaskingFeaturizer:
    """What a masked-LM featurizer holds: a `BatchMasker` (`masker`) and a
    `packing.SentencePacker` of the masker's tokenizer (`pack`, with the tokenizer, its
    special ids and the packed length)."""

    def __init__(self, tokenizer_config: configs.TokenizerConfig, seq_length: int,
                 max_predictions_per_seq: int, mask_ratio: float, *, seed: Optional[int] = None):
        self.masker = BatchMasker(tokenizer_config, max_predictions_per_seq, mask_ratio,
                                  seed=seed)
        self.pack = packing.SentencePacker(self.masker.tokenizer, seq_length)
