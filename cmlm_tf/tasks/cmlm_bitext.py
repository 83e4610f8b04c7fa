"""CMLM + bitext retrieval on one shared encoder, and the `cmlm_tf/cmlm_bitext` experiment.

L = L_CMLM + α · L_BR (CMLM paper §4.2, α = `task.bitext_weight`, 0.2). Each training step
draws a CMLM batch from `task.train_data` (plain text) and a bitext batch from
`task.bitext_data`; both go through the same encoder. Validation (`task.validation_data`)
measures CMLM only.

The paper's three strategies are recipes (README, "Multitask strategies"): this experiment
from the start (joint); `cmlm_tf/cmlm` then `cmlm_tf/bitext` (CMLM, then BR only); and
`cmlm_tf/cmlm` then this experiment (CMLM, then CMLM + BR). A later stage names the earlier
run in `task.init_checkpoint`; the CMLM projection and head are restored when the
checkpoint holds them.
"""

import dataclasses
from typing import Optional

import tensorflow as tf
import tf_keras
from official.core import config_definitions as cfg
from official.core import exp_factory, task_factory

from cmlm_tf.data import bitext, sentence_pairs
from cmlm_tf.losses.masked_lm import masked_lm_loss
from cmlm_tf.modeling import dual_encoder
from cmlm_tf.tasks import base, cmlm
from cmlm_tf.tasks import bitext as bitext_task


@dataclasses.dataclass
class CMLMBitextTaskConfig(cmlm.CMLMTaskConfig):
    """`bitext_weight`: α, the weight of the ranking loss."""

    bitext_data: bitext.BitextDataConfig = dataclasses.field(
        default_factory=lambda: bitext.BitextDataConfig(is_training=True))
    bitext_weight: float = 0.2
    margin_softmax: bitext_task.MarginSoftmaxConfig = dataclasses.field(
        default_factory=bitext_task.MarginSoftmaxConfig)


@exp_factory.register_config_factory("cmlm_tf/cmlm_bitext")
def cmlm_bitext_experiment() -> cfg.ExperimentConfig:
    task = CMLMBitextTaskConfig()
    task.bitext_data.override({"global_batch_size": 2048, "seq_length": 128})
    return cfg.ExperimentConfig(
        task=task,
        trainer=cfg.TrainerConfig(
            train_steps=1000000, optimizer_config=cmlm.lamb_optimizer(),
            checkpoint_interval=10000, max_to_keep=5, summary_interval=1000,
            steps_per_loop=1000, validation_steps=100, validation_interval=10000),
        restrictions=["task.train_data.is_training != None"])


class CMLMBitextModel(tf_keras.Model):
    """The CMLM pretrainer plus translation ranking through its own encoder.

    Call args:
        inputs: dict with `cmlm` (the CMLM batch) and, in training, `bitext` (the
            `BitextFeaturizer` batch).

    Returns:
        dict: `mlm_logits` and `sentence_vector` from CMLM; `bitext`, the pair embeddings,
        when the bitext batch is given.
    """

    def __init__(self, conditional_mlm, **kwargs):
        super().__init__(**kwargs)
        self.cmlm = conditional_mlm
        self.encoder = conditional_mlm.encoder

    @property
    def checkpoint_items(self):
        return self.cmlm.checkpoint_items

    def call(self, inputs, training=None):
        outputs = dict(self.cmlm(inputs["cmlm"], training=training))
        if "bitext" in inputs:
            outputs["bitext"] = dual_encoder.encode_pairs(self.encoder, inputs["bitext"],
                                                          training=training)
        return outputs


@task_factory.register_task_cls(CMLMBitextTaskConfig)
class CMLMBitextTask(base.SentenceTask):
    """CMLM and translation ranking with one shared encoder, L = L_CMLM + α · L_BR."""

    def build_model(self) -> CMLMBitextModel:
        return CMLMBitextModel(cmlm.build_conditional_mlm(self.task_config))

    def build_inputs(self, params, input_context=None) -> tf.data.Dataset:
        tokenizer = self.task_config.model.tokenizer
        text = sentence_pairs.cmlm_dataset(params, tokenizer, input_context=input_context)
        if not params.is_training:
            return text.map(lambda batch: {"cmlm": batch})
        pairs = bitext.bitext_dataset(self.task_config.bitext_data, tokenizer,
                                      input_context=input_context, field="task.bitext_data")
        return tf.data.Dataset.zip((text, pairs)).map(
            lambda text_batch, pair_batch: {"cmlm": text_batch, "bitext": pair_batch})

    def compute_losses(self, inputs, outputs):
        mlm_loss = masked_lm_loss(inputs["cmlm"], outputs["mlm_logits"])
        losses = {"mlm_loss": mlm_loss, "loss": mlm_loss}
        if "bitext" in outputs:
            ranking = bitext_task.ranking_losses(self.task_config.margin_softmax,
                                                 inputs["bitext"], outputs["bitext"])
            losses.update(ranking, ranking_loss=ranking["loss"], mlm_loss=mlm_loss,
                          loss=mlm_loss + self.task_config.bitext_weight * ranking["loss"])
        return losses

    def build_metrics(self, training: Optional[bool] = None):
        metrics = [tf_keras.metrics.SparseCategoricalAccuracy(name="masked_lm_accuracy"),
                   tf_keras.metrics.Mean(name="mlm_loss")]
        if training:
            metrics += bitext_task.ranking_metrics()
        return metrics

    def update_metrics(self, metrics, inputs, outputs, losses):
        by_name = {m.name: m for m in metrics}
        by_name["masked_lm_accuracy"].update_state(
            inputs["cmlm"]["masked_lm_ids"], outputs["mlm_logits"],
            inputs["cmlm"]["masked_lm_weights"])
        by_name["mlm_loss"].update_state(losses["mlm_loss"])
        if "ranking_loss" in losses:
            bitext_task.update_ranking_metrics(metrics, losses)
