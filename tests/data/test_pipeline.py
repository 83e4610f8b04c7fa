"""The tail every input pipeline shares (`cmlm_tf.data.pipeline`): batch sizes, the resume
skip, padding of the last evaluation batch, and the order rule."""

import numpy as np
import pytest
import tensorflow as tf
from official.core import config_definitions as cfg

from cmlm_tf.data import pipeline


def _config(batch_size, is_training, *, drop_remainder=True, seed=None):
    return cfg.DataConfig(global_batch_size=batch_size, is_training=is_training,
                          drop_remainder=drop_remainder, seed=seed)


def _masked(values):
    """A featurizer of masked-LM shape: one weight per row and prediction."""
    return {"ids": values, "masked_lm_weights": tf.ones([tf.shape(values)[0], 2])}


def test_batches_to_skip_counts_every_replica_the_pipeline_feeds():
    assert pipeline.batches_to_skip(0) == 0
    assert pipeline.batches_to_skip(7) == 7
    two_per_pipeline = tf.distribute.InputContext(num_input_pipelines=1,
                                                  num_replicas_in_sync=2)
    assert pipeline.batches_to_skip(7, two_per_pipeline) == 14
    one_each = tf.distribute.InputContext(num_input_pipelines=2, num_replicas_in_sync=2)
    assert pipeline.batches_to_skip(7, one_each) == 7


def test_order_is_kept_with_a_seed_and_in_evaluation():
    assert pipeline.is_deterministic(seed=1, is_training=True)
    assert pipeline.is_deterministic(seed=None, is_training=False)
    assert not pipeline.is_deterministic(seed=None, is_training=True)


def test_a_resumed_training_pipeline_starts_after_the_trained_batches():
    examples = tf.data.Dataset.range(20)
    batches = pipeline.batch_and_featurize(
        examples, _config(4, True, seed=1), lambda batch, index: {"ids": batch, "index": index},
        with_batch_index=True, resume_step=2)
    first = next(iter(batches))
    np.testing.assert_array_equal(first["ids"], [8, 9, 10, 11])
    assert int(first["index"]) == 2  # numbered as in the uninterrupted run


def test_evaluation_never_skips_and_pads_the_last_batch_with_zero_weights():
    batches = list(pipeline.batch_and_featurize(
        tf.data.Dataset.range(5), _config(4, False, drop_remainder=False), _masked,
        resume_step=3))
    assert [b["ids"].shape[0] for b in batches] == [4, 4]  # one static batch size
    weights = np.concatenate([b["example_weight"].numpy() for b in batches])
    np.testing.assert_array_equal(weights, [1, 1, 1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(batches[1]["ids"][:1], [4])  # every example once
    np.testing.assert_array_equal(batches[1]["masked_lm_weights"].numpy(),
                                  [[1, 1], [0, 0], [0, 0], [0, 0]])


def test_padding_for_an_objective_without_row_weights_names_the_field():
    with pytest.raises(ValueError, match=r"task.validation_data.drop_remainder"):
        list(pipeline.batch_and_featurize(
            tf.data.Dataset.range(5), _config(4, False, drop_remainder=False),
            lambda batch: {"ids": batch}, field="task.validation_data"))


def test_a_batch_size_that_is_not_positive_names_the_field():
    with pytest.raises(ValueError, match=r"task.train_data.global_batch_size must be positive"):
        pipeline.batch_and_featurize(tf.data.Dataset.range(5), _config(0, True),
                                     lambda batch: {"ids": batch})
