"""Bitext mining with margin scores (LASER; the BUCC protocol of LASER and XTREME).

For source x and target y with cosine cos(x, y), and N_k(x) the k nearest targets of x
(N_k(y) the k nearest sources of y),

    neighbourhood(x, y) = (mean_{y' ∈ N_k(x)} cos(x, y') + mean_{x' ∈ N_k(y)} cos(x', y)) / 2
    ratio:    score(x, y) = cos(x, y) / neighbourhood(x, y)
    distance: score(x, y) = cos(x, y) − neighbourhood(x, y)

The candidates of a source are its k nearest targets and those of a target its k nearest
sources. `max` retrieval takes each sentence's best-scoring candidate, sorts these pairs by
score and keeps a pair only while neither side has been used: the result is 1-to-1. Only the
k-NN lists are kept, so memory grows as N·k (see `knn.top_k`).
"""

import dataclasses
import functools
from typing import Callable, Dict, Optional, Tuple

import numpy as np

from cmlm_tf.evaluation import knn
from cmlm_tf.vectors import unit_rows

MARGINS = ("ratio", "distance")
# search(queries, keys, k) -> (cosines [n, k], indices int64 [n, k]).
Search = Callable[[np.ndarray, np.ndarray, int], Tuple[np.ndarray, np.ndarray]]
# search_both(src, tgt, k) -> ((cosines, indices) of the sources, the same of the targets):
# both directions at once, e.g. from one product (`cmlm_tf.scale.flat_search.top_k_both`).
SearchBoth = Callable[[np.ndarray, np.ndarray, int],
                      Tuple[Tuple[np.ndarray, np.ndarray], Tuple[np.ndarray, np.ndarray]]]


def margin(cosines: np.ndarray, neighbourhood: np.ndarray, kind: str = "ratio") -> np.ndarray:
    """`cosines / neighbourhood` (ratio) or `cosines − neighbourhood` (distance)."""
    if kind == "ratio":
        return cosines / neighbourhood
    if kind == "distance":
        return cosines - neighbourhood
    raise ValueError(f"margin must be one of {MARGINS}, got {kind!r}")


@dataclasses.dataclass
class MarginCandidates:
    """Each sentence's k nearest neighbours on the other side and their margin scores.

    Attributes:
        forward_indices, forward_scores: int64 / float [n_src, k], the nearest targets of
            each source (by cosine, descending) and the margin score of each pair.
        backward_indices, backward_scores: [n_tgt, k], the same from the target side.
        forward_cosines, backward_cosines: the cosines behind those scores.
    """

    forward_indices: np.ndarray
    forward_scores: np.ndarray
    forward_cosines: np.ndarray
    backward_indices: np.ndarray
    backward_scores: np.ndarray
    backward_cosines: np.ndarray


def margin_candidates(src: np.ndarray, tgt: np.ndarray, *, k: int = 4, kind: str = "ratio",
                      block_bytes: int = knn.DEFAULT_BLOCK_BYTES,
                      search: Optional[Search] = None,
                      search_both: Optional[SearchBoth] = None) -> MarginCandidates:
    """k-NN of each side and margin scores of all candidate pairs.

    Args:
        src: float [n_src, dim]; tgt: float [n_tgt, dim]; L2-normalised rows (cosine).
        k: neighbours per sentence (LASER: 4); at most the size of the other side.
        kind: `ratio` or `distance`.
        search: `search(queries, keys, k) -> (cosines [n, k], indices int64 [n, k])`, rows
            by descending cosine; default the exact blocked search (`knn.top_k`). An
            approximate one: `functools.partial(ann.top_k, ...)`.
        search_both: `search_both(src, tgt, k)`, both directions at once; replaces
            `search` (`SearchBoth`).
    """
    margin(np.zeros(1), np.ones(1), kind)  # validates `kind` before the expensive part
    if k < 1:
        raise ValueError(f"k must be positive, got {k}")
    if search_both is not None:
        if search is not None:
            raise ValueError("search and search_both are exclusive")
        (forward_cosines, forward_indices), (backward_cosines, backward_indices) = \
            search_both(src, tgt, k)
        return margin_scores(forward_cosines, forward_indices, backward_cosines,
                             backward_indices, kind=kind)
    if search is None:
        search = functools.partial(knn.top_k, block_bytes=block_bytes)
    forward_cosines, forward_indices = search(src, tgt, min(k, tgt.shape[0]))
    backward_cosines, backward_indices = search(tgt, src, min(k, src.shape[0]))
    return margin_scores(forward_cosines, forward_indices, backward_cosines, backward_indices,
                         kind=kind)


def margin_scores(forward_cosines: np.ndarray, forward_indices: np.ndarray,
                  backward_cosines: np.ndarray, backward_indices: np.ndarray,
                  *, kind: str = "ratio") -> MarginCandidates:
    """Margin scores of both sides' k-NN lists, however they were searched.

    Args:
        forward_cosines, forward_indices: [n_src, k], each source's nearest targets.
        backward_cosines, backward_indices: [n_tgt, k], each target's nearest sources.
        kind: `ratio` or `distance`.
    """
    src_density = forward_cosines.mean(axis=1)
    tgt_density = backward_cosines.mean(axis=1)
    forward_scores = margin(
        forward_cosines, (src_density[:, None] + tgt_density[forward_indices]) / 2, kind)
    backward_scores = margin(
        backward_cosines, (tgt_density[:, None] + src_density[backward_indices]) / 2, kind)
    return MarginCandidates(forward_indices, forward_scores, forward_cosines,
                            backward_indices, backward_scores, backward_cosines)


@dataclasses.dataclass
class MinedPairs:
    """1-to-1 pairs sorted by descending margin score: int64 [p], int64 [p], float [p]."""

    src_indices: np.ndarray
    tgt_indices: np.ndarray
    scores: np.ndarray

    def __len__(self):
        return int(self.scores.shape[0])


def max_retrieval(candidates: MarginCandidates) -> MinedPairs:
    """Greedy 1-to-1 pairs from each sentence's best candidate (LASER's `max` retrieval).

    Each source proposes its best-scoring target and each target its best-scoring source
    (ties: the nearer neighbour). Proposals are taken by descending score (ties: source-side
    proposals first, then by index) and kept when neither sentence is taken yet.
    """
    n_src = candidates.forward_scores.shape[0]
    n_tgt = candidates.backward_scores.shape[0]
    best_forward = candidates.forward_scores.argmax(axis=1)
    best_backward = candidates.backward_scores.argmax(axis=1)
    src_side = np.concatenate([
        np.arange(n_src),
        np.take_along_axis(candidates.backward_indices, best_backward[:, None], 1)[:, 0]])
    tgt_side = np.concatenate([
        np.take_along_axis(candidates.forward_indices, best_forward[:, None], 1)[:, 0],
        np.arange(n_tgt)])
    scores = np.concatenate([
        np.take_along_axis(candidates.forward_scores, best_forward[:, None], 1)[:, 0],
        np.take_along_axis(candidates.backward_scores, best_backward[:, None], 1)[:, 0]])
    src_taken = np.zeros(n_src, bool)
    tgt_taken = np.zeros(n_tgt, bool)
    kept = []
    for proposal in np.argsort(-scores, kind="stable"):
        source, target = src_side[proposal], tgt_side[proposal]
        if not src_taken[source] and not tgt_taken[target]:
            src_taken[source] = tgt_taken[target] = True
            kept.append(proposal)
    kept = np.asarray(kept, np.int64)
    return MinedPairs(src_side[kept], tgt_side[kept], scores[kept])


def mine(src: np.ndarray, tgt: np.ndarray, *, k: int = 4, kind: str = "ratio",
         block_bytes: int = knn.DEFAULT_BLOCK_BYTES, search: Optional[Search] = None,
         search_both: Optional[SearchBoth] = None) -> MinedPairs:
    """Margin-scored 1-to-1 pairs of two sets of embeddings (normalised here); `search` and
    `search_both` as in `margin_candidates`."""
    return max_retrieval(margin_candidates(unit_rows(src), unit_rows(tgt), k=k, kind=kind,
                                           block_bytes=block_bytes, search=search,
                                           search_both=search_both))


def precision_recall_f1(num_correct: int, num_mined: int, num_gold: int) -> Dict[str, float]:
    precision = num_correct / num_mined if num_mined else 0.0
    recall = num_correct / num_gold if num_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def best_f1_threshold(scores: np.ndarray, correct: np.ndarray,
                      num_gold: int) -> Tuple[float, Dict[str, float]]:
    """The threshold t for which the pairs with score ≥ t have the best F1.

    Walks the pairs by descending score and evaluates F1 after each group of equal scores
    (a threshold cannot split a tie). The threshold is the midpoint between the last kept
    score and the next one, or the last kept score itself when the best F1 keeps every pair.
    Among equal F1s the highest threshold wins.

    Args:
        scores: float [p], the margin score of each mined pair.
        correct: bool [p], whether each pair is in the gold alignment.
        num_gold: size of the gold alignment.

    Returns:
        (threshold, {"precision", "recall", "f1", "num_kept"}).
    """
    scores = np.asarray(scores, np.float64)
    correct = np.asarray(correct, bool)
    if scores.shape != correct.shape or scores.ndim != 1 or not scores.size:
        raise ValueError("scores and correct must be non-empty vectors of the same length")
    if num_gold < 1:
        raise ValueError(f"num_gold must be positive, got {num_gold}")
    order = np.argsort(-scores, kind="stable")
    ranked, hits = scores[order], np.cumsum(correct[order])
    group_ends = np.flatnonzero(np.append(ranked[:-1] != ranked[1:], True))
    kept = group_ends + 1
    precision = hits[group_ends] / kept
    recall = hits[group_ends] / num_gold
    total = precision + recall
    f1 = np.divide(2 * precision * recall, total, out=np.zeros_like(total), where=total > 0)
    best = group_ends[int(np.argmax(f1))]
    threshold = ranked[best]
    if best + 1 < ranked.size:
        midpoint = (ranked[best] + ranked[best + 1]) / 2
        threshold = midpoint if midpoint > ranked[best + 1] else ranked[best]
    metrics = precision_recall_f1(int(hits[best]), int(best + 1), num_gold)
    metrics["num_kept"] = int(best + 1)
    return float(threshold), metrics


def metrics_at_threshold(scores: np.ndarray, correct: np.ndarray, num_gold: int,
                         threshold: float) -> Dict[str, float]:
    """Precision, recall and F1 of the pairs with score ≥ `threshold`."""
    keep = np.asarray(scores, np.float64) >= threshold
    metrics = precision_recall_f1(int(np.sum(np.asarray(correct, bool) & keep)),
                                  int(keep.sum()), num_gold)
    metrics["num_kept"] = int(keep.sum())
    return metrics
