r"""Precision, recall and F1 of a `python -m cmlm_tf.mine` output against a line alignment.

    python -m cmlm_tf.mine --model exports/all-MiniLM-L6-v2 \
        --src ../shared/data/bible/eng_kjv.txt --tgt ../shared/data/bible/spa_rv1909.txt \
        --output runs/bible_pairs.tsv
    python benchmarks/mine_bible_f1.py --pairs runs/bible_pairs.tsv \
        --src ../shared/data/bible/eng_kjv.txt --tgt ../shared/data/bible/spa_rv1909.txt

The gold alignment is line i of `--src` with line i of `--tgt`. The pairs file holds texts, not
line numbers, so a mined pair is correct when some not-yet-matched gold line has exactly that
(source, target) text; repeated verses (identical on both sides) are thus matched as often as
they occur. Reports the figures for all mined pairs and for the best threshold on the score
(an oracle, as in BUCC's optimised setting), and, with `--threshold`, at that threshold.
"""

import argparse
import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cmlm_tf.evaluation import mining, readers  # noqa: E402


def read_pairs(path: str):
    """(scores float64 [p], [(src, tgt)]) from `score<TAB>src<TAB>tgt` lines."""
    scores, texts = [], []
    for number, line in readers.iter_lines(path):
        fields = line.split("\t")
        if len(fields) != 3:
            raise readers.DataError(f"{path}:{number}: expected score, src, tgt")
        scores.append(float(fields[0]))
        texts.append((fields[1], fields[2]))
    return np.asarray(scores), texts


def correct_flags(texts, gold_counts: collections.Counter) -> np.ndarray:
    """Whether each mined pair (in the given order) uses up a matching gold line."""
    remaining = collections.Counter(gold_counts)
    flags = np.zeros(len(texts), bool)
    for i, pair in enumerate(texts):
        if remaining[pair] > 0:
            remaining[pair] -= 1
            flags[i] = True
    return flags


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", required=True, help="output of python -m cmlm_tf.mine")
    parser.add_argument("--src", required=True, help="line-aligned source file")
    parser.add_argument("--tgt", required=True, help="line-aligned target file")
    parser.add_argument("--threshold", type=float, help="also report at this threshold")
    args = parser.parse_args()

    src, tgt = readers.read_aligned(args.src, args.tgt)
    gold = collections.Counter((s.replace("\t", " "), t.replace("\t", " "))
                               for s, t in zip(src, tgt) if s.strip() and t.strip())
    num_gold = sum(gold.values())
    scores, texts = read_pairs(args.pairs)
    order = np.argsort(-scores, kind="stable")
    scores, texts = scores[order], [texts[i] for i in order]
    correct = correct_flags(texts, gold)
    everything = mining.precision_recall_f1(int(correct.sum()), len(texts), num_gold)
    threshold, best = mining.best_f1_threshold(scores, correct, num_gold)
    print(f"gold lines: {num_gold}  mined pairs: {len(texts)}  correct: {int(correct.sum())}")
    rows = [("all mined pairs", everything, len(texts)),
            (f"best threshold {threshold:.6f}", best, best["num_kept"])]
    if args.threshold is not None:
        at = mining.metrics_at_threshold(scores, correct, num_gold, args.threshold)
        rows.append((f"threshold {args.threshold:g}", at, at["num_kept"]))
    for name, metrics, kept in rows:
        print(f"{name:<28} pairs {kept:>7}  precision {metrics['precision']:.4f}  "
              f"recall {metrics['recall']:.4f}  F1 {metrics['f1']:.4f}")


if __name__ == "__main__":
    main()
