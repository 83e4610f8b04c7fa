"""The registered experiments: their names and what each trains.

`register()` imports the task modules, which register their experiment factories with Model
Garden's `exp_factory`; `EXPERIMENTS` names them without importing TensorFlow, for `--help`.
"""

EXPERIMENTS = {
    "cmlm_tf/cmlm": "conditional masked language modelling (CMLM)",
    "cmlm_tf/bitext": "bitext retrieval: dual encoder, additive-margin softmax (LaBSE)",
    "cmlm_tf/cmlm_bitext": "CMLM + bitext retrieval multitask",
    "cmlm_tf/moco": "dual momentum contrast (queues of negatives per language)",
    "cmlm_tf/mlm_tlm": "LaBSE pre-training: MLM + TLM, progressive stacking",
    "cmlm_tf/nli": "NLI finetuning (cross-lingual), pair head on [u, v, |u-v|, u*v]",
    "cmlm_tf/bgt": "BGT, the bilingual generative transformer",
}


def register() -> None:
    """Registers every experiment of `EXPERIMENTS` (importing is enough; idempotent)."""
    from cmlm_tf.tasks import bgt, bitext, cmlm, cmlm_bitext, mlm_tlm, moco, nli  # noqa: F401
