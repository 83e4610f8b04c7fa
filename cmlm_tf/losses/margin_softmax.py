"""Bidirectional in-batch softmax with an additive margin (translation ranking).

For sources x_i and targets y_j (L2-normalised inside the loss),

    logits_ij = scale · (cos(x_i, y_j) − margin · [j = i])

and the loss is the cross-entropy over each row (x → y) plus the cross-entropy over each
column (y → x), each averaged over the batch. The defaults, margin 0.3 and scale 100, are
LaBSE's (a factor 10 on each normalised embedding); the margin is in cosine units, as in
Model Garden's LaBSE configs. Scale and margin live only here: exported embeddings stay plain
L2-normalised vectors.

Hard negatives are extra target columns for the x → y direction: each row sees every target
and every hard negative of the (global) batch; the y → x direction ranks sources only.

Under a `tf.distribute` strategy, the function gathers every replica's embeddings, so each
softmax runs over the global batch and the positive of local row i is column
`replica_id · local_batch + i`. The returned loss is the mean over the replica's own rows;
Model Garden's train step divides it by the number of replicas and sums the gradients, which
gives exactly the loss and gradients of one device holding the whole global batch. Batches
must have the same static size on every replica (`drop_remainder`). With
`cross_replica_negatives=False` each replica ranks only its own rows (the ablation of LaBSE's
cross-accelerator negatives): the loss is then the mean of the replicas' local losses.
"""

import dataclasses
from typing import Dict, Mapping, Optional, Tuple

import tensorflow as tf
import tf_keras
from official.modeling import hyperparams

from cmlm_tf import distributed
from cmlm_tf.vectors import l2_normalize


@dataclasses.dataclass
class MarginSoftmaxConfig(hyperparams.Config):
    """The translation-ranking loss (LaBSE: margin 0.3, scale 100, both directions).

    `mask_duplicates`: leave pairs whose source or target text repeats a row's out of that
    row's negatives (they are translations of it, not negatives).
    `cross_replica_negatives`: rank each row against every replica's rows (LaBSE §3.3); false
    ranks it against its own replica's rows only.
    `mini_batch_size`: when > 0, train with cached gradients (`gradient_cache`): each
    replica's batch is embedded in chunks of this many pairs, so memory follows the chunk
    while the softmax still spans the whole global batch; same loss and gradients, one more
    forward pass. Must divide the per-replica batch; 0 (default) is off.
    """

    margin: float = 0.3
    scale: float = 100.0
    bidirectional: bool = True
    mask_duplicates: bool = True
    cross_replica_negatives: bool = True
    mini_batch_size: int = 0


# What a translation-ranking run reports (metric name -> the `ranking_losses` entry it
# averages): in-batch top-1 accuracy both ways, the mean positive cosine and the loss.
METRICS = {"source_to_target_accuracy": "source_to_target_correct",
           "target_to_source_accuracy": "target_to_source_correct",
           "positive_cosine": "positive_cosine",
           "ranking_loss": "ranking_loss"}


def _masked_logits(similarity, positive, duplicates, margin, *, scale):
    """scale · (cos − margin at the positive); duplicates of the positive are excluded."""
    logits = scale * (similarity - margin * positive)
    if duplicates is not None:
        excluded = tf.logical_and(duplicates, positive < 0.5)
        logits = tf.where(excluded, tf.constant(-1e9, logits.dtype), logits)
    return logits


def additive_margin_softmax_loss(
    source: tf.Tensor,
    target: tf.Tensor,
    *, margin: float = 0.3,
    scale: float = 100.0,
    hard_negatives: Optional[tf.Tensor] = None,
    source_ids: Optional[tf.Tensor] = None,
    target_ids: Optional[tf.Tensor] = None,
    bidirectional: bool = True,
    cross_replica_negatives: bool = True,
) -> Dict[str, tf.Tensor]:
    """The bidirectional additive-margin softmax loss over the global batch.

    Args:
        source: float [batch, dim] embeddings of the sources (this replica's rows).
        target: float [batch, dim] embeddings of their translations.
        margin: subtracted from the positive's cosine.
        scale: multiplies the (margin-adjusted) cosines.
        hard_negatives: optional float [batch · k, dim], row i's k hard negatives at rows
            i·k … i·k+k−1 (any layout works: every hard negative is a negative of every row).
        source_ids, target_ids: optional int64 [batch] fingerprints of the texts. A column
            whose source or target text equals row i's is a translation of row i, not a
            negative, and is left out of row i's softmax (duplicates inside a batch).
        bidirectional: add the y → x direction (columns).
        cross_replica_negatives: gather the other replicas' rows as negatives; false keeps
            each replica's softmax to its own rows.

    Returns:
        dict: `loss` (scalar, mean over local rows of the summed directions),
        `source_to_target_loss`, `target_to_source_loss`, `source_to_target_correct` and
        `target_to_source_correct` (float [batch]: whether the positive has the highest
        cosine, the margin left out: in-batch top-1 retrieval),
        `positive_cosine` [batch].
    """
    source = l2_normalize(source, tf.float32)
    target = l2_normalize(target, tf.float32)
    local_batch = tf.shape(source)[0]
    if cross_replica_negatives:
        gather, offset = distributed.all_gather, distributed.replica_offset(local_batch)
    else:
        gather, offset = tf.identity, tf.constant(0, tf.int32)
    labels = offset + tf.range(local_batch)

    all_source = gather(source)
    all_target = gather(target)
    global_batch = tf.shape(all_target)[0]
    positive = tf.one_hot(labels, global_batch, dtype=tf.float32)
    duplicates = _duplicate_columns(source_ids, target_ids, gather)
    columns, row_positive, row_duplicates = _with_hard_negatives(
        all_target, positive, duplicates, hard_negatives, gather=gather)

    forward, forward_correct = _direction_loss(source, columns, row_positive, row_duplicates,
                                               labels=labels, margin=margin, scale=scale)
    outputs = {
        "source_to_target_loss": forward,
        "source_to_target_correct": forward_correct,
        "positive_cosine": tf.reduce_sum(source * target, axis=-1),
    }
    loss = outputs["source_to_target_loss"]
    if bidirectional:
        backward, backward_correct = _direction_loss(target, all_source, positive, duplicates,
                                                     labels=labels, margin=margin, scale=scale)
        outputs["target_to_source_loss"] = backward
        outputs["target_to_source_correct"] = backward_correct
        loss += outputs["target_to_source_loss"]
    outputs["loss"] = loss
    return outputs


def _duplicate_columns(source_ids: Optional[tf.Tensor], target_ids: Optional[tf.Tensor],
                       gather) -> Optional[tf.Tensor]:
    """bool [batch, global_batch]: column j's source or target text equals row i's (None
    without both fingerprints)."""
    if source_ids is None or target_ids is None:
        return None
    all_source_ids = gather(source_ids)
    all_target_ids = gather(target_ids)
    return tf.logical_or(
        tf.equal(source_ids[:, None], all_source_ids[None, :]),
        tf.equal(target_ids[:, None], all_target_ids[None, :]))


def _with_hard_negatives(all_target: tf.Tensor, positive: tf.Tensor,
                         duplicates: Optional[tf.Tensor], hard_negatives: Optional[tf.Tensor],
                         *, gather) -> Tuple[tf.Tensor, tf.Tensor, Optional[tf.Tensor]]:
    """The source → target softmax's columns, positives and duplicates: the global batch's
    targets, followed by every replica's hard negatives (never positive, never duplicate)."""
    if hard_negatives is None:
        return all_target, positive, duplicates
    local_batch = tf.shape(positive)[0]
    all_negatives = gather(l2_normalize(hard_negatives, tf.float32))
    num_negatives = tf.shape(all_negatives)[0]
    columns = tf.concat([all_target, all_negatives], axis=0)
    row_positive = tf.concat([positive, tf.zeros([local_batch, num_negatives])], axis=1)
    row_duplicates = duplicates
    if duplicates is not None:
        row_duplicates = tf.concat(
            [duplicates, tf.zeros([local_batch, num_negatives], tf.bool)], axis=1)
    return columns, row_positive, row_duplicates


def _direction_loss(queries: tf.Tensor, columns: tf.Tensor, positive: tf.Tensor,
                    duplicates: Optional[tf.Tensor], *, labels: tf.Tensor, margin: float,
                    scale: float) -> Tuple[tf.Tensor, tf.Tensor]:
    """One direction's softmax over `columns`: (mean cross-entropy, float [batch] whether
    the positive has the highest cosine)."""
    cosines = tf.matmul(queries, columns, transpose_b=True)
    logits = _masked_logits(cosines, positive, duplicates, margin, scale=scale)
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
    return tf.reduce_mean(loss), _is_top(cosines, positive, duplicates, labels)


def _is_top(cosines: tf.Tensor, positive: tf.Tensor, duplicates: Optional[tf.Tensor],
            labels: tf.Tensor) -> tf.Tensor:
    """1.0 where the positive has the highest cosine of its row, else 0.0: float [batch].

    Ranked without the margin (and without the scale, which cannot change an argmax): the
    margin is a training device that makes the positive win by a gap; a retrieval is right
    when the translation is the nearest candidate, as `evaluate retrieval` counts it.
    Duplicates of the positive stay out, as in the loss.
    """
    scores = _masked_logits(cosines, positive, duplicates, margin=0.0, scale=1.0)
    best = tf.argmax(scores, axis=-1, output_type=tf.int32)
    return tf.cast(tf.equal(best, labels), tf.float32)


def ranking_losses(config: MarginSoftmaxConfig, inputs: Mapping[str, tf.Tensor],
                   embeddings: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """`additive_margin_softmax_loss` as `config` sets it, for a bitext batch.

    Args:
        config: `task.margin_softmax`.
        inputs: the `BitextFeaturizer` batch; its `source_id` / `target_id` fingerprints
            mask duplicates when `config.mask_duplicates`.
        embeddings: float [rows, dim] `source`, `target` and optionally `hard_negatives`.

    Returns:
        The dict of `additive_margin_softmax_loss`, plus `ranking_loss` (the same scalar as
        `loss`).
    """
    use_ids = config.mask_duplicates and "source_id" in inputs
    losses = additive_margin_softmax_loss(
        embeddings["source"], embeddings["target"], margin=config.margin, scale=config.scale,
        hard_negatives=embeddings.get("hard_negatives"),
        source_ids=inputs["source_id"] if use_ids else None,
        target_ids=inputs["target_id"] if use_ids else None,
        bidirectional=config.bidirectional,
        cross_replica_negatives=config.cross_replica_negatives)
    return dict(losses, ranking_loss=losses["loss"])


@tf_keras.utils.register_keras_serializable(package="cmlm_tf")
class AdditiveMarginSoftmax(tf_keras.layers.Layer):
    """Keras form of `additive_margin_softmax_loss`.

    Args:
        margin: subtracted from the positive's cosine, before scaling (LaBSE: 0.3).
        scale: multiplies the margin-adjusted cosines (LaBSE: 100).
        bidirectional: add the target → source direction.
        cross_replica_negatives: negatives from every replica (default) or this one only.

    Call args:
        source, target: float [batch, dim]; row i of each is a translation pair.
        hard_negatives, source_ids, target_ids: as in `additive_margin_softmax_loss`.

    Returns:
        The dict of `additive_margin_softmax_loss`; `loss` is the scalar to minimise.
    """

    def __init__(self, margin: float = 0.3, scale: float = 100.0, *, bidirectional: bool = True,
                 cross_replica_negatives: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.margin = margin
        self.scale = scale
        self.bidirectional = bidirectional
        self.cross_replica_negatives = cross_replica_negatives

    def call(self, source, target, hard_negatives=None, source_ids=None, target_ids=None):
        return additive_margin_softmax_loss(
            source, target, margin=self.margin, scale=self.scale,
            hard_negatives=hard_negatives, source_ids=source_ids, target_ids=target_ids,
            bidirectional=self.bidirectional,
            cross_replica_negatives=self.cross_replica_negatives)

    def get_config(self):
        return {**super().get_config(), "margin": self.margin, "scale": self.scale,
                "bidirectional": self.bidirectional,
                "cross_replica_negatives": self.cross_replica_negatives}
