r"""Mines hard negatives for translation pairs with an exported encoder.

    python -m cmlm_tf.mine_hard_negatives --model EXPORT --pairs pairs.tsv \
        --output pairs_with_negatives.tsv --num_negatives 3 \
        [--range_min 0] [--range_max 50] [--margin M] [--max_score S] \
        [--duplicate_cosine 0.98] [--batch_size 64]

Input: `source<TAB>target` per line. Output: `source<TAB>target<TAB>neg1…negk`, the format
`cmlm_tf/bitext` reads with `task.train_data.num_hard_negatives: k`. The candidates are the
distinct targets of the file; for each source they are ranked by cosine with the exact
blocked k-NN of `cmlm_tf.evaluation.knn` (memory grows with the pairs times `range_max`,
never with a full similarity matrix). Left out of a pair's negatives, always: its own target
and every target that is the same text after case-folding and collapsing whitespace, the
source's own text, and targets whose cosine with the pair's target is `--duplicate_cosine`
or more (near-duplicates, i.e. other translations of it). Then, as options: only candidates
ranked `range_min` … `range_max − 1` (after those exclusions); `--margin M`: only candidates
scoring at most the positive pair's cosine minus M; `--max_score S`: only candidates scoring
at most S. The first k that survive, hardest first, are written; a pair with fewer is left
out, counted and reported.
"""

import argparse
import os
import sys
from typing import List, Optional, Sequence, Tuple

import numpy as np

from cmlm_tf.commands import common
from cmlm_tf.evaluation import knn, readers
from cmlm_tf.files import disk, output_folders
from cmlm_tf.vectors import unit_rows


def build_parser() -> argparse.ArgumentParser:
    parser = common.ArgumentParser(
        prog="python -m cmlm_tf.mine_hard_negatives",
        description="Add k hard negatives to each source<TAB>target pair.")
    parser.add_argument("--model", required=True, help="export folder (python -m cmlm_tf.export)")
    parser.add_argument("--pairs", required=True, help="source<TAB>target per line")
    parser.add_argument("--output", required=True,
                        help="source<TAB>target<TAB>neg1...negk per line")
    parser.add_argument("--num_negatives", type=int, required=True, help="k per pair")
    parser.add_argument("--range_min", type=int, default=0,
                        help="skip the hardest candidates ranked below this (default 0)")
    parser.add_argument("--range_max", type=int, default=50,
                        help="consider candidates ranked below this (default 50)")
    parser.add_argument("--margin", type=float, default=None,
                        help="keep candidates scoring at most the positive's cosine minus this")
    parser.add_argument("--max_score", type=float, default=None,
                        help="keep candidates scoring at most this cosine")
    parser.add_argument("--duplicate_cosine", type=float, default=0.98,
                        help="a candidate this close to the pair's target is a duplicate of "
                             "it (default 0.98; above 1 turns the check off)")
    parser.add_argument("--batch_size", type=int, default=64, help="encode batch size")
    return parser


def text_key(text: str) -> str:
    """What two texts must share to count as the same sentence."""
    return " ".join(text.casefold().split())


def mine(sources: Sequence[str], targets: Sequence[str], source_vectors: np.ndarray,
         candidate_texts: Sequence[str], *, candidate_vectors: np.ndarray, num_negatives: int,
         range_min: int = 0, range_max: int = 50, margin: Optional[float] = None,
         max_score: Optional[float] = None,
         duplicate_cosine: float = 0.98) -> List[Optional[List[str]]]:
    """The k negatives of each pair (hardest first), or None where fewer than k survive.

    Args:
        sources, targets: the pairs' texts.
        source_vectors: float [pairs, dim] L2-normalised embeddings of `sources`.
        candidate_texts: the distinct candidate targets; every target of `targets` is
            among them (same `text_key`).
        candidate_vectors: float [candidates, dim] L2-normalised embeddings of them.
        Others: as the command-line options.
    """
    index = {text_key(text): i for i, text in enumerate(candidate_texts)}
    positives = np.array([index[text_key(t)] for t in targets])
    # The positive, its near-duplicates and the ranks below range_min come out of these.
    depth = min(len(candidate_texts), range_max + 1 + 16)
    scores, neighbours = knn.top_k(source_vectors, candidate_vectors, depth)
    results: List[Optional[List[str]]] = []
    for row, (source, positive) in enumerate(zip(sources, positives)):
        positive_score = float(source_vectors[row] @ candidate_vectors[positive])
        near = candidate_vectors[neighbours[row]] @ candidate_vectors[positive]
        source_key = text_key(source)
        rank, chosen = 0, []
        for score, candidate, closeness in zip(scores[row], neighbours[row], near):
            if candidate == positive or closeness >= duplicate_cosine or (
                    text_key(candidate_texts[candidate]) == source_key):
                continue
            rank += 1
            if rank <= range_min:
                continue
            if rank > range_max:
                break
            if margin is not None and score > positive_score - margin:
                continue
            if max_score is not None and score > max_score:
                continue
            chosen.append(candidate_texts[candidate])
            if len(chosen) == num_negatives:
                break
        results.append(chosen if len(chosen) == num_negatives else None)
    return results


def _check(args) -> None:
    if args.num_negatives < 1:
        raise common.UsageError(f"--num_negatives must be positive, got {args.num_negatives}")
    if not 0 <= args.range_min < args.range_max:
        raise common.UsageError(f"--range_min and --range_max must satisfy 0 <= range_min < "
                             f"range_max, got {args.range_min} and {args.range_max}")
    if args.range_max - args.range_min < args.num_negatives:
        raise common.UsageError(f"--range_max - --range_min ({args.range_max - args.range_min}) "
                             f"leaves fewer candidates than --num_negatives "
                             f"({args.num_negatives})")
    if args.batch_size <= 0:
        raise common.UsageError(f"--batch_size must be positive, got {args.batch_size}")


def distinct(texts: Sequence[str]) -> List[str]:
    """`texts` without repeats (by `text_key`), first spelling kept, in order."""
    seen, kept = set(), []
    for text in texts:
        key = text_key(text)
        if key not in seen:
            seen.add(key)
            kept.append(text)
    return kept


def run(args) -> Tuple[int, int]:
    """Mines and writes; returns (pairs written, pairs left out)."""
    _check(args)
    output_folders.check_apart(args.output, "--output", {"--pairs": args.pairs,
                                                         "--model": args.model})
    sources, targets = readers.read_bitext_tsv(args.pairs)
    candidates = distinct(targets)
    if len(candidates) <= args.num_negatives:
        raise common.UsageError(f"{args.pairs}: {len(candidates)} distinct targets cannot give "
                             f"{args.num_negatives} negatives besides the pair's own")
    encode = common.load_encoder(args.model, args.batch_size)
    source_vectors = unit_rows(encode(sources))
    candidate_vectors = unit_rows(encode(candidates))
    negatives = mine(sources, targets, source_vectors, candidates,
                     candidate_vectors=candidate_vectors,
                     num_negatives=args.num_negatives, range_min=args.range_min,
                     range_max=args.range_max, margin=args.margin,
                     max_score=args.max_score, duplicate_cosine=args.duplicate_cosine)
    written = sum(found is not None for found in negatives)
    if not written:
        raise ValueError(f"{args.pairs}: no pair kept {args.num_negatives} negatives after "
                         "the filters; widen --range_max or relax --margin / --max_score")
    write_negatives(args.output, sources, targets, negatives)
    return written, len(sources) - written


def write_negatives(path: str, sources: Sequence[str], targets: Sequence[str],
                    negatives: Sequence[Optional[List[str]]]) -> None:
    """Writes `source<TAB>target<TAB>neg1…negk` for each pair with negatives (`mine`), under
    a temporary name then renamed: a failed write (a full disk) leaves no partial file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with disk.atomic_output(path) as temp, open(temp, "w", encoding="utf-8") as f:
        for source, target, found in zip(sources, targets, negatives):
            if found is not None:
                f.write(readers.tsv_line(source, target, *found))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    common.check_input_paths(parser, {"--model": args.model})

    def body():
        written, left_out = run(args)
        print(f"{written} pairs with {args.num_negatives} negatives written to {args.output}"
              + (f"; {left_out} pairs left out (fewer than {args.num_negatives} negatives "
                 "after the filters)" if left_out else ""), file=sys.stderr)

    return common.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
