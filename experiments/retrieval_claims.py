"""The claims on bitext retrieval: LaBSE's additive margin and in-batch negatives, MoCo's
queue, and principal component removal on the margin claim's exports."""

import dataclasses

from experiments.claim_types import (
    BIBLE_RETRIEVAL,
    BIBLE_SPREAD,
    CMLM,
    LABSE,
    MEAN_BOTH,
    MOCO,
    RECIPES,
    Arm,
    Claim,
    Comparison,
    Evaluation,
    Panel,
    Stage,
    bitext_tiny,
)


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
            dataclasses.replace(bitext_tiny(**{
                "task.train_data.global_batch_size": 32,
                "task.margin_softmax.cross_replica_negatives": True}), cpu_replicas=2),),
            x=32),
        Arm("two_replicas_local", "2 replicas × 16, local only (16 candidates)", stages=(
            dataclasses.replace(bitext_tiny(**{
                "task.train_data.global_batch_size": 32,
                "task.margin_softmax.cross_replica_negatives": False}), cpu_replicas=2),),
            x=16),
        Arm("batch_8", "one device, batch 8", x=8, stages=(dataclasses.replace(
            bitext_tiny(**{"task.train_data.global_batch_size": 8}), steps=4.0),)),
        Arm("batch_32", "one device, batch 32", x=32, stages=(
            bitext_tiny(**{"task.train_data.global_batch_size": 32}),)),
        Arm("batch_128", "one device, batch 128", x=128, stages=(dataclasses.replace(
            bitext_tiny(**{"task.train_data.global_batch_size": 128}), steps=0.25),)),
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
            bitext_tiny(**{"task.margin_softmax.margin": 0.0,
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
