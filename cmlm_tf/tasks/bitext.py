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
from official.modeling import hyperparams, optimization

from cmlm_tf import configs
from cmlm_tf.data import bitext
from cmlm_tf.losses import margin_softmax
from cmlm_tf.modeling import dual_encoder
from cmlm_tf.tasks import base


@dataclasses.dataclass
class MarginSoftmaxConfig(hyperparams.Config):
    """The translation-ranking loss (LaBSE: margin 0.3, scale 100, both directions).

    `mask_duplicates`: leave pairs whose source or target text repeats a row's out of that
    row's negatives (they are translations of it, not negatives).
    """

    margin: float = 0.3
    scale: float = 100.0
    bidirectional: bool = True
    mask_duplicates: bool = True


@dataclasses.dataclass
class BitextTaskConfig(configs.SentenceTaskConfig):
    margin_softmax: MarginSoftmaxConfig = dataclasses.field(default_factory=MarginSoftmaxConfig)
    train_data: bitext.BitextDataConfig = dataclasses.field(
        default_factory=lambda: bitext.BitextDataConfig(is_training=True))
    validation_data: bitext.BitextDataConfig = dataclasses.field(
        default_factory=lambda: bitext.BitextDataConfig(is_training=False))


def adamw_optimizer(learning_rate: float, warmup_steps: int,
                    decay_steps: int) -> optimization.OptimizationConfig:
    """AdamW (weight decay 0.01, none on LayerNorm and biases), linear warm-up and decay."""
    return optimization.OptimizationConfig({
        "optimizer": {"type": "adamw", "adamw": {
            "weight_decay_rate": 0.01, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-6,
            "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"]}},
        "learning_rate": {"type": "polynomial", "polynomial": {
            "initial_learning_rate": learning_rate, "decay_steps": decay_steps,
            "end_learning_rate": 0.0, "power": 1.0}},
        "warmup": {"type": "linear", "linear": {"warmup_steps": warmup_steps}},
    })


@exp_factory.register_config_factory("cmlm_tf/bitext")
def bitext_experiment() -> cfg.ExperimentConfig:
    """Defaults for fine-tuning warm-started weights at a small batch; paper-size settings
    are in `configs/labse_base.yaml`."""
    task = BitextTaskConfig()
    task.train_data.override({"global_batch_size": 32, "seq_length": 64})
    task.validation_data.override({"global_batch_size": 32, "seq_length": 64})
    return cfg.ExperimentConfig(
        task=task,
        trainer=cfg.TrainerConfig(
            train_steps=2000, optimizer_config=adamw_optimizer(3e-5, 100, 2000),
            checkpoint_interval=500, max_to_keep=3, summary_interval=100,
            steps_per_loop=100, validation_steps=20, validation_interval=500),
        restrictions=["task.train_data.is_training != None"])


def ranking_losses(config: MarginSoftmaxConfig, inputs, embeddings):
    """The margin-softmax loss dict for a bitext batch and its embeddings."""
    use_ids = config.mask_duplicates and "source_id" in inputs
    return margin_softmax.additive_margin_softmax_loss(
        embeddings["source"], embeddings["target"], margin=config.margin, scale=config.scale,
        hard_negatives=embeddings.get("hard_negatives"),
        source_ids=inputs["source_id"] if use_ids else None,
        target_ids=inputs["target_id"] if use_ids else None,
        bidirectional=config.bidirectional)


RANKING_METRICS = ("source_to_target_accuracy", "target_to_source_accuracy",
                   "positive_cosine", "ranking_loss")


def ranking_metrics():
    return [tf_keras.metrics.Mean(name=name) for name in RANKING_METRICS]


def update_ranking_metrics(metrics, losses) -> None:
    """In-batch top-1 accuracy both ways, the mean positive cosine and the ranking loss."""
    by_name = {m.name: m for m in metrics}
    values = {"source_to_target_accuracy": losses["source_to_target_correct"],
              "positive_cosine": losses["positive_cosine"],
              "ranking_loss": losses["ranking_loss"]}
    if "target_to_source_correct" in losses:
        values["target_to_source_accuracy"] = losses["target_to_source_correct"]
    for name, value in values.items():
        if name in by_name:
            by_name[name].update_state(value)


@task_factory.register_task_cls(BitextTaskConfig)
class BitextTask(base.SentenceTask):
    """Translation ranking with a shared dual encoder."""

    def build_model(self) -> dual_encoder.DualEncoder:
        configs.validate_model_config(self.task_config.model)
        return dual_encoder.DualEncoder(self.task_config.model.encoder)

    def build_inputs(self, params: bitext.BitextDataConfig,
                     input_context=None) -> tf.data.Dataset:
        field = "task.train_data" if params.is_training else "task.validation_data"
        return bitext.bitext_dataset(params, self.task_config.model.tokenizer,
                                     input_context=input_context, field=field)

    def compute_losses(self, inputs, outputs):
        losses = ranking_losses(self.task_config.margin_softmax, inputs, outputs)
        return dict(losses, ranking_loss=losses["loss"])

    def build_metrics(self, training: Optional[bool] = None):
        return ranking_metrics()

    def update_metrics(self, metrics, inputs, outputs, losses):
        update_ranking_metrics(metrics, losses)
