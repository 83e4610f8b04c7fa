"""The claims and their arms: which runs of the existing experiments test which sentence.

A claim is a sentence from one of the papers, a set of arms (each one or more training stages
of a registered experiment, composed from the recipes in `configs/` and
`experiments/recipes/`), the evaluations every arm's export gets, and the comparisons whose
paired differences decide the verdict. Step counts are multiples of the claim's `steps`
(`--steps` on the command line), so a sweep keeps its ratios when the claim is shortened.

Placeholders in override values, filled by the runner: `{data}` (the prepared data folder),
`{shared}` (the public data sets), `{minilm}` (the converted all-MiniLM-L6-v2), `{init}` (the
seed's shared random encoder), `{previous}` (the arm's previous stage), `{seed}`, and
`{best_queue_size}` (the queue size of the best `queue_*` arm, resolved after those finish).
"""

import dataclasses
from typing import Dict, Mapping, Optional, Tuple

RECIPES = "experiments/recipes"


@dataclasses.dataclass(frozen=True)
class Stage:
    """One training run. `steps` multiplies the claim's step count; `init` is "random" (the
    seed's shared random encoder), "previous" (the arm's previous stage), "stack" (progressive
    stacking from the previous stage) or "" (the recipe's own initialisation, seeded).
    `warmup_fraction`: linear warm-up over this share of the steps, then linear decay to 0;
    None keeps the recipe's learning-rate schedule."""

    experiment: str
    config_files: Tuple[str, ...]
    overrides: Mapping[str, object] = dataclasses.field(default_factory=dict)
    steps: float = 1.0
    init: str = ""
    cpu_replicas: int = 1
    warmup_fraction: Optional[float] = 0.1


@dataclasses.dataclass(frozen=True)
class Arm:
    """What is trained and exported. No stages: the initialisation itself is exported
    (`export_from`: "minilm" or "random"); `deterministic` arms run once, not per seed."""

    name: str
    label: str
    stages: Tuple[Stage, ...] = ()
    export_from: str = ""
    deterministic: bool = False
    after_best: bool = False  # run after every other arm, for `{best_queue_size}`
    x: Optional[float] = None  # position in a sweep plot (queue size, batch size, margin)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """`treatment` − `control` on `metric` (default: the claim's), paired by seed; the paper
    says it is positive (`direction` 1) or negative (-1). `tolerance`: an effect whose 95 %
    interval lies within ±tolerance counts as no effect."""

    treatment: str
    control: str
    says: str
    metric: str = ""
    control_metric: str = ""
    direction: int = 1
    tolerance: float = 0.01
    # Compute to a fixed level: a training-summary tag that rises (an accuracy). Each run's
    # value is then the training CPU minutes it needs to first reach the lowest final level
    # of the tag (the mean of its last 3 logged values) over every run of both arms, a level
    # each run reaches.
    to_reach: str = ""


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """`kind`: retrieval (a split's held-out sets; `pcr` adds the PCR variant), udhr,
    stsb, stsb_nn (nearest neighbours on STS-B dev pairs scored ≥ `min_score`; for both,
    `pcr` adds the variant without the first principal component of the evaluated
    sentences), spread (of
    the embeddings of `source`: "bible" or "stsb"), validation (the task's own validation
    metrics of the last stage, `--mode=eval` on its `task.validation_data`)."""

    kind: str
    split: str = ""
    sets: Tuple[str, ...] = ()
    pcr: bool = False
    langs: Tuple[str, ...] = ()
    min_score: float = 4.0
    source: str = ""


@dataclasses.dataclass(frozen=True)
class Panel:
    """One plot panel: `metric` for `arms` (points, or a line over `Arm.x` when `x_label` is
    set), with `reference`'s mean as a dashed line."""

    metric: str
    arms: Tuple[str, ...]
    title: str
    log_x: bool = False
    x_label: str = ""
    reference: str = ""
    curve: str = ""  # "steps" or "cpu": `metric` is a training-summary tag, drawn against
    # the step or the cumulative training CPU minutes; "points": `metric` at the claim's
    # `eval_points`, against the step and the training CPU time


@dataclasses.dataclass(frozen=True)
class Claim:
    name: str
    title: str
    paper: str
    says: str
    arms: Tuple[Arm, ...]
    evaluations: Tuple[Evaluation, ...]
    metric: str
    metric_label: str
    comparisons: Tuple[Comparison, ...]
    panels: Tuple[Panel, ...]
    steps: int
    needs: Tuple[str, ...]
    setup: str
    export_seq_length: int
    cpu_minutes_per_seed: float  # estimate at the default steps, for --list
    columns: Tuple[Tuple[str, str], ...] = ()  # extra metrics in the table: (key, label)
    scale_note: str = ""
    results_from: str = ""  # a claim whose runs already evaluate this one
    share_y: bool = False  # one y axis for all panels
    # Learning curves: every trained arm is evaluated from its own checkpoints at these
    # fractions of its last stage's steps (the last one 1.0), each an export of the
    # checkpoint at that step; the comparisons are read at the last point and at equal
    # training CPU time. Empty: one evaluation of the finished arm.
    eval_points: Tuple[float, ...] = ()

    def estimated_cpu_minutes(self, seeds: int = 3) -> float:
        """The `--list` estimate for `seeds` seeds at the default steps."""
        return seeds * self.cpu_minutes_per_seed

    def planned_runs(self, seeds: int = 3) -> int:
        """Arm × seed runs for `seeds` seeds (a deterministic arm runs once)."""
        return sum(1 if arm.deterministic else seeds for arm in self.arms)

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(f"claim {self.name}: no arm {name!r} "
                       f"(have {', '.join(a.name for a in self.arms)})")


LABSE = "Language-agnostic BERT Sentence Embedding"
CMLM = "Universal Sentence Representation Learning with Conditional Masked Language Model"
MOCO = "Aligning Cross-lingual Sentence Representations with Dual Momentum Contrast"

BIBLE_RETRIEVAL = Evaluation("retrieval", split="bible_split", sets=("bible_es",))
BIBLE_SPREAD = Evaluation("spread", source="bible")
MEAN_BOTH = "retrieval/mean/both"


def _bitext_tiny(**overrides) -> Stage:
    fields = {"task.train_data.input_path": "{data}/bible_train.tsv"}
    fields.update(overrides)
    return Stage("cmlm_tf/bitext", ("configs/bitext_tiny.yaml", f"{RECIPES}/bible_tiny.yaml"),
                 fields, init="random")


def _margin_arm(margin: float) -> Arm:
    return Arm(f"margin_{margin:g}", f"margin {margin:g}", x=margin, stages=(Stage(
        "cmlm_tf/bitext", ("{minilm}/warm_start.yaml", "configs/bitext_minilm.yaml"),
        {"task.train_data.input_path": "{data}/bitext_split/train.tsv",
         "task.margin_softmax.margin": margin}),))


MARGIN = Claim(
    name="margin",
    title="Additive margin",
    paper=LABSE,
    says="An additive margin on the positive pair (m = 0.3) makes translation retrieval "
         "much better than no margin; a small margin (0.1) already helps (§6.1, Figure 4).",
    arms=(Arm("minilm", "all-MiniLM-L6-v2, not fine-tuned", export_from="minilm",
              deterministic=True),
          _margin_arm(0.0), _margin_arm(0.1), _margin_arm(0.3)),
    evaluations=(Evaluation("retrieval", split="bitext_split", pcr=True),
                 Evaluation("udhr", langs=("spa", "fra", "deu_1996", "jpn", "rus",
                                           "cmn_hans"))),
    metric=MEAN_BOTH,
    metric_label="held-out retrieval, mean of both directions",
    comparisons=(
        Comparison("margin_0.3", "margin_0", "m = 0.3 beats m = 0"),
        Comparison("margin_0.1", "margin_0", "m = 0.1 beats m = 0"),
        Comparison("margin_0.3", "margin_0.1", "m = 0.3 beats m = 0.1"),
    ),
    panels=(Panel(MEAN_BOTH, ("margin_0", "margin_0.1", "margin_0.3"),
                  "held-out retrieval (7 sets, pair-weighted)", x_label="margin m",
                  reference="minilm"),
            Panel("udhr/mean/both", ("margin_0", "margin_0.1", "margin_0.3"),
                  "UDHR retrieval (eng ↔ 6 languages, 50 paragraphs)", x_label="margin m",
                  reference="minilm")),
    columns=(("retrieval/mean/src2tgt", "en→xx"), ("retrieval/mean/tgt2src", "xx→en"),
             ("retrieval/bible_es/both", "Bible"), ("udhr/mean/both", "UDHR")),
    steps=300,
    needs=("bitext_split", "minilm", "udhr"),
    setup="all-MiniLM-L6-v2 fine-tuned with `cmlm_tf/bitext` (`configs/bitext_minilm.yaml`: "
          "batch 32 pairs, seq 32, AdamW 5e-5, scale 100, both directions) on the training "
          "side of `benchmarks/bitext_split.py --heldout_share 0.2` (Bible en–es + "
          "Installation Guide es, de, fr, ja, ru, zh_CN); only the margin differs. Held-out: "
          "the split's 7 sets (2,158 pairs), top-1 cosine retrieval; exports at seq 32.",
    export_seq_length=32,
    cpu_minutes_per_seed=16.0,
)


def _moco_arm(queue_size: int, label: str, momentum: float = 0.99) -> Arm:
    return Arm(f"queue_{label}", f"queue {label}, m {momentum:g}", x=queue_size, stages=(
        Stage("cmlm_tf/moco", ("configs/moco_tiny.yaml", f"{RECIPES}/moco_bible_tiny.yaml"),
              {"task.train_data.input_path": "{data}/bible_train.tsv",
               "task.moco.queue_size": queue_size, "task.moco.momentum": momentum},
              init="random"),))


NEGATIVES = Claim(
    name="negatives",
    title="More negatives: cross-replica gathering and batch size",
    paper=LABSE,
    says="In-batch negatives benefit from large batches; gathering every accelerator's "
         "embeddings as negatives realises that benefit under data parallelism (§3.3).",
    arms=(
        Arm("two_replicas_gather", "2 replicas × 16, gathered (32 candidates)", stages=(
            dataclasses.replace(_bitext_tiny(**{
                "task.train_data.global_batch_size": 32,
                "task.margin_softmax.cross_replica_negatives": True}), cpu_replicas=2),),
            x=32),
        Arm("two_replicas_local", "2 replicas × 16, local only (16 candidates)", stages=(
            dataclasses.replace(_bitext_tiny(**{
                "task.train_data.global_batch_size": 32,
                "task.margin_softmax.cross_replica_negatives": False}), cpu_replicas=2),),
            x=16),
        Arm("batch_8", "one device, batch 8", x=8, stages=(dataclasses.replace(
            _bitext_tiny(**{"task.train_data.global_batch_size": 8}), steps=4.0),)),
        Arm("batch_32", "one device, batch 32", x=32, stages=(
            _bitext_tiny(**{"task.train_data.global_batch_size": 32}),)),
        Arm("batch_128", "one device, batch 128", x=128, stages=(dataclasses.replace(
            _bitext_tiny(**{"task.train_data.global_batch_size": 128}), steps=0.25),)),
    ),
    evaluations=(BIBLE_RETRIEVAL, BIBLE_SPREAD),
    metric=MEAN_BOTH,
    metric_label="held-out Bible retrieval (1,000 pairs), mean of both directions",
    comparisons=(
        Comparison("two_replicas_gather", "two_replicas_local",
                   "gathering the other replica's embeddings beats local negatives"),
        Comparison("batch_128", "batch_8", "batch 128 beats batch 8 (same examples)"),
        Comparison("batch_32", "batch_8", "batch 32 beats batch 8 (same examples)"),
        Comparison("batch_128", "batch_32", "batch 128 beats batch 32 (same examples)"),
    ),
    panels=(Panel(MEAN_BOTH, ("batch_8", "batch_32", "batch_128"),
                  "batch size, same examples (one device)", log_x=True,
                  x_label="global batch"),
            Panel(MEAN_BOTH, ("two_replicas_local", "two_replicas_gather"),
                  "two replicas × 16: local or gathered negatives")),
    columns=(("retrieval/mean/src2tgt", "en→es"), ("retrieval/mean/tgt2src", "es→en"),
             ("spread/mean_cosine", "mean cosine")),
    steps=1000,
    needs=("bible_split",),
    setup="The tiny dual encoder of `configs/bitext_tiny.yaml` (2 layers, hidden 128, the "
          "bundled 3,627-token vocabulary) trained from a random initialisation shared by "
          "every arm of a seed, margin 0.3, scale 100, on the Bible pairs whose English text "
          "is not held out by `benchmarks/bitext_split.py --heldout_share 0.2` (29,811 pairs), "
          "seq 32, AdamW 5e-4 with 10 % warm-up. The batch sweep keeps the examples fixed "
          "(steps × batch = 32,000 at the default steps, 1.07 epochs) and the learning rate "
          "fixed, so the smaller batches also take more updates. The two-replica arms run a "
          "MirroredStrategy over two logical CPU devices (`experiments/train.py`), 16 pairs "
          "per replica. Held-out: the split's 1,000 Bible pairs.",
    export_seq_length=32,
    cpu_minutes_per_seed=8.0,
)

QUEUE = Claim(
    name="queue",
    title="Queue size and momentum",
    paper=MOCO,
    says="Performance increases with the memory queue (Figure 2: no saturation up to the "
         "largest queue tried), and without the momentum update the model fails to "
         "converge (Table 5).",
    arms=(
        Arm("in_batch", "in-batch InfoNCE, no queue (τ 0.04)", x=32, stages=(
            _bitext_tiny(**{"task.margin_softmax.margin": 0.0,
                            "task.margin_softmax.scale": 25.0}),)),
        _moco_arm(1024, "1k"), _moco_arm(4096, "4k"), _moco_arm(16384, "16k"),
        Arm("best_queue_momentum_0", "best queue, m 0", after_best=True, stages=(
            Stage("cmlm_tf/moco",
                  ("configs/moco_tiny.yaml", f"{RECIPES}/moco_bible_tiny.yaml"),
                  {"task.train_data.input_path": "{data}/bible_train.tsv",
                   "task.moco.queue_size": "{best_queue_size}", "task.moco.momentum": 0.0},
                  init="random"),)),
    ),
    evaluations=(BIBLE_RETRIEVAL, BIBLE_SPREAD),
    metric=MEAN_BOTH,
    metric_label="held-out Bible retrieval (1,000 pairs), mean of both directions",
    comparisons=(
        Comparison("queue_16k", "queue_1k", "a 16k queue beats a 1k queue"),
        Comparison("queue_4k", "queue_1k", "a 4k queue beats a 1k queue"),
        Comparison("queue_1k", "in_batch", "a 1k queue beats in-batch negatives"),
        Comparison("best_queue_momentum_0", "BEST_QUEUE",
                   "without momentum (m 0) training fails (at the best queue)", direction=-1),
    ),
    panels=(Panel(MEAN_BOTH, ("in_batch", "queue_1k", "queue_4k", "queue_16k"),
                  "negatives: in-batch (32) or a queue of K keys", log_x=True,
                  x_label="negatives per query"),
            Panel("spread/embedding_std", ("in_batch", "queue_1k", "queue_4k", "queue_16k",
                                           "best_queue_momentum_0"),
                  "embedding spread on held-out verses (std per dimension)"),
            Panel("embedding_std", ("queue_1k", "queue_4k", "queue_16k",
                                    "best_queue_momentum_0"),
                  "embedding spread while training (std per dimension)", curve="steps"),
            Panel(MEAN_BOTH, ("BEST_QUEUE", "best_queue_momentum_0"),
                  "momentum 0.99 or 0 at the best queue")),
    columns=(("retrieval/mean/src2tgt", "en→es"), ("retrieval/mean/tgt2src", "es→en"),
             ("spread/embedding_std", "held-out std"),
             ("train/embedding_std", "training std (last loop)"),
             ("train/contrastive_loss", "training loss (last loop)")),
    steps=1000,
    needs=("bible_split",),
    setup="The same tiny encoder, random initialisation, data and held-out pairs as "
          "*negatives*; dual momentum contrast (`configs/moco_tiny.yaml`: one shared query "
          "encoder, batch 32, seq 32, τ 0.04, AdamW 5e-4) with queues of 1,024 / 4,096 / "
          "16,384 keys per side (32 / 128 / 512 batches) and momentum 0.99, then momentum 0 "
          "at the queue size with the best mean. The in-batch arm is `cmlm_tf/bitext` with "
          "margin 0 and scale 25 = 1/τ: the same InfoNCE over the 32 pairs of the batch, "
          "gradients through both sides, no queue, no momentum encoder.",
    export_seq_length=32,
    cpu_minutes_per_seed=30.0,
    scale_note="The paper's queues hold up to 409,600 keys from a BERT-base encoder trained "
               "for ~70k steps at batch 1,024; here 1,000 steps of 32 pairs fill a 16k queue "
               "after half of the run.",
)

_PROSE = "{shared}/english_prose/sentences/*.txt"
# The six novels and the King James Bible, one chapter per document (the runner writes it).
_PROSE_AND_BIBLE = _PROSE + ",{data}/bible_chapters.txt"


def _cmlm_stage(steps: float = 1.0, text: str = _PROSE) -> Stage:
    return Stage("cmlm_tf/cmlm", ("configs/cmlm_tiny.yaml", f"{RECIPES}/adamw_tiny.yaml",
                                  f"{RECIPES}/prose_tiny.yaml"),
                 {"task.train_data.input_path": text}, steps=steps, init="random")


def _mlm_stage(steps: float = 1.0, text: str = _PROSE) -> Stage:
    return Stage("cmlm_tf/mlm_tlm", ("configs/mlm_tlm_tiny.yaml", f"{RECIPES}/adamw_tiny.yaml",
                                     f"{RECIPES}/mlm_only_tiny.yaml"),
                 {"task.train_data.input_path": text}, steps=steps, init="random")


CMLM_VS_MLM = Claim(
    name="cmlm_vs_mlm",
    title="CMLM against MLM, as learning curves",
    paper=CMLM,
    says="Conditioning the masked LM of a sentence on the vector of the sentence before it "
         "gives better sentence vectors than plain MLM (BERT) trained on the same text "
         "(Tables 1 and 2; on STS-B the CMLM encoder is far ahead of mean-pooled BERT).",
    arms=(
        Arm("untrained", "random initialisation (no training)", export_from="random"),
        Arm("mlm", "MLM, same steps", stages=(_mlm_stage(1.0, _PROSE_AND_BIBLE),)),
        Arm("mlm_2x", "MLM, twice the steps", stages=(_mlm_stage(2.0, _PROSE_AND_BIBLE),)),
        Arm("cmlm", "CMLM", stages=(_cmlm_stage(1.0, _PROSE_AND_BIBLE),)),
    ),
    evaluations=(Evaluation("stsb", pcr=True), Evaluation("stsb_nn", min_score=4.0, pcr=True),
                 Evaluation("spread", source="stsb")),
    metric="stsb/spearman",
    metric_label="STS-B dev Spearman (cosine of mean-pooled vectors)",
    comparisons=(
        Comparison("cmlm", "mlm", "CMLM beats MLM at the same steps"),
        Comparison("cmlm", "mlm_2x", "CMLM beats MLM with twice the steps"),
        Comparison("cmlm", "untrained", "CMLM beats the untrained encoder"),
        Comparison("cmlm", "mlm", "CMLM beats MLM at the same steps, with PCR",
                   metric="stsb_pcr/spearman"),
        Comparison("cmlm", "mlm", "CMLM's neighbours are better (STS-B pairs ≥ 4)",
                   metric="stsb_nn/both"),
        Comparison("cmlm", "mlm", "CMLM's neighbours are better, with PCR",
                   metric="stsb_nn_pcr/both"),
    ),
    panels=(Panel("stsb/spearman", ("untrained", "mlm", "mlm_2x", "cmlm"),
                  "STS-B dev Spearman", curve="points"),
            Panel("stsb_pcr/spearman", ("untrained", "mlm", "mlm_2x", "cmlm"),
                  "STS-B dev Spearman, PCR", curve="points"),
            Panel("stsb_nn/both", ("untrained", "mlm", "mlm_2x", "cmlm"),
                  "nearest neighbour, STS-B pairs ≥ 4", curve="points"),
            Panel("stsb_nn_pcr/both", ("untrained", "mlm", "mlm_2x", "cmlm"),
                  "nearest neighbour, PCR", curve="points")),
    columns=(("stsb_pcr/spearman", "STS-B, PCR"), ("stsb_nn/both", "NN top-1 (pairs ≥ 4)"),
             ("stsb_nn_pcr/both", "NN top-1, PCR"),
             ("spread/mean_cosine", "mean cosine"),
             ("train/masked_lm_accuracy", "MLM acc. (last loop)")),
    steps=10000,
    eval_points=(0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0),
    needs=("stsb", "prose", "bible_chapters"),
    setup="One tiny encoder (`configs/cmlm_tiny.yaml`: 2 layers, hidden 128, the bundled "
          "vocabulary, mean pooling) from a random initialisation shared by the arms of a "
          "seed, trained on Jane Austen's six novels (`english_prose/sentences/`, one "
          "sentence per line, paragraphs as documents: 31,480 sentences) and the King James "
          "Bible (`bible/eng_kjv.txt`, each chapter a document of consecutive verses: "
          "30,884 verses in 1,184 chapters, written by the runner from `bible/refs.txt`), "
          "seq 48, 15 masked tokens per sequence (31 %), batch 32, AdamW 1e-3 with 10 % "
          "warm-up and linear decay to 0 at the arm's last step. CMLM (8 projections) "
          "encodes s1 and predicts the masks of s2; MLM (`cmlm_tf/mlm_tlm` with "
          "`tlm_fraction: 0`) predicts the masks of single sentences. A CMLM step runs the "
          "encoder twice, so MLM with twice the steps is the equal-compute arm. Each arm is "
          "evaluated from its own checkpoints at 5, 10, 20, 40, 60, 80 and 100 % of its "
          "steps (a training process stops at each point, the checkpoint is exported and "
          "evaluated, and training resumes from it); the untrained encoder is every arm's "
          "step 0. Evaluation: STS-B dev (1,500 pairs) and, as a nearest-neighbour check, "
          "top-1 retrieval between the two sides of the dev pairs scored ≥ 4; each with and "
          "without PCR (the first principal component of the evaluated sentences' vectors, "
          "not centred, removed before the cosine).",
    export_seq_length=48,
    # measured: 109.7 and 107.6 min for seeds 2 and 3 with --threads 1, 122.8 for seed 1 (Zen 4
    # EPYC, 2 cores)
    cpu_minutes_per_seed=110.0,
    scale_note="The paper trains BERT-base/large for 1M steps at batch 2,048 on Common "
               "Crawl; this is a 1M-parameter encoder and about 62,000 sentences of 19th "
               "century fiction and the 1611 Bible, evaluated on modern STS-B.",
)


def _strategy_stage2(experiment: str, config_files, **overrides) -> Stage:
    fields = {"task.train_data.input_path": "{data}/bible_train.tsv"}
    fields.update(overrides)
    return Stage(experiment, config_files, fields, init="previous")


_CMLM_BR = ("configs/cmlm_tiny.yaml", "configs/cmlm_br_joint_tiny.yaml",
            f"{RECIPES}/adamw_tiny.yaml", f"{RECIPES}/prose_tiny.yaml",
            f"{RECIPES}/bible_bitext_data.yaml")
_CMLM_BR_FIELDS = {"task.train_data.input_path": _PROSE,
                   "task.bitext_data.input_path": "{data}/bible_train.tsv"}

STRATEGIES = Claim(
    name="cmlm_br",
    title="CMLM + bitext retrieval: the three training strategies",
    paper=CMLM,
    says="Of CMLM+BR jointly, CMLM then BR, and CMLM then CMLM+BR, the last is best "
         "(§4.2, Table 4).",
    arms=(
        Arm("br_only", "BR only (from random)", stages=(_bitext_tiny(),)),
        Arm("joint", "CMLM+BR jointly", stages=(
            Stage("cmlm_tf/cmlm_bitext", _CMLM_BR, _CMLM_BR_FIELDS, steps=5.0,
                  init="random"),)),
        Arm("cmlm_then_br", "CMLM, then BR", stages=(
            _cmlm_stage(4.0),
            _strategy_stage2("cmlm_tf/bitext",
                             ("configs/bitext_tiny.yaml", f"{RECIPES}/bible_tiny.yaml")))),
        Arm("cmlm_then_cmlm_br", "CMLM, then CMLM+BR", stages=(
            _cmlm_stage(4.0),
            Stage("cmlm_tf/cmlm_bitext", _CMLM_BR, _CMLM_BR_FIELDS, init="previous"))),
    ),
    evaluations=(BIBLE_RETRIEVAL, Evaluation("stsb")),
    metric=MEAN_BOTH,
    metric_label="held-out Bible retrieval (1,000 pairs), mean of both directions",
    comparisons=(
        Comparison("cmlm_then_cmlm_br", "cmlm_then_br", "CMLM → CMLM+BR beats CMLM → BR"),
        Comparison("cmlm_then_cmlm_br", "joint", "CMLM → CMLM+BR beats CMLM+BR jointly"),
        Comparison("cmlm_then_cmlm_br", "cmlm_then_br",
                   "CMLM → CMLM+BR beats CMLM → BR on STS-B",
                   metric="stsb/spearman", control_metric="stsb/spearman"),
    ),
    panels=(Panel(MEAN_BOTH, ("br_only", "joint", "cmlm_then_br", "cmlm_then_cmlm_br"),
                  "held-out Bible retrieval"),
            Panel("stsb/spearman", ("br_only", "joint", "cmlm_then_br", "cmlm_then_cmlm_br"),
                  "STS-B dev Spearman")),
    columns=(("retrieval/mean/src2tgt", "en→es"), ("retrieval/mean/tgt2src", "es→en"),
             ("stsb/spearman", "STS-B")),
    steps=500,
    needs=("bible_split", "stsb", "prose"),
    setup="The tiny encoder of *cmlm_vs_mlm* and *negatives* (same vocabulary and shape), "
          "a random initialisation shared by the arms of a seed. Stage 1 is CMLM for 2,000 "
          "steps with the recipe of *cmlm_vs_mlm* on the six novels alone (both CMLM-first "
          "arms share it); stage 2 trains 500 steps of BR (`cmlm_tf/bitext`, AdamW 5e-4) "
          "or CMLM+BR (`cmlm_tf/cmlm_bitext`, α 0.2, "
          "AdamW 1e-3) on the Bible training pairs, batch 32, seq 32 for pairs. The joint arm "
          "trains CMLM+BR for the same 2,500 steps in one stage; BR only trains 500 steps "
          "from the random initialisation. Evaluation: held-out Bible retrieval and STS-B "
          "dev.",
    export_seq_length=32,
    cpu_minutes_per_seed=50.0,  # measured: 49.5 min for seed 1 (AMD EPYC, 2 cores)
    scale_note="The paper evaluates the strategies on XEVAL transfer tasks after 1-2M "
               "steps of a BERT-base encoder; here retrieval and STS of a 1M-parameter "
               "encoder after 2,500 steps.",
)

_TRAINED_MARGINS = ("margin_0", "margin_0.1", "margin_0.3")

PCR = Claim(
    name="pcr",
    title="Principal component removal",
    paper=CMLM,
    says="Removing each language's first principal component raises cross-lingual "
         "retrieval: the component mostly encodes the language (§5.2 and Table 8, on "
         "Tatoeba: a clear gain for mBERT, a marginal one for the paper's own model).",
    arms=MARGIN.arms,
    evaluations=MARGIN.evaluations,
    metric="retrieval_pcr/mean/both",
    metric_label="held-out retrieval with PCR, mean of both directions",
    comparisons=tuple(
        Comparison(arm, arm, f"PCR raises retrieval ({arm.replace('_', ' ')})",
                   metric="retrieval_pcr/mean/both", control_metric=MEAN_BOTH)
        for arm in reversed(_TRAINED_MARGINS)),
    panels=(Panel(MEAN_BOTH, ("minilm",) + _TRAINED_MARGINS, "without PCR"),
            Panel("retrieval_pcr/mean/both", ("minilm",) + _TRAINED_MARGINS, "with PCR")),
    columns=((MEAN_BOTH, "without PCR"), ("retrieval_pcr/mean/src2tgt", "en→xx, PCR"),
             ("retrieval_pcr/mean/tgt2src", "xx→en, PCR")),
    steps=MARGIN.steps,
    needs=MARGIN.needs,
    setup="The exports of *margin* on its 7 held-out sets: for each set, one component for "
          "the English side and one for the other side, each the first right singular "
          "vector of that side's held-out embeddings (no centring, as in the paper), removed "
          "before the cosine (`cmlm_tf.evaluation.pcr`, what `python -m cmlm_tf.evaluate "
          "retrieval --pcr` does).",
    export_seq_length=MARGIN.export_seq_length,
    cpu_minutes_per_seed=0.0,
    results_from="margin",
    share_y=True,
)

_NOVELS = ",".join(f"{{shared}}/english_prose/sentences/{name}.txt" for name in (
    "emma", "mansfield_park", "northanger_abbey", "pride_and_prejudice",
    "sense_and_sensibility"))
# Validation TLM pairs: the training pairs, as in the recorded results (configs/mlm_tlm_tiny
# names the bundled held-out verses, which bible_train.tsv may hold).
_STACKING_FIELDS = {"task.train_data.input_path": _NOVELS,
                    "task.validation_data.input_path":
                        "{shared}/english_prose/sentences/persuasion.txt",
                    "task.validation_data.bitext_input_path": "{data}/bible_train.tsv",
                    "task.bitext_data.input_path": "{data}/bible_train.tsv"}


def _mlm_tlm_stage(layers: int, steps: float, init: str = "") -> Stage:
    return Stage("cmlm_tf/mlm_tlm", ("configs/mlm_tlm_tiny.yaml", f"{RECIPES}/stacking_tiny.yaml"),
                 {**_STACKING_FIELDS, "task.model.encoder.num_layers": layers}, steps=steps,
                 init=init)


STACKING = Claim(
    name="stacking",
    title="Progressive stacking",
    paper=LABSE,
    says="MLM + TLM pre-training in three progressive-stacking stages (L/4 → L/2 → L layers, "
         "each stage copied into the next) trains the L-layer encoder (§3.4, after Gong et "
         "al., 2019, whose claim is that stacking reaches the same masked-LM accuracy "
         "with less compute).",
    arms=(
        Arm("stacked", "1 → 2 → 4 layers, stacked", stages=(
            _mlm_tlm_stage(1, 1.0), _mlm_tlm_stage(2, 1.0, "stack"),
            _mlm_tlm_stage(4, 1.0, "stack"))),
        Arm("scratch", "4 layers from scratch, same layer-steps", stages=(
            _mlm_tlm_stage(4, 1.75),)),
    ),
    evaluations=(Evaluation("validation"), Evaluation("stsb")),
    metric="validation/mlm_accuracy",
    metric_label="MLM accuracy on a held-out novel",
    comparisons=(
        Comparison("stacked", "scratch", "stacking beats 4 layers from scratch at equal "
                   "layer-steps"),
        Comparison("stacked", "scratch", "… on TLM accuracy", metric="validation/tlm_accuracy",
                   control_metric="validation/tlm_accuracy"),
        Comparison("stacked", "scratch", "stacking needs less compute to reach a fixed "
                   "training MLM accuracy", to_reach="mlm_accuracy", direction=-1,
                   tolerance=0.5),
    ),
    panels=(Panel("mlm_accuracy", ("stacked", "scratch"),
                  "training MLM accuracy against training CPU time", curve="cpu"),
            Panel("validation/mlm_accuracy", ("stacked", "scratch"),
                  "MLM accuracy, held-out novel")),
    columns=(("validation/tlm_accuracy", "TLM accuracy (validation)"),
             ("stsb/spearman", "STS-B")),
    steps=1000,
    needs=("bible_split", "prose", "stsb"),
    setup="`cmlm_tf/mlm_tlm` on `configs/mlm_tlm_tiny.yaml` (hidden 128, the bundled "
          "vocabulary, AdamW 2e-3 with 10 % warm-up per stage, batch 32, seq 64, 20 % "
          "masked, half MLM on five of Jane Austen's novels and half TLM on the Bible "
          "training pairs). Stacked: 1 layer, then 2, then 4 (`task.init_stack_from` the "
          "previous stage), 1,000 steps each. Scratch: 4 layers for 1,750 steps, the same "
          "layer-steps (7,000). Validation: 20 batches of the held-out sixth novel "
          "(*Persuasion*) for MLM, with TLM on Bible training pairs. Both arms of a seed "
          "use the same seed, but not the same initial weights (the shapes differ). Compute to "
          "a fixed level: the training CPU minutes each run needs to first reach the lowest "
          "final training MLM accuracy of all runs (a run's final level: the mean of its "
          "last three logged values, 150 steps; every run reaches the lowest), from the "
          "training summaries every 50 steps.",
    export_seq_length=64,
    cpu_minutes_per_seed=34.0,  # measured: 32 and 36 min for seeds 2 and 3 (AMD EPYC, 2 cores)
    scale_note="LaBSE stacks a 12-layer encoder in stages of 400k, 800k and 1.8M steps at "
               "batch 8,192; this is 1 → 2 → 4 layers of width 128 for 1,000 steps each. The "
               "paper reports no comparison with training from scratch; the claim tested is "
               "the efficiency argument it relies on.",
)


def _bgt_arm(name: str, label: str, *extra: str) -> Arm:
    return Arm(name, label, stages=(Stage(
        "cmlm_tf/bgt", ("configs/bgt_tiny.yaml", *extra),
        {"task.train_data.input_path": "{data}/bible_train.tsv",
         "task.train_data.shuffle_buffer_size": 30000, "task.train_data.seq_length": 64,
         "task.validation_data.seq_length": 64, "task.sp_vocab_size": 4000},
        warmup_fraction=None),))


BGT = Claim(
    name="bgt",
    title="BGT against BILINGUALTRANS",
    paper="A Bilingual Generative Transformer for Semantic Sentence Embedding",
    says="The bilingual generative model (a shared semantic latent plus language-specific "
         "latents, each sentence reconstructed) gives better semantic embeddings than "
         "BILINGUALTRANS, a translation model with the same encoder (Table 2).",
    arms=(_bgt_arm("bilingualtrans", "BILINGUALTRANS", "configs/bgt_bilingualtrans.yaml"),
          _bgt_arm("bgt", "BGT")),
    evaluations=(BIBLE_RETRIEVAL,),
    metric=MEAN_BOTH,
    metric_label="held-out Bible retrieval (1,000 pairs), mean of both directions",
    comparisons=(Comparison("bgt", "bilingualtrans", "BGT beats BILINGUALTRANS"),),
    panels=(Panel(MEAN_BOTH, ("bilingualtrans", "bgt"), "held-out Bible retrieval"),),
    columns=(("retrieval/mean/src2tgt", "en→es"), ("retrieval/mean/tgt2src", "es→en")),
    steps=600,
    needs=("bible_split",),
    setup="`configs/bgt_tiny.yaml` (one-layer encoders of width 64, latent 64, one-layer "
          "decoders; Adam with the inverse-square-root schedule and 100 warm-up steps, KL "
          "annealed over 400 steps, label smoothing 0.1), each run learning its own "
          "lower-cased SentencePiece vocabulary of 4,000 pieces, on the Bible training pairs, "
          "batch 32, seq 64, 600 steps; BILINGUALTRANS adds "
          "`configs/bgt_bilingualtrans.yaml`. The embedding is the semantic posterior mean, "
          "as exported.",
    export_seq_length=64,
    cpu_minutes_per_seed=20.0,  # measured: 19.5 and 20.5 min for seeds 1 and 2 (AMD EPYC, 2 cores)
    scale_note="The paper trains 5-layer, 1024-dimensional encoders on about 1M pairs for 20 "
               "epochs with ~25k-token batches and evaluates on STS; here 600 steps of 32 "
               "pairs (0.65 epochs of the Bible), evaluated by retrieval.",
)

CLAIMS: Dict[str, Claim] = {claim.name: claim for claim in
                            (MARGIN, NEGATIVES, QUEUE, CMLM_VS_MLM, STRATEGIES, PCR,
                             STACKING, BGT)}

# Claims of the issue with no runner entry, and why (shown by --list and in the report).
NOT_RUN: Dict[str, str] = {}
