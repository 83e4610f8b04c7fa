"""MLM + TLM pre-training with progressive stacking (LaBSE §3.4): `cmlm_tf/mlm_tlm`.

One run trains one stage. Monolingual text (`task.train_data.input_path`) gives MLM examples,
translation pairs (`task.bitext_data`) TLM examples, mixed per example with
`task.train_data.tlm_fraction`; see `cmlm_tf.data.mlm_tlm`. A deeper stage starts from a
shallower one with `task.init_stack_from` (layer i ← layer i mod L_prev, see
`cmlm_tf.modeling.masked_lm`); `configs/labse_pretrain_base.yaml` lists the three stages.
The checkpoint holds `encoder` and `mlm_head`, so the encoder exports and warm-starts
`cmlm_tf/bitext` like any other.
"""

import dataclasses
from typing import Optional

import tensorflow as tf
import tf_keras
from official.core import config_definitions as cfg
from official.core import exp_factory, task_factory

from cmlm_tf import configs
from cmlm_tf.data import bitext, mlm_tlm
from cmlm_tf.losses.masked_lm import masked_lm_loss
from cmlm_tf.modeling import masked_lm
from cmlm_tf.tasks import base


@dataclasses.dataclass
class MLMTLMModelConfig(configs.SentenceModelConfig):
    mlm_activation: str = "gelu_exact"


@dataclasses.dataclass
class MLMTLMTaskConfig(configs.SentenceTaskConfig):
    """`init_stack_from`: a checkpoint (prefix or run directory) of a shallower stage to
    stack into this model; exclusive with `init_checkpoint` (a strict restore).

    Validation reads `task.validation_data` for MLM text and, once, in order, its
    `bitext_input_path` (else `task.bitext_data`) for TLM pairs.
    """

    init_stack_from: str = ""
    model: MLMTLMModelConfig = dataclasses.field(default_factory=MLMTLMModelConfig)
    train_data: mlm_tlm.MLMTLMDataConfig = configs.training_data(mlm_tlm.MLMTLMDataConfig)
    bitext_data: bitext.BitextDataConfig = configs.training_data(bitext.BitextDataConfig)
    validation_data: mlm_tlm.MLMTLMDataConfig = configs.validation_data(
        mlm_tlm.MLMTLMDataConfig, drop_remainder=False)


@exp_factory.register_config_factory("cmlm_tf/mlm_tlm")
def mlm_tlm_experiment() -> cfg.ExperimentConfig:
    """LaBSE pre-training sizes per example (seq 512, 20 % masked, at most 80); batch,
    steps and stages in `configs/labse_pretrain_base.yaml`."""
    return configs.experiment(MLMTLMTaskConfig(), configs.lamb_optimizer(), train_steps=400000,
                              loop=configs.PRETRAINING_LOOP)


METRICS = ("masked_lm_accuracy", "mlm_accuracy", "tlm_accuracy", "mlm_loss", "tlm_fraction")


@task_factory.register_task_cls(MLMTLMTaskConfig)
class MLMTLMTask(base.SentenceTask):
    """Masked LM over a per-example mix of monolingual sentences and translation pairs."""

    def build_model(self) -> masked_lm.MaskedLMPretrainer:
        configs.validate_model_config(self.task_config.model)
        encoder = self.task_config.model.encoder
        seq_length = self.task_config.train_data.seq_length
        if seq_length > encoder.max_position_embeddings:
            raise ValueError(f"task.model.encoder.max_position_embeddings "
                             f"({encoder.max_position_embeddings}) must cover "
                             f"task.train_data.seq_length ({seq_length})")
        return masked_lm.MaskedLMPretrainer(
            encoder, mlm_activation=self.task_config.model.mlm_activation).build_variables()

    def initialize(self, model: masked_lm.MaskedLMPretrainer):
        """A fresh run: progressive stacking from `init_stack_from`, or a strict warm start."""
        config = self.task_config
        if config.init_stack_from and config.init_checkpoint:
            raise ValueError("set task.init_stack_from or task.init_checkpoint, not both")
        if config.init_stack_from:
            masked_lm.stack_from_checkpoint(model, config.init_stack_from)
        else:
            base.warm_start(model, config.init_checkpoint)

    def build_inputs(self, params: mlm_tlm.MLMTLMDataConfig,
                     input_context=None) -> tf.data.Dataset:
        field = base.data_field(params)
        return mlm_tlm.mlm_tlm_dataset(params, self.task_config.bitext_data,
                                       self.task_config.model.tokenizer,
                                       input_context=input_context, field=field,
                                       resume_step=self.resume_step,
                                       reports=self.malformed_reports)

    def compute_losses(self, inputs, outputs):
        loss = masked_lm_loss(inputs, outputs["mlm_logits"])
        return {"loss": loss, "mlm_loss": loss}

    def build_metrics(self, training: Optional[bool] = None):
        accuracy = tf_keras.metrics.SparseCategoricalAccuracy
        return [accuracy(name="masked_lm_accuracy"), accuracy(name="mlm_accuracy"),
                accuracy(name="tlm_accuracy"), tf_keras.metrics.Mean(name="mlm_loss"),
                tf_keras.metrics.Mean(name="tlm_fraction")]

    def update_metrics(self, metrics, inputs, outputs, losses):
        """Accuracy over all predictions, and separately over MLM and TLM examples."""
        by_name = {m.name: m for m in metrics}
        ids, logits = inputs["masked_lm_ids"], outputs["mlm_logits"]
        weights = inputs["masked_lm_weights"]
        is_tlm = inputs["is_tlm"][:, None]
        by_name["masked_lm_accuracy"].update_state(ids, logits, weights)
        by_name["mlm_accuracy"].update_state(ids, logits, weights * (1.0 - is_tlm))
        by_name["tlm_accuracy"].update_state(ids, logits, weights * is_tlm)
        by_name["mlm_loss"].update_state(losses["mlm_loss"])
        # The filler rows of a padded evaluation batch (`example_weight` 0) do not count.
        by_name["tlm_fraction"].update_state(inputs["is_tlm"], inputs.get("example_weight"))
