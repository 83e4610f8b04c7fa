"""NLI finetuning of the sentence encoder (CMLM paper §4.3) and the `cmlm_tf/nli` experiment.

Premise and hypothesis are embedded by the shared encoder and a pair head classifies
[u, v, |u − v|, u ∗ v] (`cmlm_tf.modeling.pair_classifier`); cross-entropy
(`cmlm_tf.losses.pair_classification`) trains head and encoder together. With
`task.train_data.cross_lingual: true` the premise and the hypothesis of each example come from
different languages, as in the paper. Head and loss are also the NLI term of the dual
momentum contrast multitask (`cmlm_tf/moco`).
"""

import dataclasses
from typing import Optional

import tensorflow as tf
import tf_keras
from official.core import config_definitions as cfg
from official.core import exp_factory, task_factory

from cmlm_tf import configs
from cmlm_tf.data import nli
from cmlm_tf.losses.pair_classification import nli_losses
from cmlm_tf.modeling import pair_classifier
from cmlm_tf.tasks import base


@dataclasses.dataclass
class NLITaskConfig(configs.SentenceTaskConfig):
    nli_head: pair_classifier.NLIHeadConfig = dataclasses.field(
        default_factory=pair_classifier.NLIHeadConfig)
    train_data: nli.NLIDataConfig = configs.training_data(nli.NLIDataConfig)
    validation_data: nli.NLIDataConfig = configs.validation_data(nli.NLIDataConfig)


@exp_factory.register_config_factory("cmlm_tf/nli")
def nli_experiment() -> cfg.ExperimentConfig:
    """Defaults for finetuning warm-started weights (Sentence-BERT-like): a linear head,
    batch 32, seq 128, AdamW 2e-5 with 10 % warm-up over 2,000 steps."""
    task = NLITaskConfig()
    task.train_data.override({"global_batch_size": 32})
    task.validation_data.override({"global_batch_size": 32})
    return configs.experiment(task, configs.adamw_optimizer(2e-5, 200), train_steps=2000,
                              validation_steps=-1, validation_interval=1000)


@task_factory.register_task_cls(NLITaskConfig)
class NLITask(base.SentenceTask):
    """Three-way NLI classification on the shared sentence encoder; the encoder is updated."""

    metric_sources = {"accuracy": "nli_correct"}

    def build_model(self) -> pair_classifier.PairClassifier:
        configs.validate_model_config(self.task_config.model)
        encoder = self.task_config.model.encoder
        return pair_classifier.PairClassifier(
            encoder, pair_classifier.build_head(self.task_config.nli_head,
                                                encoder.initializer_range))

    def build_inputs(self, params: nli.NLIDataConfig, input_context=None) -> tf.data.Dataset:
        field = base.data_field(params)
        return nli.nli_dataset(params, self.task_config.model.tokenizer,
                               input_context=input_context, field=field,
                               resume_step=self.resume_step,
                               reports=self.malformed_reports)

    def compute_losses(self, inputs, outputs):
        losses = nli_losses(inputs["label"], outputs["logits"])
        return {"loss": losses["nli_loss"], **losses}

    def build_metrics(self, training: Optional[bool] = None):
        return [tf_keras.metrics.Mean(name="nli_loss"),
                tf_keras.metrics.Mean(name="accuracy")]
