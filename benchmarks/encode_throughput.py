r"""Throughput of `cmlm_tf.load(...).encode()` and STS-B dev Spearman of an export.

    python benchmarks/encode_throughput.py --model exports/all-MiniLM-L6-v2 \
        --stsb ../shared/data/stsb/sts-dev.csv [--batch_size 64] [--repeats 3]

Prints Spearman (cosine vs gold) and sentences/s over both columns of STS-B dev, after one
warm-up pass, best of `--repeats`.
"""

import argparse
import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--stsb", required=True)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import numpy as np
    from scipy.stats import spearmanr

    import cmlm_tf

    with open(args.stsb, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t")[:7] for line in f]
    first, second = [r[5] for r in rows], [r[6] for r in rows]
    gold = np.array([float(r[4]) for r in rows])
    model = cmlm_tf.load(args.model)
    model.encode(first + second, batch_size=args.batch_size)  # warm-up
    best = float("inf")
    for _ in range(args.repeats):
        start = time.perf_counter()
        a = model.encode(first, batch_size=args.batch_size)
        b = model.encode(second, batch_size=args.batch_size)
        best = min(best, time.perf_counter() - start)
    spearman = spearmanr((a * b).sum(axis=1), gold)[0]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"model: {args.model}  batch_size: {args.batch_size}")
    print(f"stsb_dev_spearman: {spearman:.4f}")
    print(f"sentences_per_second: {2 * len(rows) / best:.1f}  ({2 * len(rows)} sentences, "
          f"best of {args.repeats})")


if __name__ == "__main__":
    main()
