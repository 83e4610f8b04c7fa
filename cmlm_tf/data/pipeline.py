"""The tail every input pipeline shares: batch, featurize, prefetch, in one order rule.

Readers (`sentence_pairs`, `mlm_tlm`, `bitext`, `nli`) yield string examples; a featurizer
tokenises a batch of them into int32 tensors of static shape. `batch_and_featurize` joins the
two the same way for every objective, and `is_deterministic` is the one rule for when parallel
`tf.data` stages must keep their order.
"""

from typing import Callable, Optional

import tensorflow as tf


def is_deterministic(seed: Optional[int], is_training: bool) -> bool:
    """Whether parallel stages keep their input order: with a seed (reproducible runs) and
    always in evaluation (every record once, in order); otherwise order yields to speed."""
    return seed is not None or not is_training


def batch_and_featurize(examples: tf.data.Dataset, data_config, featurize: Callable,
                        input_context=None, field: str = "task.train_data",
                        with_batch_index: bool = False) -> tf.data.Dataset:
    """Batches `examples`, maps `featurize` over the batches in parallel, and prefetches.

    Args:
        examples: the reader's dataset of (unbatched) string examples.
        data_config: a Model Garden `DataConfig`: `global_batch_size` (> 0, split across
            replicas by `input_context`), `drop_remainder` (always on in training, so every
            replica sees one static batch size), `is_training` and `seed`.
        featurize: batch -> dict of tensors; with `with_batch_index`, (batch, index) where
            index is the int64 position of the batch in the stream (for per-batch seeds).
        field: where `data_config` sits in the experiment, for error messages.

    Raises:
        ValueError: `global_batch_size` is not positive.
    """
    batch_size = data_config.global_batch_size
    if batch_size <= 0:
        raise ValueError(f"{field}.global_batch_size must be positive, got {batch_size}")
    if input_context:
        batch_size = input_context.get_per_replica_batch_size(batch_size)
    is_training = bool(data_config.is_training)
    batches = examples.batch(batch_size,
                             drop_remainder=data_config.drop_remainder or is_training)
    deterministic = is_deterministic(data_config.seed, is_training)
    if with_batch_index:
        batches = batches.enumerate().map(
            lambda index, batch: featurize(batch, index), num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic)
    else:
        batches = batches.map(featurize, num_parallel_calls=tf.data.AUTOTUNE,
                              deterministic=deterministic)
    return batches.prefetch(tf.data.AUTOTUNE)
