"""Dual momentum contrast on translation pairs and the `cmlm_tf/moco` experiment.

Loss L(x, y) + L(y, x): InfoNCE of each source query against its translation's momentum key
and the target-side queue, and the reverse (`cmlm_tf.losses.info_nce`). The model, the
momentum update and the queues are in `cmlm_tf.modeling.momentum_contrast`.

NLI multitask (paper appendix B): with `task.nli_data.input_path` set, every training step
also classifies a batch of NLI pairs (default 128) with the query encoder and a 2-layer MLP
head, and the loss is L_moco + α·L_nli with α = `task.nli_weight` (0.1).
"""

import dataclasses
from typing import Optional

import tensorflow as tf
import tf_keras
from official.core import config_definitions as cfg
from official.core import exp_factory, task_factory
from official.modeling import hyperparams

from cmlm_tf import configs
from cmlm_tf.data import bitext
from cmlm_tf.data import nli as nli_inputs
from cmlm_tf.losses import info_nce
from cmlm_tf.losses.pair_classification import nli_losses
from cmlm_tf.modeling import momentum_contrast, pair_classifier, sentence_encoder
from cmlm_tf.tasks import base


@dataclasses.dataclass
class MomentumContrastConfig(hyperparams.Config):
    """Dual momentum contrast (paper: queue 409,600, τ 0.04, m 0.999).

    `queue_size`: K keys per side; at least the global batch (each step enqueues all of it).
    `temperature`: τ of the InfoNCE softmax.
    `momentum`: m of θ_k ← m·θ_k + (1 − m)·θ_q; 0 is the paper's "w/o momentum" ablation.
    `shared_encoder`: one query encoder for both sides; false gives the target side its own
        (same architecture and tokenizer), exported with `--encoder_key target_encoder`.
    `target_init_checkpoint`: with `shared_encoder: false`, a checkpoint whose `encoder` starts
        the target side. Without it the target side starts from `init_checkpoint`'s
        `target_encoder` when it has one, else from the warm-started source encoder.
    `mask_duplicates`: queued pairs with a row's source or target text are not its negatives.
    """

    queue_size: int = 8192
    temperature: float = 0.04
    momentum: float = 0.99
    shared_encoder: bool = True
    target_init_checkpoint: str = ""
    mask_duplicates: bool = True


@dataclasses.dataclass
class MomentumContrastTaskConfig(configs.SentenceTaskConfig):
    moco: MomentumContrastConfig = dataclasses.field(default_factory=MomentumContrastConfig)
    train_data: bitext.BitextDataConfig = configs.training_data(bitext.BitextDataConfig)
    validation_data: bitext.BitextDataConfig = configs.validation_data(bitext.BitextDataConfig)
    # The NLI multitask, on when `nli_data.input_path` is set: L_moco + nli_weight · L_nli.
    nli_data: nli_inputs.NLIDataConfig = configs.training_data(nli_inputs.NLIDataConfig,
                                                               global_batch_size=128)
    nli_weight: float = 0.1
    nli_head: pair_classifier.NLIHeadConfig = dataclasses.field(
        default_factory=lambda: pair_classifier.NLIHeadConfig(hidden_sizes=[256]))


@exp_factory.register_config_factory("cmlm_tf/moco")
def moco_experiment() -> cfg.ExperimentConfig:
    """Defaults for fine-tuning warm-started weights at a small batch: batch 32, a queue of
    8,192 (256 batches), τ 0.04, m 0.99 (a time constant of 100 steps suits a run of a few
    hundred steps; the paper's 0.999 is for ~70k). Paper-size settings are in
    `configs/moco_bert_base.yaml`."""
    task = MomentumContrastTaskConfig()
    task.train_data.override({"global_batch_size": 32, "seq_length": 64})
    task.validation_data.override({"global_batch_size": 32, "seq_length": 64})
    return configs.experiment(task, configs.adamw_optimizer(3e-5, 50), train_steps=1000)


def validate_moco_config(config: MomentumContrastTaskConfig) -> None:
    """Raises ValueError naming the first field of `task.moco` that cannot work."""
    moco = config.moco
    if moco.queue_size <= 0:
        raise ValueError(f"task.moco.queue_size must be positive, got {moco.queue_size}")
    batch = config.train_data.global_batch_size
    if moco.queue_size < batch:
        raise ValueError(f"task.moco.queue_size ({moco.queue_size}) must be at least "
                         f"task.train_data.global_batch_size ({batch}): each step enqueues "
                         "the whole global batch")
    if moco.temperature <= 0:
        raise ValueError(f"task.moco.temperature must be positive, got {moco.temperature}")
    if not 0.0 <= moco.momentum <= 1.0:
        raise ValueError(f"task.moco.momentum must be in [0, 1], got {moco.momentum}")
    if moco.target_init_checkpoint and moco.shared_encoder:
        raise ValueError("task.moco.target_init_checkpoint needs task.moco.shared_encoder: "
                         "false")
    if config.train_data.num_hard_negatives:
        raise ValueError("task.train_data.num_hard_negatives must be 0: the queue provides "
                         "the negatives of cmlm_tf/moco")
    if config.nli_data.input_path and config.nli_weight <= 0:
        raise ValueError(f"task.nli_weight must be positive when task.nli_data.input_path is "
                         f"set, got {config.nli_weight}")


METRICS = ("contrastive_loss", "source_to_target_accuracy", "target_to_source_accuracy",
           "positive_cosine", "embedding_std", "queue_fill")


@task_factory.register_task_cls(MomentumContrastTaskConfig)
class MomentumContrastTask(base.SentenceTask):
    """Dual momentum contrast: EMA key encoders and a FIFO queue of negatives per side."""

    metric_sources = {"source_to_target_accuracy": "source_to_target_correct",
                      "target_to_source_accuracy": "target_to_source_correct"}

    def build_model(self) -> momentum_contrast.DualMomentumContrast:
        configs.validate_model_config(self.task_config.model)
        validate_moco_config(self.task_config)
        moco = self.task_config.moco
        encoder = self.task_config.model.encoder
        pair_head = None
        if self.task_config.nli_data.input_path:
            pair_head = pair_classifier.build_head(self.task_config.nli_head,
                                                   encoder.initializer_range)
        return momentum_contrast.DualMomentumContrast(
            encoder, queue_size=moco.queue_size,
            momentum=moco.momentum, shared_encoder=moco.shared_encoder,
            mask_duplicates=moco.mask_duplicates, pair_head=pair_head)

    def initialize(self, model: momentum_contrast.DualMomentumContrast):
        """Warm start, then key encoders := query encoders.

        Model Garden calls this only for a run without a checkpoint of its own; a resumed run
        restores its key encoders and queues from that checkpoint instead.
        """
        super().initialize(model)
        moco = self.task_config.moco
        init_checkpoint = self.task_config.init_checkpoint
        if not moco.shared_encoder:
            if moco.target_init_checkpoint:
                sentence_encoder.restore_encoder(model.target_encoder,
                                                 moco.target_init_checkpoint)
            elif init_checkpoint and not base.checkpoint_has(
                    sentence_encoder.resolve_checkpoint(init_checkpoint), "target_encoder"):
                model.copy_encoder_to_target()
        model.reset_key_encoders()

    def build_inputs(self, params: bitext.BitextDataConfig,
                     input_context=None) -> tf.data.Dataset:
        field = base.data_field(params)
        tokenizer = self.task_config.model.tokenizer
        pairs = bitext.bitext_dataset(params, tokenizer, input_context=input_context,
                                      field=field, resume_step=self.resume_step,
                                      reports=self.malformed_reports)
        if not (params.is_training and self.task_config.nli_data.input_path):
            return pairs
        examples = nli_inputs.nli_dataset(self.task_config.nli_data, tokenizer,
                                        input_context=input_context, field="task.nli_data",
                                        resume_step=self.resume_step,
                                        reports=self.malformed_reports)
        return tf.data.Dataset.zip((pairs, examples)).map(
            lambda pair_batch, nli_batch: dict(pair_batch, nli=nli_batch))

    def compute_losses(self, inputs, outputs):
        temperature = self.task_config.moco.temperature
        mask = outputs["negative_mask"]
        forward = info_nce.info_nce_loss(outputs["source_to_target_positive"],
                                         outputs["source_to_target_negatives"], temperature,
                                         mask)
        backward = info_nce.info_nce_loss(outputs["target_to_source_positive"],
                                          outputs["target_to_source_negatives"], temperature,
                                          mask)
        queries = tf.concat([outputs["source"], outputs["target"]], axis=0)
        contrastive = forward["loss"] + backward["loss"]
        losses = {}
        if "nli_logits" in outputs:
            losses = nli_losses(inputs["nli"]["label"], outputs["nli_logits"])
            losses["nli_accuracy"] = losses["nli_correct"]
        loss = contrastive
        if losses:
            loss += self.task_config.nli_weight * losses["nli_loss"]
        return {
            **losses,
            "loss": loss,
            "contrastive_loss": contrastive,
            "source_to_target_correct": forward["correct"],
            "target_to_source_correct": backward["correct"],
            "positive_cosine": tf.reduce_sum(outputs["source"] * outputs["target"], axis=-1),
            # Collapse monitor: about 1/sqrt(dim) for spread-out unit vectors, 0 if collapsed.
            "embedding_std": tf.reduce_mean(tf.math.reduce_std(queries, axis=0)),
            "queue_fill": outputs["queue_fill"],
        }

    def build_metrics(self, training: Optional[bool] = None):
        names = METRICS
        if training and self.task_config.nli_data.input_path:
            names += ("nli_loss", "nli_accuracy")
        return [tf_keras.metrics.Mean(name=name) for name in names]
