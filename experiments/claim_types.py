"""What a claim is made of (stages, arms, evaluations, comparisons, plot panels) and the
pieces several claims share: the papers' titles, the Bible evaluations, the tiny bitext
stage. The claims themselves are in `retrieval_claims.py` and `pretraining_claims.py`,
listed by name in `claims.py`."""

import dataclasses
from typing import Mapping, Optional, Tuple

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


def bitext_tiny(**overrides) -> Stage:
    fields = {"task.train_data.input_path": "{data}/bible_train.tsv"}
    fields.update(overrides)
    return Stage("cmlm_tf/bitext", ("configs/bitext_tiny.yaml", f"{RECIPES}/bible_tiny.yaml"),
                 fields, init="random")
