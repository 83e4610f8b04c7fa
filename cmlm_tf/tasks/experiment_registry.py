"""The objectives, one row each: the one place an objective is registered.

`OBJECTIVES` names, per objective, its experiment, a line saying what it trains, its task
module, its tiny recipe in `configs/` and the cases in which `tests/training/test_xla.py`
compiles its steps. The rest is read from it: `EXPERIMENTS` (name -> line, for the train
command's `--help`, which lists it before TensorFlow loads: this module imports nothing of
TensorFlow) and `register()`, which imports the task modules so that they register their
experiment factories with Model Garden's `exp_factory`.
"""

import dataclasses
import importlib
from typing import Tuple


@dataclasses.dataclass(frozen=True)
class XlaCase:
    """One case of the XLA test: the objective's train and validation steps, compiled on
    a tiny model (the test shrinks every case alike) and tiny inputs.

    Args:
        name: the case's id in the test.
        reads: what `task.train_data` and `task.validation_data` read: "" (the recipe's
            own files) or one of the test's small files: `pairs` (bitext TSV), `negatives`
            (bitext with one hard negative per pair), `nli` (NLI TSV).
        masked_lm: both splits are masked-LM inputs (three predictions per sequence).
        overrides: the case's own `--params_override` entries, comma-separated; `{name}`
            stands for one of the test's files (above, and `vocab`, `sp_model`) or
            `sp_vocab_size`, the size of the SentencePiece model's vocabulary.
        base_recipes: recipes applied before the objective's tiny recipe (a multitask on
            its parts' recipes).
        bfloat16_overrides: more overrides in mixed bfloat16 only (a smaller compile).
    """

    name: str
    reads: str = ""
    masked_lm: bool = False
    overrides: str = ""
    base_recipes: Tuple[str, ...] = ()
    bfloat16_overrides: str = ""


@dataclasses.dataclass(frozen=True)
class Objective:
    """An objective's row: `experiment` (the registered name), `description` (one line for
    `--help`), `module` (the task module, which registers the experiment and the task),
    `tiny_recipe` (a file of `configs/` that trains it in minutes on the bundled data; ""
    when there is none) and `xla_cases`."""

    experiment: str
    description: str
    module: str
    tiny_recipe: str
    xla_cases: Tuple[XlaCase, ...]


_CACHED = "task.margin_softmax.mini_batch_size=4"

OBJECTIVES = (
    Objective("cmlm_tf/cmlm", "conditional masked language modelling (CMLM)",
              "cmlm_tf.tasks.cmlm", "cmlm_tiny.yaml",
              (XlaCase("cmlm", masked_lm=True, overrides="task.model.cmlm.num_projections=2"),)),
    Objective("cmlm_tf/bitext", "bitext retrieval: dual encoder, additive-margin softmax (LaBSE)",
              "cmlm_tf.tasks.bitext", "bitext_tiny.yaml", (
                  XlaCase("bitext", reads="pairs"),
                  XlaCase("bitext_cached", reads="pairs", overrides=_CACHED),
                  XlaCase("bitext_cached_hard_negatives", reads="negatives",
                          overrides=_CACHED + ",task.train_data.num_hard_negatives=1,"
                          "task.validation_data.num_hard_negatives=1"))),
    Objective("cmlm_tf/cmlm_bitext", "CMLM + bitext retrieval multitask",
              "cmlm_tf.tasks.cmlm_bitext", "cmlm_br_joint_tiny.yaml",
              (XlaCase("cmlm_bitext_cached", masked_lm=True, base_recipes=("cmlm_tiny.yaml",),
                       overrides="task.model.cmlm.num_projections=2," + _CACHED
                       + ",task.bitext_data.input_path={pairs},"
                       "task.bitext_data.global_batch_size=8,task.bitext_data.seq_length=12,"
                       "task.bitext_data.shuffle_buffer_size=16"),)),
    Objective("cmlm_tf/moco", "dual momentum contrast (queues of negatives per language)",
              "cmlm_tf.tasks.moco", "moco_tiny.yaml",
              (XlaCase("moco", reads="pairs", overrides="task.moco.queue_size=16"),)),
    Objective("cmlm_tf/mlm_tlm", "LaBSE pre-training: MLM + TLM, progressive stacking",
              "cmlm_tf.tasks.mlm_tlm", "mlm_tlm_tiny.yaml",
              (XlaCase("mlm_tlm", masked_lm=True,
                       overrides="task.validation_data.bitext_input_path={pairs},"
                       "task.bitext_data.input_path={pairs},"
                       "task.bitext_data.shuffle_buffer_size=16"),)),
    Objective("cmlm_tf/nli", "NLI finetuning (cross-lingual), pair head on [u, v, |u-v|, u*v]",
              "cmlm_tf.tasks.nli", "",
              (XlaCase("nli", reads="nli", overrides="task.model.encoder.vocab_size=3627,"
                       "task.model.tokenizer.vocab_file={vocab}"),)),
    # BGT's float32 case compiles all seven of its transformers; in bfloat16 the translation
    # decoders stand for the reconstruction ones and their language posteriors (the same
    # layer classes), which halves the compile.
    Objective("cmlm_tf/bgt", "BGT, the bilingual generative transformer",
              "cmlm_tf.tasks.bgt", "bgt_tiny.yaml",
              (XlaCase("bgt", reads="pairs",
                       overrides="task.model.encoder.projection_size=16,"
                       "task.model.tokenizer.sp_model_file={sp_model},"
                       "task.model.encoder.vocab_size={sp_vocab_size}",
                       bfloat16_overrides="task.bgt.reconstruction=false"),)),
    Objective("cmlm_tf/simcse", "unsupervised SimCSE: two dropout views of each sentence",
              "cmlm_tf.tasks.simcse", "simcse_tiny.yaml",
              (XlaCase("simcse_cached", overrides=_CACHED),)),
)

EXPERIMENTS = {objective.experiment: objective.description for objective in OBJECTIVES}


def register() -> None:
    """Registers every experiment of `OBJECTIVES` (importing is enough; idempotent)."""
    for objective in OBJECTIVES:
        importlib.import_module(objective.module)
