"""Bitext retrieval (translation ranking) and the `cmlm_tf/bitext` experiment.

A shared-weight dual encoder is trained with the bidirectional additive-margin softmax of
`cmlm_tf.losses.margin_softmax` over the global batch (negatives from every replica).
"""

import dataclasses
from typing import Optional

import tensorflow as tf
import tf_keras
from official.core import config_definitions as cfg
from official.core import exp_factory, task_factory

from cmlm_tf import configs
from cmlm_tf.data import bitext
from cmlm_tf.losses import margin_softmax
from cmlm_tf.losses.margin_softmax import MarginSoftmaxConfig
from cmlm_tf.modeling import dual_encoder
from cmlm_tf.tasks import base
from cmlm_tf.training import steps


@dataclasses.dataclass
class BitextTaskConfig(configs.SentenceTaskConfig):
    margin_softmax: MarginSoftmaxConfig = dataclasses.field(default_factory=MarginSoftmaxConfig)
    train_data: bitext.BitextDataConfig = configs.training_data(bitext.BitextDataConfig)
    validation_data: bitext.BitextDataConfig = configs.validation_data(bitext.BitextDataConfig)


@exp_factory.register_config_factory("cmlm_tf/bitext")
def bitext_experiment() -> cfg.ExperimentConfig:
    """Defaults for fine-tuning warm-started weights at a small batch; paper-size settings
    are in `configs/labse_base.yaml`."""
    task = BitextTaskConfig()
    task.train_data.override({"global_batch_size": 32, "seq_length": 64})
    task.validation_data.override({"global_batch_size": 32, "seq_length": 64})
    return configs.experiment(task, configs.adamw_optimizer(3e-5, 100), train_steps=2000)


@task_factory.register_task_cls(BitextTaskConfig)
class BitextTask(base.SentenceTask):
    """Translation ranking with a shared dual encoder."""

    metric_sources = margin_softmax.METRICS

    def build_model(self) -> dual_encoder.DualEncoder:
        configs.validate_model_config(self.task_config.model)
        return dual_encoder.DualEncoder(self.task_config.model.encoder)

    def build_inputs(self, params: bitext.BitextDataConfig,
                     input_context=None) -> tf.data.Dataset:
        field = base.data_field(params)
        return bitext.bitext_dataset(params, self.task_config.model.tokenizer,
                                     input_context=input_context, field=field,
                                     resume_step=self.resume_step,
                                     reports=self.malformed_reports)

    def compute_losses(self, inputs, outputs):
        return margin_softmax.ranking_losses(self.task_config.margin_softmax, inputs, outputs)

    def build_metrics(self, training: Optional[bool] = None):
        return [tf_keras.metrics.Mean(name=name) for name in margin_softmax.METRICS]

    def ranked_part(self, inputs, model: tf_keras.Model) -> steps.RankedPart:
        """Every pair, embedded in chunks of `task.margin_softmax.mini_batch_size` with
        cached gradients when it is set."""
        return base.margin_ranked_pairs(self.task_config, inputs,
                                        lambda part: model(part, training=True))
