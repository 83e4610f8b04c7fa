r"""Exact against approximate margin mining on real embeddings: time, the exact pairs kept, F1.

    python benchmarks/mining_index.py --src_vectors runs/bible_en --tgt_vectors runs/bible_es \
        [--backend faiss scann] [--probes 16 32 48] [--flat auto float32]

The two folders are written by `python -m cmlm_tf.embed_corpus` from line-aligned files
(line i of one translates line i of the other: the gold alignment, as for the Bible of
../shared/data). Mining is LASER's ratio margin with k = 4 and `max` retrieval, as
`python -m cmlm_tf.mine` does it; every run is in this process, one after the other.

It also mines with the flat product (`cmlm_tf.scale.flat_search`, every pair scored in
bfloat16 or float32 and each shortlist re-scored exactly), once per `--flat` precision. For
the flat product and each index and probe share it prints the wall time (index building
included), the share of the exact miner's pairs above the exact best-F1 threshold that it
also returns, and its own best F1 against the alignment.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cmlm_tf.evaluation import ann, mining  # noqa: E402
from cmlm_tf.runtime import host  # noqa: E402
from cmlm_tf.scale import embedding_files, flat_search  # noqa: E402
from cmlm_tf.vectors import unit_rows  # noqa: E402


def aligned(table_src, table_tgt):
    """The gold pairs (row in src, row in tgt) of two line-aligned files."""
    by_line = {int(line): row for row, line in enumerate(table_tgt.lines)}
    return {(row, by_line[int(line)]) for row, line in enumerate(table_src.lines)
            if int(line) in by_line}


def score(pairs, gold):
    correct = np.array([pair in gold for pair in zip(pairs.src_indices.tolist(),
                                                      pairs.tgt_indices.tolist())])
    threshold, metrics = mining.best_f1_threshold(pairs.scores, correct, len(gold))
    keep = pairs.scores >= threshold
    kept = set(zip(pairs.src_indices[keep].tolist(), pairs.tgt_indices[keep].tolist()))
    return metrics["f1"], kept


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src_vectors", required=True)
    parser.add_argument("--tgt_vectors", required=True)
    parser.add_argument("--backend", nargs="+", default=list(ann.BACKENDS))
    parser.add_argument("--probes", type=int, nargs="+", default=[16, ann.DEFAULT_PROBES, 48])
    parser.add_argument("--flat", nargs="*", default=["auto"], choices=flat_search.PRECISIONS,
                        help="precisions of the flat product to run (none: skip it)")
    args = parser.parse_args()
    tables = [embedding_files.read_embeddings(folder)
              for folder in (args.src_vectors, args.tgt_vectors)]
    src, tgt = (unit_rows(table.vectors) for table in tables)
    gold = aligned(*tables)
    print(f"cpu: {host.describe_cpu()}")
    print(f"{len(src)} × {len(tgt)} vectors of dim {src.shape[1]}, {len(gold)} gold pairs")
    start = time.perf_counter()
    exact = mining.mine(src, tgt)
    exact_seconds = time.perf_counter() - start
    exact_f1, exact_kept = score(exact, gold)
    print(f"{'exact':>6}: {exact_seconds:6.1f} s, best F1 {exact_f1:.4f}, "
          f"{len(exact_kept)} pairs above its threshold")

    def report(name, seconds, pairs):
        f1, _ = score(pairs, gold)
        got = set(zip(pairs.src_indices.tolist(), pairs.tgt_indices.tolist()))
        print(f"{name}: {seconds:6.1f} s: keeps {len(exact_kept & got) / len(exact_kept):.2%} "
              f"of the exact pairs, best F1 {f1:.4f} ({f1 - exact_f1:+.4f})")

    if args.flat:  # TensorFlow's start-up, once per process, is not the search's time
        flat_search.top_k(src[:100], tgt[:100], 4)
    for precision in args.flat:
        start = time.perf_counter()
        pairs = mining.mine(src, tgt, search_both=lambda s, t, k, p=precision:
                            flat_search.top_k_both(s, t, k, precision=p))
        report(f"{'flat':>6} ({flat_search.compute_dtype(precision)} product)",
               time.perf_counter() - start, pairs)
    for backend in args.backend:
        for probes in args.probes:
            start = time.perf_counter()

            def search(queries, keys, k, *, backend=backend, probes=probes):
                index = ann.build_index(keys, backend)
                return ann.top_k(queries, keys, k, index=index, probes=probes)

            pairs = mining.mine(src, tgt, search=search)
            report(f"{backend:>6} ({probes} probes)", time.perf_counter() - start, pairs)


if __name__ == "__main__":
    main()
