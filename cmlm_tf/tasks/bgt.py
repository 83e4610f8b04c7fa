"""The Bilingual Generative Transformer objective and the `cmlm_tf/bgt` experiment.

Loss per batch (each term a per-pair sum over tokens or latent dimensions, averaged over
the batch, the scale of the ELBO):

    loss = reconstruction NLL of both sentences + beta * KL of every used latent
           + label-smoothed (0.1) translation NLL (BILINGUALTRANS),

with beta rising linearly from 0 to 1 over `task.bgt.kl_anneal_steps` training steps
(`cmlm_tf.modeling.bgt` has the model; `cmlm_tf.losses.sequence_nll` and
`cmlm_tf.losses.gaussian_kl` the terms). Evaluation reports the full ELBO terms with beta = 1.

Vocabulary: with `task.model.tokenizer.type: sentencepiece` and an empty `sp_model_file`, the
driver (`cmlm_tf.driver.train_lib.prepare_vocabulary`) learns a joint SentencePiece model of
at most `task.sp_vocab_size` pieces on both sides of `task.train_data` before the run starts,
writes it to `MODEL_DIR/sp.model` (reused when the run resumes) and records it, with
`task.model.encoder.vocab_size`, in `MODEL_DIR/params.yaml`; export then finds it there.
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
from cmlm_tf.losses import gaussian_kl
from cmlm_tf.losses.sequence_nll import sequence_nll
from cmlm_tf.modeling import bgt
from cmlm_tf.tasks import base

BGT_METRICS = ("reconstruction_loss", "kl", "kl_weight", "translation_loss",
               "active_units", "elbo_loss")


@dataclasses.dataclass
class BgtConfig(hyperparams.Config):
    """What the objective includes (the ablations switch these off).

    `language_variables`: z_src and z_tgt; without, reconstructions come from z_sem alone.
    `prior`: the KL terms and reparameterised sampling; without, latents are posterior means.
    `reconstruction`: decode each sentence from its latents; off for BILINGUALTRANS alone.
    `translation`: the BILINGUALTRANS decoders, label smoothing `label_smoothing`.
    `kl_anneal_steps`: steps over which beta rises linearly from 0 to 1 (paper: 2^16).
    `active_unit_threshold`: a semantic latent dimension is active when the variance of its
        posterior mean over the batch is at least this.
    """

    language_variables: bool = True
    prior: bool = True
    reconstruction: bool = True
    translation: bool = True
    kl_anneal_steps: int = 65536
    label_smoothing: float = 0.1
    active_unit_threshold: float = 0.01


@dataclasses.dataclass
class BgtTaskConfig(configs.SentenceTaskConfig):
    """`sp_vocab_size`: the most pieces of a SentencePiece model learned before the run
    starts; a corpus too small for it yields fewer pieces."""

    bgt: BgtConfig = dataclasses.field(default_factory=BgtConfig)
    sp_vocab_size: int = 20000
    train_data: bitext.BitextDataConfig = configs.training_data(bitext.BitextDataConfig)
    validation_data: bitext.BitextDataConfig = configs.validation_data(bitext.BitextDataConfig)


@exp_factory.register_config_factory("cmlm_tf/bgt")
def bgt_experiment() -> cfg.ExperimentConfig:
    """A small BGT trained from scratch; paper-size settings are in `configs/bgt.yaml`."""
    task = BgtTaskConfig()
    task.model.encoder.override({
        "vocab_size": 8000, "hidden_size": 256, "num_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 1024, "max_position_embeddings": 128, "dropout_rate": 0.1,
        "attention_dropout_rate": 0.1, "pooling": "mean", "projection_size": 256,
        "normalize": True})
    task.model.tokenizer.override({"type": "sentencepiece", "lower_case": True})
    task.sp_vocab_size = 8000
    task.train_data.override({"global_batch_size": 64, "seq_length": 64})
    task.validation_data.override({"global_batch_size": 64, "seq_length": 64})
    return configs.experiment(task, configs.adam_inverse_sqrt(5e-4, 4000), train_steps=20000,
                              checkpoint_interval=1000, validation_interval=1000)


@task_factory.register_task_cls(BgtTaskConfig)
class BgtTask(base.SentenceTask):
    """Trains BGT on translation pairs; the exported encoder is the semantic encoder."""

    @classmethod
    def sentencepiece_corpus(cls, task_config: BgtTaskConfig):
        """Both sides of `task.train_data`'s pairs, at most `task.sp_vocab_size` pieces."""
        if task_config.sp_vocab_size < 8:
            raise ValueError(
                f"task.sp_vocab_size must be at least 8, got {task_config.sp_vocab_size}")
        return bitext.bitext_sentences(task_config.train_data), task_config.sp_vocab_size

    def build_model(self) -> bgt.BilingualGenerativeTransformer:
        configs.validate_model_config(self.task_config.model)
        options = self.task_config.bgt
        return bgt.build_bgt(
            self.task_config.model.encoder, language_variables=options.language_variables,
            reconstruction=options.reconstruction, translation=options.translation,
            stochastic=options.prior)

    def build_inputs(self, params: bitext.BitextDataConfig,
                     input_context=None) -> tf.data.Dataset:
        field = base.data_field(params)
        return bitext.bitext_dataset(params, self.task_config.model.tokenizer,
                                     input_context=input_context, field=field,
                                     resume_step=self.resume_step,
                                     reports=self.malformed_reports)

    def kl_weight(self, step: Optional[tf.Tensor] = None) -> tf.Tensor:
        """beta at training step `step`; 1 without one (evaluation reports the ELBO)."""
        if step is None or not self.task_config.bgt.prior:
            return tf.constant(float(self.task_config.bgt.prior))
        return gaussian_kl.kl_weight(step, self.task_config.bgt.kl_anneal_steps)

    def forward_pass(self, inputs, model: tf_keras.Model, optimizer, ranked):
        """The model's outputs with `kl_weight`, the annealed beta of this step."""
        def forward():
            outputs = dict(model(inputs, training=True))
            outputs["kl_weight"] = self.kl_weight(optimizer.iterations)
            return outputs

        return forward

    def compute_losses(self, inputs, outputs):
        options = self.task_config.bgt
        decoders = outputs["decoders"]
        zero = tf.zeros_like(outputs["semantic_from_source"], tf.float32)

        def summed_nll(names, label_smoothing):
            terms = [sequence_nll(decoders[n]["logits"], decoders[n]["targets"],
                                      decoders[n]["weights"], label_smoothing)
                     for n in names if n in decoders]
            return tf.reduce_mean(tf.add_n(terms) if terms else zero)

        reconstruction = summed_nll(bgt.RECONSTRUCTION_DECODERS, 0.0)
        translation = summed_nll(bgt.TRANSLATION_DECODERS, options.label_smoothing)
        kl = tf.reduce_mean(tf.add_n(list(outputs["kl"].values())))
        beta = outputs["kl_weight"] if "kl_weight" in outputs else self.kl_weight()
        means = tf.concat([outputs["semantic"][side]["mean"] for side in bgt.SIDES], axis=0)
        return {
            "loss": reconstruction + beta * kl + translation,
            "reconstruction_loss": reconstruction,
            "kl": kl,
            "kl_weight": beta,
            "translation_loss": translation,
            "elbo_loss": reconstruction + kl,
            "active_units": bgt.active_units(means, options.active_unit_threshold),
        }

    def build_metrics(self, training: Optional[bool] = None):
        return [tf_keras.metrics.Mean(name=name) for name in BGT_METRICS]
