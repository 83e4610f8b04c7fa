"""The CMLM task and the `cmlm_tf/cmlm` experiment."""

import dataclasses
from typing import Optional

import tensorflow as tf
import tf_keras
from official.core import base_task, exp_factory, task_factory
from official.core import config_definitions as cfg
from official.modeling import hyperparams, optimization

from cmlm_tf import configs
from cmlm_tf.data import sentence_pairs
from cmlm_tf.losses.masked_lm import masked_lm_loss
from cmlm_tf.modeling import conditional_mlm
from cmlm_tf.tasks import base, dev_eval


@dataclasses.dataclass
class CMLMHeadConfig(hyperparams.Config):
    """`num_projections`: N conditioning vectors (paper: 15); one of them is v itself."""

    num_projections: int = 15
    mlm_activation: str = "gelu_exact"
    dense_type_id: int = 0


@dataclasses.dataclass
class CMLMModelConfig(configs.SentenceModelConfig):
    cmlm: CMLMHeadConfig = dataclasses.field(default_factory=CMLMHeadConfig)


@dataclasses.dataclass
class CMLMDataConfig(configs.TextDataConfig):
    """s1 and s2 are each up to `seq_length` tokens. Per s2, min(`max_predictions_per_seq`,
    round(`mask_ratio` · maskable tokens)) tokens are predicted (paper: 80 of 256; set
    `mask_ratio: 1.0` for the fixed count)."""

    seq_length: int = 256
    max_predictions_per_seq: int = 80
    mask_ratio: float = 0.3125
    swap_probability: float = 0.5
    shuffle_buffer_size: int = 10000


@dataclasses.dataclass
class CMLMTaskConfig(configs.SentenceTaskConfig):
    model: CMLMModelConfig = dataclasses.field(default_factory=CMLMModelConfig)
    train_data: CMLMDataConfig = dataclasses.field(
        default_factory=lambda: CMLMDataConfig(is_training=True))
    validation_data: CMLMDataConfig = dataclasses.field(
        default_factory=lambda: CMLMDataConfig(is_training=False, drop_remainder=False))


def lamb_optimizer(learning_rate: float = 1e-3, warmup_steps: int = 10000,
                   decay_steps: int = 1000000) -> optimization.OptimizationConfig:
    """LAMB, linear warm-up then linear decay to 0 (CMLM paper: lr 1e-3, warm-up 10k)."""
    return optimization.OptimizationConfig({
        "optimizer": {"type": "lamb", "lamb": {
            "beta_1": 0.9, "beta_2": 0.999, "weight_decay_rate": 0.01,
            "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"]}},
        "learning_rate": {"type": "polynomial", "polynomial": {
            "initial_learning_rate": learning_rate, "decay_steps": decay_steps,
            "end_learning_rate": 0.0, "power": 1.0}},
        "warmup": {"type": "linear", "linear": {"warmup_steps": warmup_steps}},
    })


@exp_factory.register_config_factory("cmlm_tf/cmlm")
def cmlm_experiment() -> cfg.ExperimentConfig:
    config = cfg.ExperimentConfig(
        task=CMLMTaskConfig(),
        trainer=cfg.TrainerConfig(
            train_steps=1000000, optimizer_config=lamb_optimizer(),
            checkpoint_interval=10000, max_to_keep=5, summary_interval=1000,
            steps_per_loop=1000, validation_steps=100, validation_interval=10000),
        restrictions=["task.train_data.is_training != None"])
    return config


def build_conditional_mlm(task_config) -> conditional_mlm.ConditionalMLM:
    """The CMLM model of `task.model`, checked against `task.train_data.seq_length`."""
    model_config = task_config.model
    configs.validate_model_config(model_config)
    encoder = model_config.encoder
    needed = task_config.train_data.seq_length + model_config.cmlm.num_projections
    if needed > encoder.max_position_embeddings:
        raise ValueError(
            f"task.model.encoder.max_position_embeddings ({encoder.max_position_embeddings}"
            f") must cover task.train_data.seq_length + task.model.cmlm.num_projections "
            f"({needed})")
    return conditional_mlm.ConditionalMLM(
        encoder, model_config.cmlm.num_projections,
        mlm_activation=model_config.cmlm.mlm_activation,
        dense_type_id=model_config.cmlm.dense_type_id)


@task_factory.register_task_cls(CMLMTaskConfig)
class CMLMTask(dev_eval.DevEvalMixin, base_task.Task):
    """Conditional masked LM on consecutive sentence pairs (plus optional dev STS/retrieval)."""

    def build_model(self) -> conditional_mlm.ConditionalMLM:
        return build_conditional_mlm(self.task_config)

    def initialize(self, model: conditional_mlm.ConditionalMLM):
        """Warm start: the encoder strictly; projection and MLM head too when present."""
        base.warm_start(model, self.task_config.init_checkpoint)

    def build_inputs(self, params: CMLMDataConfig, input_context=None) -> tf.data.Dataset:
        return sentence_pairs.cmlm_dataset(params, self.task_config.model.tokenizer,
                                           input_context=input_context)

    def build_losses(self, labels, model_outputs, aux_losses=None) -> tf.Tensor:
        loss = masked_lm_loss(labels, model_outputs["mlm_logits"])
        if aux_losses:
            loss += tf.add_n(aux_losses)
        return loss

    def build_metrics(self, training: Optional[bool] = None):
        return [tf_keras.metrics.SparseCategoricalAccuracy(name="masked_lm_accuracy"),
                tf_keras.metrics.Mean(name="mlm_loss")]

    def process_metrics(self, metrics, labels, model_outputs, **kwargs):
        by_name = {m.name: m for m in metrics}
        by_name["masked_lm_accuracy"].update_state(
            labels["masked_lm_ids"], model_outputs["mlm_logits"], labels["masked_lm_weights"])
        by_name["mlm_loss"].update_state(self.build_losses(labels, model_outputs))
