"""The tail every input pipeline shares: batch, featurize, prefetch, in one order rule.

Readers (`sentence_pairs`, `mlm_tlm`, `bitext`, `nli`) yield string examples; a featurizer
tokenises a batch of them into int32 tensors of static shape. `batch_and_featurize` joins the
two the same way for every objective, and `is_deterministic` is the one rule for when parallel
`tf.data` stages must keep their order.

A resumed training continues the data where it stopped: `train.run` reads the step of the
checkpoint it restores and hands it to the task (`SentenceTask(resume_step=...)`), whose
readers pass it here as `resume_step`; every training pipeline then skips the examples of
the batches already trained on, before they are tokenised, and numbers its batches from
there (the per-batch masking seeds stay those of an uninterrupted run). With a `seed`, the
resumed run sees exactly the batches an uninterrupted run would have seen; without one, the
order is random anyway and the skip keeps a resumed run from starting over at the head of
the files.
"""

from typing import Callable, Optional

import tensorflow as tf
from absl import logging


def batches_to_skip(step: int, input_context=None) -> int:
    """Batches this input pipeline had produced by training step `step`: one per replica it
    feeds, per step."""
    step = int(step)
    if not step or not input_context:
        return step
    return step * input_context.num_replicas_in_sync // input_context.num_input_pipelines


def is_deterministic(seed: Optional[int], *, is_training: bool) -> bool:
    """Whether parallel stages keep their input order: with a seed (reproducible runs) and
    always in evaluation (every record once, in order); otherwise order yields to speed."""
    return seed is not None or not is_training


def batch_and_featurize(examples: tf.data.Dataset, data_config, featurize: Callable,
                        *, input_context=None, field: str = "task.train_data",
                        with_batch_index: bool = False,
                        resume_step: int = 0) -> tf.data.Dataset:
    """Batches `examples`, maps `featurize` over the batches in parallel, and prefetches.

    Args:
        examples: the reader's dataset of (unbatched) string examples.
        data_config: a Model Garden `DataConfig`: `global_batch_size` (> 0, split across
            replicas by `input_context`), `drop_remainder` (always on in training; in
            evaluation, off pads the last batch with rows of weight 0, `weigh_rows`, so
            every batch has one static size and every example counts once), `is_training`
            and `seed`.
        featurize: batch -> dict of tensors; with `with_batch_index`, (batch, index) where
            index is the int64 position of the batch in the stream (for per-batch seeds).
        field: where `data_config` sits in the experiment, for error messages.
        resume_step: the training step a resumed run starts from: a training pipeline
            starts after the batches of the steps before it.

    Raises:
        ValueError: `global_batch_size` is not positive, or the last batch is to be padded
            for an objective without per-row weights.
    """
    batch_size = data_config.global_batch_size
    if batch_size <= 0:
        raise ValueError(f"{field}.global_batch_size must be positive, got {batch_size}")
    if input_context:
        batch_size = input_context.get_per_replica_batch_size(batch_size)
    is_training = bool(data_config.is_training)
    skip = batches_to_skip(resume_step, input_context) if is_training else 0
    if skip:
        logging.info("%s: resuming the input after %d batches (%d examples skipped)", field,
                     skip, skip * batch_size)
        examples = examples.skip(skip * batch_size)
    pad = not (data_config.drop_remainder or is_training)
    if pad:
        examples = pad_to_full_batches(examples, batch_size)
    # Every batch has `batch_size` rows, a static shape: TPUs (and XLA) need one.
    batches = examples.batch(batch_size, drop_remainder=True)
    deterministic = is_deterministic(data_config.seed, is_training=is_training)

    def featurize_batch(batch, index):
        if pad:
            batch, weights = batch
        if with_batch_index:
            features = featurize(batch, index)
        else:
            # As `Dataset.map` calls it: a tuple element as separate arguments.
            features = featurize(*batch) if isinstance(batch, tuple) else featurize(batch)
        return weigh_rows(features, weights, field) if pad else features

    # Featurizers are graph ops without Python control flow on tensors: AutoGraph would
    # convert each tokenizer function they call, for nothing, at every start.
    featurize_batch = tf.autograph.experimental.do_not_convert(featurize_batch)
    if with_batch_index:
        batches = batches.enumerate(start=skip).map(
            lambda index, batch: featurize_batch(batch, index),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    else:
        batches = batches.map(
            lambda *batch: featurize_batch(batch[0] if len(batch) == 1 else batch, None),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return batches.prefetch(tf.data.AUTOTUNE)


def pad_to_full_batches(examples: tf.data.Dataset, batch_size: int) -> tf.data.Dataset:
    """(example, weight) pairs: every example with weight 1.0, then copies of the first one
    with weight 0.0 that fill the last batch of `batch_size` (none when it is full).

    Batched with `drop_remainder=True`, this keeps every example and gives every batch the
    same static size; an empty dataset stays empty.
    """
    ones = tf.data.Dataset.from_tensors(tf.constant(1.0)).repeat()
    zeros = tf.data.Dataset.from_tensors(tf.constant(0.0)).repeat()
    # batch_size - 1 fillers complete any partial batch; what is left over is dropped.
    fillers = examples.take(1).repeat(batch_size - 1)
    return tf.data.Dataset.zip((examples, ones)).concatenate(
        tf.data.Dataset.zip((fillers, zeros)))


def weigh_rows(features: dict, weights: tf.Tensor, field: str) -> dict:
    """`features` with `example_weight` (float32 [batch], 0.0 for the filler rows of
    `pad_to_full_batches`) and with `masked_lm_weights` [batch, P] times it, so the masked-LM
    losses and accuracies, which average over those weights, leave the fillers out.

    Raises:
        ValueError: the features have no per-row weights the objective reads.
    """
    if "masked_lm_weights" not in features:
        raise ValueError(f"{field}.drop_remainder: false pads the last batch with rows of "
                         "weight 0, which this objective's losses do not read; set "
                         f"{field}.drop_remainder: true")
    return dict(features, example_weight=weights,
                masked_lm_weights=features["masked_lm_weights"] * weights[:, None])
