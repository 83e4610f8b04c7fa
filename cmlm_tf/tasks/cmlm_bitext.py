"""CMLM + bitext retrieval on one shared encoder, and the `cmlm_tf/cmlm_bitext` experiment.

L = L_CMLM + α · L_BR (CMLM paper §4.2, α = `task.bitext_weight`, 0.2). Each training step
draws a CMLM batch from `task.train_data` (plain text) and a bitext batch from
`task.bitext_data`; both go through the same encoder (the ranking part with cached
gradients when `task.margin_softmax.mini_batch_size` is set). Validation (`task.validation_data`)
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

from cmlm_tf import configs
from cmlm_tf.data import bitext, sentence_pairs
from cmlm_tf.losses import margin_softmax
from cmlm_tf.losses.margin_softmax import MarginSoftmaxConfig
from cmlm_tf.losses.masked_lm import masked_lm_loss
from cmlm_tf.modeling import conditional_mlm, dual_encoder
from cmlm_tf.modeling.cmlm_bitext import CMLMBitextModel
from cmlm_tf.tasks import base
from cmlm_tf.training import steps


@dataclasses.dataclass
class CMLMBitextTaskConfig(configs.SentenceTaskConfig):
    """The `cmlm_tf/cmlm` fields plus `bitext_data`, `margin_softmax` and `bitext_weight`, α,
    the weight of the ranking loss."""

    model: conditional_mlm.CMLMModelConfig = dataclasses.field(
        default_factory=conditional_mlm.CMLMModelConfig)
    train_data: sentence_pairs.CMLMDataConfig = configs.training_data(
        sentence_pairs.CMLMDataConfig)
    validation_data: sentence_pairs.CMLMDataConfig = configs.validation_data(
        sentence_pairs.CMLMDataConfig, drop_remainder=False)
    bitext_data: bitext.BitextDataConfig = configs.training_data(bitext.BitextDataConfig)
    bitext_weight: float = 0.2
    margin_softmax: MarginSoftmaxConfig = dataclasses.field(default_factory=MarginSoftmaxConfig)


@exp_factory.register_config_factory("cmlm_tf/cmlm_bitext")
def cmlm_bitext_experiment() -> cfg.ExperimentConfig:
    task = CMLMBitextTaskConfig()
    task.bitext_data.override({"global_batch_size": 2048, "seq_length": 128})
    return configs.experiment(task, configs.lamb_optimizer(), train_steps=1000000,
                              loop=configs.PRETRAINING_LOOP)


@task_factory.register_task_cls(CMLMBitextTaskConfig)
class CMLMBitextTask(base.SentenceTask):
    """CMLM and translation ranking with one shared encoder, L = L_CMLM + α · L_BR."""

    metric_sources = margin_softmax.METRICS

    def build_model(self) -> CMLMBitextModel:
        return CMLMBitextModel(conditional_mlm.build_conditional_mlm(
            self.task_config.model, self.task_config.train_data.seq_length))

    def build_inputs(self, params, input_context=None) -> tf.data.Dataset:
        tokenizer = self.task_config.model.tokenizer
        field = base.data_field(params)
        text = sentence_pairs.cmlm_dataset(params, tokenizer, input_context=input_context,
                                           field=field, resume_step=self.resume_step)
        if not params.is_training:
            return text.map(lambda batch: {"cmlm": batch})
        pairs = bitext.bitext_dataset(self.task_config.bitext_data, tokenizer,
                                      input_context=input_context, field="task.bitext_data",
                                      resume_step=self.resume_step,
                                      reports=self.malformed_reports)
        return tf.data.Dataset.zip((text, pairs)).map(
            lambda text_batch, pair_batch: {"cmlm": text_batch, "bitext": pair_batch})

    def compute_losses(self, inputs, outputs):
        mlm_loss = masked_lm_loss(inputs["cmlm"], outputs["mlm_logits"])
        losses = {"mlm_loss": mlm_loss, "loss": mlm_loss}
        if "bitext" in outputs:
            ranking = margin_softmax.ranking_losses(self.task_config.margin_softmax,
                                                    inputs["bitext"], outputs["bitext"])
            losses.update(ranking, mlm_loss=mlm_loss,
                          loss=mlm_loss + self.task_config.bitext_weight * ranking["loss"])
        return losses

    def ranked_part(self, inputs, model: CMLMBitextModel) -> Optional[steps.RankedPart]:
        """The ranking part's pairs, embedded apart, in chunks with cached gradients under
        `task.margin_softmax.mini_batch_size` (the CMLM part with an ordinary tape)."""
        if "bitext" not in inputs:
            return None
        return base.margin_ranked_pairs(
            self.task_config, inputs["bitext"],
            lambda part: dual_encoder.encode_pairs(model.encoder, part, training=True))

    def forward_pass(self, inputs, model: CMLMBitextModel, optimizer, ranked):
        if ranked is None:
            return super().forward_pass(inputs, model, optimizer, ranked)
        return lambda: dict(model.cmlm(inputs["cmlm"], training=True))

    def assemble_outputs(self, other, embeddings):
        return other if embeddings is None else dict(other, bitext=embeddings)

    def build_metrics(self, training: Optional[bool] = None):
        metrics = [tf_keras.metrics.SparseCategoricalAccuracy(name="masked_lm_accuracy"),
                   tf_keras.metrics.Mean(name="mlm_loss")]
        if training:
            metrics += [tf_keras.metrics.Mean(name=name) for name in margin_softmax.METRICS]
        return metrics

    def update_metrics(self, metrics, inputs, outputs, losses):
        super().update_metrics(metrics, inputs, outputs, losses)
        by_name = {m.name: m for m in metrics}
        by_name["masked_lm_accuracy"].update_state(
            inputs["cmlm"]["masked_lm_ids"], outputs["mlm_logits"],
            inputs["cmlm"]["masked_lm_weights"])
