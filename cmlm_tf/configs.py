"""Config schema shared by every cmlm_tf experiment, and the optimizer recipes they start from.

Every objective (CMLM, bitext retrieval, momentum contrast, NLI, BGT) trains the same
sentence encoder described by `EncoderConfig` and tokenises with `TokenizerConfig`, so a
`warm_start.yaml` written by `cmlm_tf.convert_hf_bert` fits every experiment. Later
experiments extend `SentenceTaskConfig`; they never fork it.

The optimizer recipes (`lamb_optimizer`, `adamw_optimizer`, `adam_inverse_sqrt`) are the
`trainer.optimizer_config` defaults of the registered experiments (as Model Garden's
`official/projects/labse/config_labse.py` keeps its recipe beside its experiment); YAML
recipes in `configs/` override their fields; `config_files` reads them.
"""

import dataclasses
import functools
from typing import List, Optional

from official.core import config_definitions as cfg
from official.modeling import hyperparams, optimization

POOLING_MODES = ("mean", "cls", "max")
PROJECTION_ACTIVATIONS = ("linear", "tanh", "relu", "sigmoid")
TOKENIZER_TYPES = ("wordpiece", "sentencepiece", "xlmr_sentencepiece")


@dataclasses.dataclass
class EncoderConfig(hyperparams.Config):
    """A BERT encoder (Model Garden `BertEncoderV2`) plus pooling and optional projection.

    `hidden_activation`: `gelu_exact` (erf, as Hugging Face BERT), `gelu_approx` (tanh, what
    Model Garden calls `gelu`), or any other Model Garden activation name (`relu`, `swish`...).
    `projection_size`: 0 for none, else a dense layer after pooling, whose activation is
    `projection_activation` (`linear`, or `tanh` as LaBSE's sentence-transformers `Dense`
    module).
    `normalize`: whether the exported `default` output is L2-normalised.
    `layer_norm_epsilon`: every LayerNorm's epsilon (BERT: 1e-12; a Hugging Face folder's
    `layer_norm_eps`).
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_activation: str = "gelu_exact"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    initializer_range: float = 0.02
    pooling: str = "mean"
    projection_size: int = 0
    projection_activation: str = "linear"
    normalize: bool = True
    layer_norm_epsilon: float = 1e-12


@dataclasses.dataclass
class TokenizerConfig(hyperparams.Config):
    """How text becomes token ids. SentencePiece models are read from `sp_model_file`:
    `sentencepiece` with special pieces by name (`train_sentencepiece`), `xlmr_sentencepiece`
    with XLM-RoBERTa's ids (`tokenization.XlmrSentencepieceTokenizer`)."""

    type: str = "wordpiece"
    vocab_file: str = ""
    sp_model_file: str = ""
    lower_case: bool = True


@dataclasses.dataclass
class SentenceModelConfig(hyperparams.Config):
    encoder: EncoderConfig = dataclasses.field(default_factory=EncoderConfig)
    tokenizer: TokenizerConfig = dataclasses.field(default_factory=TokenizerConfig)


@dataclasses.dataclass
class TextDataConfig(cfg.DataConfig):
    """Data fields only; the task decides what the records mean."""

    seq_length: int = 128
    file_type: str = ""


def training_data(config_class: type, **defaults) -> dataclasses.Field:
    """A task config's field of training data (`train_data`, `bitext_data`, ...): a fresh
    `config_class(is_training=True, **defaults)` for every task config. A task states its
    reader's data config class and only the defaults in which it differs."""
    return dataclasses.field(
        default_factory=functools.partial(config_class, is_training=True, **defaults))


def validation_data(config_class: type, **defaults) -> dataclasses.Field:
    """`training_data`'s twin for `validation_data`: `is_training=False`."""
    return dataclasses.field(
        default_factory=functools.partial(config_class, is_training=False, **defaults))


@dataclasses.dataclass
class SentenceTaskConfig(cfg.TaskConfig):
    """Fields every cmlm_tf task has.

    `init_checkpoint` restores `checkpoint_items["encoder"]` strictly (a converter checkpoint or
    a training checkpoint; both hold `encoder` at their root).
    """

    init_checkpoint: str = ""
    model: SentenceModelConfig = dataclasses.field(default_factory=SentenceModelConfig)
    train_data: TextDataConfig = dataclasses.field(default_factory=TextDataConfig)
    bitext_data: TextDataConfig = dataclasses.field(default_factory=TextDataConfig)
    nli_data: TextDataConfig = dataclasses.field(default_factory=TextDataConfig)
    validation_data: TextDataConfig = dataclasses.field(default_factory=TextDataConfig)
    dev_sts_file: str = ""
    dev_retrieval_files: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class SentenceExperimentConfig(cfg.ExperimentConfig):
    task: SentenceTaskConfig = dataclasses.field(default_factory=SentenceTaskConfig)


def validate_model_config(model: SentenceModelConfig) -> None:
    """Raises ValueError naming the first field of `task.model` that cannot work."""
    enc = model.encoder
    prefix = "task.model.encoder."
    for name in ("vocab_size", "hidden_size", "num_layers", "num_attention_heads",
                 "intermediate_size", "max_position_embeddings", "type_vocab_size"):
        if getattr(enc, name) <= 0:
            raise ValueError(f"{prefix}{name} must be positive, got {getattr(enc, name)}")
    if enc.hidden_size % enc.num_attention_heads:
        raise ValueError(
            f"{prefix}hidden_size ({enc.hidden_size}) must be a multiple of "
            f"{prefix}num_attention_heads ({enc.num_attention_heads})")
    if enc.pooling not in POOLING_MODES:
        raise ValueError(f"{prefix}pooling must be one of {POOLING_MODES}, got {enc.pooling!r}")
    if enc.projection_size < 0:
        raise ValueError(f"{prefix}projection_size must be >= 0, got {enc.projection_size}")
    if enc.projection_activation not in PROJECTION_ACTIVATIONS:
        raise ValueError(f"{prefix}projection_activation must be one of "
                         f"{PROJECTION_ACTIVATIONS}, got {enc.projection_activation!r}")
    if not 0 < enc.layer_norm_epsilon < 1:
        raise ValueError(f"{prefix}layer_norm_epsilon must be in (0, 1), got "
                         f"{enc.layer_norm_epsilon}")
    tok = model.tokenizer
    if tok.type not in TOKENIZER_TYPES:
        raise ValueError(
            f"task.model.tokenizer.type must be one of {TOKENIZER_TYPES}, got {tok.type!r}")


# A masked-LM sequence holds [CLS], [SEP] and at least one token that can be masked.
MIN_MASKED_LM_SEQ_LENGTH = 3


def validate_run_config(params: hyperparams.Config) -> None:
    """Raises ValueError naming the first field with which a run would train nothing and
    still "finish": a step count or interval below 1, or a masked-LM input (one with
    `max_predictions_per_seq`) too short to hold a token to predict."""
    trainer = getattr(params, "trainer", None)
    for name in ("train_steps", "steps_per_loop", "checkpoint_interval", "summary_interval",
                 "validation_interval"):
        value = getattr(trainer, name, None)
        if value is not None and value < 1:
            raise ValueError(f"trainer.{name} must be at least 1, got {value}")
    task = getattr(params, "task", None)
    for field in ("train_data", "bitext_data", "validation_data"):
        data = getattr(task, field, None)
        if data is None or not hasattr(data, "max_predictions_per_seq"):
            continue
        if field != "train_data" and not data.input_path:
            continue
        if data.seq_length < MIN_MASKED_LM_SEQ_LENGTH:
            raise ValueError(
                f"task.{field}.seq_length must be at least {MIN_MASKED_LM_SEQ_LENGTH} "
                f"([CLS], [SEP] and a token to mask), got {data.seq_length}")
        if data.max_predictions_per_seq < 1:
            raise ValueError(f"task.{field}.max_predictions_per_seq must be at least 1, "
                             f"got {data.max_predictions_per_seq}")


def lamb_optimizer(learning_rate: float = 1e-3, warmup_steps: int = 10000,
                   decay_steps: int = 0) -> optimization.OptimizationConfig:
    """LAMB, linear warm-up then linear decay to 0 (CMLM paper: lr 1e-3, warm-up 10k).

    `decay_steps` 0: the decay ends at `trainer.train_steps` (`follow_train_steps`)."""
    return optimization.OptimizationConfig({
        "optimizer": {"type": "lamb", "lamb": {
            "beta_1": 0.9, "beta_2": 0.999, "weight_decay_rate": 0.01,
            "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"]}},
        "learning_rate": {"type": "polynomial", "polynomial": {
            "initial_learning_rate": learning_rate, "decay_steps": decay_steps,
            "end_learning_rate": 0.0, "power": 1.0}},
        "warmup": {"type": "linear", "linear": {"warmup_steps": warmup_steps}},
    })


def adamw_optimizer(learning_rate: float, warmup_steps: int,
                    decay_steps: int = 0) -> optimization.OptimizationConfig:
    """AdamW (weight decay 0.01, none on LayerNorm and biases), linear warm-up and decay;
    `decay_steps` 0 ends the decay at `trainer.train_steps`."""
    return optimization.OptimizationConfig({
        "optimizer": {"type": "adamw", "adamw": {
            "weight_decay_rate": 0.01, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-6,
            "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"]}},
        "learning_rate": {"type": "polynomial", "polynomial": {
            "initial_learning_rate": learning_rate, "decay_steps": decay_steps,
            "end_learning_rate": 0.0, "power": 1.0}},
        "warmup": {"type": "linear", "linear": {"warmup_steps": warmup_steps}},
    })


def adam_inverse_sqrt(learning_rate: float, warmup_steps: int) -> optimization.OptimizationConfig:
    """Adam (beta 0.9/0.98, epsilon 1e-8), linear warm-up to `learning_rate`, then
    learning_rate * sqrt(warmup_steps / step) (the Transformer's inverse square root)."""
    return optimization.OptimizationConfig({
        "optimizer": {"type": "adam", "adam": {
            "beta_1": 0.9, "beta_2": 0.98, "epsilon": 1e-8}},
        "learning_rate": {"type": "power", "power": {
            "initial_learning_rate": learning_rate * warmup_steps ** 0.5, "power": -0.5}},
        "warmup": {"type": "linear", "linear": {"warmup_steps": warmup_steps}},
    })


# The trainer's loop, checkpoint and validation cadence of the registered experiments: long
# pre-training runs, and fine-tuning runs of a few thousand steps.
PRETRAINING_LOOP = {"steps_per_loop": 1000, "summary_interval": 1000,
                    "checkpoint_interval": 10000, "max_to_keep": 5, "validation_steps": 100,
                    "validation_interval": 10000}
FINE_TUNING_LOOP = {"steps_per_loop": 100, "summary_interval": 100, "checkpoint_interval": 500,
                    "max_to_keep": 3, "validation_steps": 20, "validation_interval": 500}


def experiment(task: cfg.TaskConfig, optimizer_config: optimization.OptimizationConfig,
               train_steps: int, loop: Optional[dict] = None,
               **trainer) -> cfg.ExperimentConfig:
    """A registered experiment's defaults: `task`, the optimizer, `train_steps`, the
    cadence of `loop` (`FINE_TUNING_LOOP` by default, or `PRETRAINING_LOOP`) with `trainer`
    fields over it, and the restriction every cmlm_tf experiment has (the data configs say
    whether they train)."""
    return cfg.ExperimentConfig(
        task=task,
        trainer=cfg.TrainerConfig(train_steps=train_steps, optimizer_config=optimizer_config,
                                  **{**(loop or FINE_TUNING_LOOP), **trainer}),
        restrictions=["task.train_data.is_training != None"])
