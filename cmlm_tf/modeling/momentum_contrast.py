"""The dual momentum contrast model: query encoders, their momentum copies, a queue per side.

Per side of the bitext (source x, target y): a query encoder, its key encoder (EMA copy, no
gradient) and a `MomentumQueue` of that side's keys. By default one multilingual query encoder
(and so one key encoder) serves both sides; `shared_encoder=False` gives each side its own, as
in the paper's English/Chinese setting. Like MoCo's `builder.py`, a training call

1. moves the key encoders towards the query encoders (θ_k ← m·θ_k + (1 − m)·θ_q),
2. embeds the queries (with dropout) and the keys (without dropout, without gradient), mean
   pooling as configured, then L2 normalisation,
3. scores each query against its translation's key and against the other side's queue,
4. enqueues the new keys, all-gathered from every replica, after the scores are taken.

An inference call (`training=False`) only does 2 and 3. Key encoders and queues are tracked
by the model, so the trainer's checkpoints carry them and a resumed run keeps its negatives;
`checkpoint_items` hold only the query encoders, which are what is exported.
"""

from typing import Dict, Optional

import tensorflow as tf
import tf_keras

from cmlm_tf import configs
from cmlm_tf.modeling import dual_encoder, pair_classifier
from cmlm_tf.modeling.momentum_queue import MomentumQueue, momentum_update, replicated_state
from cmlm_tf.modeling.sentence_encoder import SentenceEncoder
from cmlm_tf.vectors import l2_normalize


def _build_key_encoder(config: configs.EncoderConfig, name: str) -> SentenceEncoder:
    with replicated_state():
        encoder = SentenceEncoder(config, name=name).build_variables()
    encoder.trainable = False
    return encoder


def _matched_weights(key: tf_keras.Model, query: tf_keras.Model):
    """The two encoders' weights, paired by their path below the encoder's own name.

    (`weights` lists trainable weights first, so its order differs between a trainable query
    encoder and a frozen key encoder.)
    """
    def by_path(model):
        return {w.name.split("/", 1)[-1]: w for w in model.weights}

    keys, queries = by_path(key), by_path(query)
    if keys.keys() != queries.keys():
        raise ValueError(f"{key.name} and {query.name} do not have the same variables")
    paths = sorted(queries)
    return [keys[p] for p in paths], [queries[p] for p in paths]


class DualMomentumContrast(tf_keras.Model):
    """Dual momentum contrast over translation pairs.

    Args:
        encoder_config: the query encoders' (and key encoders') configuration.
        queue_size: K, keys kept per side.
        momentum: m of the key encoders' update; 0 makes the keys come from the current query
            weights (the paper's "w/o momentum" ablation).
        shared_encoder: one query encoder for both sides (default) or one per side.
        mask_duplicates: leave queued keys out of a row's negatives when their pair has the
            row's source or target text (needs `source_id` / `target_id` in the inputs).
        pair_head: an optional `PairClassifierHead` for the NLI multitask: when the inputs
            hold `nli` (from `cmlm_tf.data.nli.NLIFeaturizer`), the (source-side) query
            encoder embeds its premises and hypotheses and the head classifies them.

    Call args:
        inputs: dict from `cmlm_tf.data.bitext.BitextFeaturizer`: `source`, `target` (TF Hub
            input dicts, int32 [batch, seq]), `source_id`, `target_id` (int64 [batch]).
        training: True for a training step: momentum update, dropout, enqueue.

    Returns:
        dict: `source`, `target` (float [batch, dim], L2-normalised query embeddings);
        `source_to_target_positive` (float [batch], h_x·h_y with h_y the target's key),
        `source_to_target_negatives` (float [batch, K], h_x against the target queue), and
        the same two for `target_to_source`; `negative_mask` (bool [batch, K], the queued
        pairs that are negatives of row i, for both directions); `queue_fill` (float scalar,
        share of filled slots before this step's keys); with a pair head and `nli` inputs,
        `nli_logits` (float32 [nli_batch, 3]).
    """

    def __init__(self, encoder_config: configs.EncoderConfig, queue_size: int,
                 *, momentum: float = 0.999, shared_encoder: bool = True,
                 mask_duplicates: bool = True,
                 pair_head: Optional[tf_keras.layers.Layer] = None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must be in [0, 1], got {momentum}")
        self.momentum = momentum
        self.shared_encoder = shared_encoder
        self.mask_duplicates = mask_duplicates
        self.encoder = SentenceEncoder(encoder_config, name="encoder").build_variables()
        self.key_encoder = _build_key_encoder(encoder_config, "key_encoder")
        if not shared_encoder:
            self.target_encoder = SentenceEncoder(
                encoder_config, name="target_encoder").build_variables()
            self.target_key_encoder = _build_key_encoder(encoder_config, "target_key_encoder")
        dim = self.encoder.output_dim
        self.source_queue = MomentumQueue(queue_size, dim, name="source_queue")
        self.target_queue = MomentumQueue(queue_size, dim, name="target_queue")
        self.pair_head = pair_head
        self.reset_key_encoders()

    @property
    def checkpoint_items(self):
        items = {"encoder": self.encoder}
        if not self.shared_encoder:
            items["target_encoder"] = self.target_encoder
        if self.pair_head is not None:
            items["nli_head"] = self.pair_head
        return items

    def encoder_pairs(self):
        """(key encoder, query encoder) for each distinct encoder."""
        pairs = [(self.key_encoder, self.encoder)]
        if not self.shared_encoder:
            pairs.append((self.target_key_encoder, self.target_encoder))
        return pairs

    def reset_key_encoders(self) -> None:
        """Makes every key encoder an exact copy of its query encoder (after a warm start)."""
        for key, query in self.encoder_pairs():
            momentum_update(*_matched_weights(key, query), 0.0)

    def copy_encoder_to_target(self) -> None:
        """Starts the target-side query encoder from the source side's weights."""
        momentum_update(*_matched_weights(self.target_encoder, self.encoder), 0.0)

    def _embed(self, encoders, inputs: Dict, training) -> Dict[str, tf.Tensor]:
        sides = {side: inputs[side] for side in ("source", "target")}
        if self.shared_encoder:
            pooled = dual_encoder.encode_pairs(encoders[0], sides, training=training)
        else:
            pooled = {side: encoder(sides[side], training=training)["pooled_output"]
                      for side, encoder in zip(("source", "target"), encoders)}
        return {side: l2_normalize(vectors, tf.float32) for side, vectors in pooled.items()}

    def _negative_mask(self, inputs: Dict, source_queue: Dict, target_queue: Dict):
        mask = source_queue["filled"][tf.newaxis, :]
        if self.mask_duplicates and "source_id" in inputs and "target_id" in inputs:
            same_text = tf.logical_or(
                tf.equal(inputs["source_id"][:, tf.newaxis], source_queue["ids"][tf.newaxis]),
                tf.equal(inputs["target_id"][:, tf.newaxis], target_queue["ids"][tf.newaxis]))
            return tf.logical_and(mask, tf.logical_not(same_text))
        rows = tf.shape(inputs["source"]["input_word_ids"])[0]
        return tf.tile(mask, [rows, 1])

    def call(self, inputs, training=None):
        training = bool(training)
        if training:
            for key, query in self.encoder_pairs():
                momentum_update(*_matched_weights(key, query), self.momentum)
        key_encoders = [key for key, _ in self.encoder_pairs()]
        query_encoders = [query for _, query in self.encoder_pairs()]
        queries = self._embed(query_encoders, inputs, training)
        keys = {side: tf.stop_gradient(vectors)
                for side, vectors in self._embed(key_encoders, inputs, False).items()}

        source_queue = self.source_queue.read()
        target_queue = self.target_queue.read()
        outputs = {
            "source": queries["source"],
            "target": queries["target"],
            "source_to_target_positive": tf.reduce_sum(queries["source"] * keys["target"], -1),
            "source_to_target_negatives": tf.matmul(queries["source"], target_queue["keys"],
                                                    transpose_b=True),
            "target_to_source_positive": tf.reduce_sum(queries["target"] * keys["source"], -1),
            "target_to_source_negatives": tf.matmul(queries["target"], source_queue["keys"],
                                                    transpose_b=True),
            "negative_mask": self._negative_mask(inputs, source_queue, target_queue),
            "queue_fill": source_queue["fill"],
        }
        if self.pair_head is not None and "nli" in inputs:
            outputs["nli_logits"] = pair_classifier.classify_pairs(
                self.encoder, self.pair_head, inputs["nli"], training=training)
        if training:
            # After the scores: this step's keys are negatives from the next step on.
            with tf.control_dependencies([outputs["source_to_target_negatives"],
                                          outputs["target_to_source_negatives"]]):
                self.source_queue.enqueue(keys["source"], inputs.get("source_id"))
                self.target_queue.enqueue(keys["target"], inputs.get("target_id"))
        return outputs
