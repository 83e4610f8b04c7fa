"""Unsupervised SimCSE and the `cmlm_tf/simcse` experiment.

Gao, Yao and Chen, "SimCSE: Simple Contrastive Learning of Sentence Embeddings" (EMNLP
2021), the unsupervised objective: each plain sentence is encoded twice in training mode,
and the two dropout masks make the two views of a sentence a positive pair; the other
sentences of the (global) batch are its negatives. For views h_i and h'_i of sentence i,

    loss = mean_i −log( exp(cos(h_i, h'_i) / τ) / Σ_j exp(cos(h_i, h'_j) / τ) ),   τ = 0.05

which is the in-batch softmax of `cmlm_tf.losses.margin_softmax` with margin 0, scale
1 / τ = 20 and one direction. A batch of sentences is read as a batch of pairs whose two
sides are the same text; the dual encoder embeds both sides in one encoder call, in which
every row draws its own dropout mask (as the paper's code, which repeats the batch). A
sentence that occurs twice in a batch is left out of its own negatives
(`task.margin_softmax.mask_duplicates`). In evaluation mode dropout is off and the two views
are equal.
"""

import dataclasses
from typing import Dict, Optional

import tensorflow as tf
import tf_keras
from official.core import config_definitions as cfg
from official.core import exp_factory, task_factory

from cmlm_tf import configs
from cmlm_tf.data import sentences
from cmlm_tf.losses import margin_softmax
from cmlm_tf.losses.margin_softmax import MarginSoftmaxConfig
from cmlm_tf.modeling import dual_encoder
from cmlm_tf.tasks import base
from cmlm_tf.training import steps

TEMPERATURE = 0.05


def simcse_loss_config() -> MarginSoftmaxConfig:
    """SimCSE's loss as a margin softmax: no margin, scale 1 / τ, first view → second."""
    return MarginSoftmaxConfig(margin=0.0, scale=1.0 / TEMPERATURE, bidirectional=False)


@dataclasses.dataclass
class SimCSETaskConfig(configs.SentenceTaskConfig):
    margin_softmax: MarginSoftmaxConfig = dataclasses.field(default_factory=simcse_loss_config)
    train_data: sentences.SentencesDataConfig = configs.training_data(
        sentences.SentencesDataConfig, global_batch_size=64, seq_length=32)
    validation_data: sentences.SentencesDataConfig = configs.validation_data(
        sentences.SentencesDataConfig, global_batch_size=64, seq_length=32)


@exp_factory.register_config_factory("cmlm_tf/simcse")
def simcse_experiment() -> cfg.ExperimentConfig:
    """The paper's BERT-base settings (batch 64, 32 tokens, AdamW at 3e-5); the tiny recipe
    that warm-starts a cmlm_tiny run is `configs/simcse_tiny.yaml`."""
    return configs.experiment(SimCSETaskConfig(), configs.adamw_optimizer(3e-5, 0),
                              train_steps=15000)


def as_views(features: Dict) -> Dict:
    """A `sentences` batch as the pairs the dual encoder and the ranking loss read: both
    sides (and both fingerprints) are the sentence."""
    return {"source": features["sentence"], "target": features["sentence"],
            "source_id": features["sentence_id"], "target_id": features["sentence_id"]}


@task_factory.register_task_cls(SimCSETaskConfig)
class SimCSETask(base.SentenceTask):
    """Unsupervised SimCSE: two dropout views of each sentence, in-batch negatives."""

    metric_sources = margin_softmax.METRICS

    def build_model(self) -> dual_encoder.DualEncoder:
        configs.validate_model_config(self.task_config.model)
        return dual_encoder.DualEncoder(self.task_config.model.encoder)

    def build_inputs(self, params: sentences.SentencesDataConfig,
                     input_context=None) -> tf.data.Dataset:
        dataset = sentences.sentences_dataset(
            params, self.task_config.model.tokenizer, input_context=input_context,
            field=base.data_field(params), resume_step=self.resume_step,
            reports=self.malformed_reports)
        return dataset.map(as_views)

    def compute_losses(self, inputs, outputs):
        return margin_softmax.ranking_losses(self.task_config.margin_softmax, inputs, outputs)

    def build_metrics(self, training: Optional[bool] = None):
        """The ranking metrics; the backward accuracy only when the loss ranks that way."""
        backward = self.task_config.margin_softmax.bidirectional
        return [tf_keras.metrics.Mean(name=name) for name in margin_softmax.METRICS
                if backward or name != "target_to_source_accuracy"]

    def ranked_part(self, inputs, model: tf_keras.Model) -> steps.RankedPart:
        """Both views of every sentence, embedded in chunks of
        `task.margin_softmax.mini_batch_size` with cached gradients when it is set (each
        chunk's dropout masks replayed in the second pass)."""
        return base.margin_ranked_pairs(self.task_config, inputs,
                                        lambda part: model(part, training=True))
