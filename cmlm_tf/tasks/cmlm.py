"""The CMLM task and the `cmlm_tf/cmlm` experiment."""

import dataclasses
from typing import Optional

import tensorflow as tf
import tf_keras
from official.core import config_definitions as cfg
from official.core import exp_factory, task_factory

from cmlm_tf import configs
from cmlm_tf.data import sentence_pairs
from cmlm_tf.losses.masked_lm import masked_lm_loss
from cmlm_tf.modeling import conditional_mlm
from cmlm_tf.tasks import base


@dataclasses.dataclass
class CMLMTaskConfig(configs.SentenceTaskConfig):
    model: conditional_mlm.CMLMModelConfig = dataclasses.field(
        default_factory=conditional_mlm.CMLMModelConfig)
    train_data: sentence_pairs.CMLMDataConfig = configs.training_data(
        sentence_pairs.CMLMDataConfig)
    validation_data: sentence_pairs.CMLMDataConfig = configs.validation_data(
        sentence_pairs.CMLMDataConfig, drop_remainder=False)


@exp_factory.register_config_factory("cmlm_tf/cmlm")
def cmlm_experiment() -> cfg.ExperimentConfig:
    return configs.experiment(CMLMTaskConfig(), configs.lamb_optimizer(), train_steps=1000000,
                              loop=configs.PRETRAINING_LOOP)


@task_factory.register_task_cls(CMLMTaskConfig)
class CMLMTask(base.SentenceTask):
    """Conditional masked LM on consecutive sentence pairs (plus optional dev STS/retrieval)."""

    def build_model(self) -> conditional_mlm.ConditionalMLM:
        return conditional_mlm.build_conditional_mlm(self.task_config.model,
                                                     self.task_config.train_data.seq_length)

    def build_inputs(self, params: sentence_pairs.CMLMDataConfig,
                     input_context=None) -> tf.data.Dataset:
        field = base.data_field(params)
        return sentence_pairs.cmlm_dataset(params, self.task_config.model.tokenizer,
                                           input_context=input_context, field=field,
                                           resume_step=self.resume_step)

    def compute_losses(self, inputs, outputs):
        loss = masked_lm_loss(inputs, outputs["mlm_logits"])
        return {"loss": loss, "mlm_loss": loss}

    def build_metrics(self, training: Optional[bool] = None):
        return [tf_keras.metrics.SparseCategoricalAccuracy(name="masked_lm_accuracy"),
                tf_keras.metrics.Mean(name="mlm_loss")]

    def update_metrics(self, metrics, inputs, outputs, losses):
        super().update_metrics(metrics, inputs, outputs, losses)
        by_name = {m.name: m for m in metrics}
        by_name["masked_lm_accuracy"].update_state(
            inputs["masked_lm_ids"], outputs["mlm_logits"], inputs["masked_lm_weights"])
