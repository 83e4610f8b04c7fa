"""Semantic textual similarity: correlation of cosine similarity with gold scores."""

from typing import Dict

import numpy as np
from scipy import stats

from cmlm_tf.vectors import unit_rows


def cosine_pairs(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Cosine similarity of row i of `first` with row i of `second`: float [n]."""
    first, second = unit_rows(first), unit_rows(second)
    if first.shape != second.shape:
        raise ValueError(f"paired embeddings differ in shape: {first.shape} vs {second.shape}")
    return np.einsum("nd,nd->n", first, second)


def sts_correlations(first: np.ndarray, second: np.ndarray, gold: np.ndarray) -> Dict[str,
                                                                                      float]:
    """Spearman and Pearson correlation between pair cosines and gold scores.

    Args:
        first, second: float [n, dim], the two sentences of each pair.
        gold: float [n], the gold similarity (STS-B: 0–5).

    Returns:
        {"spearman": ρ, "pearson": r, "num_pairs": n}.
    """
    cosines = cosine_pairs(first, second).astype(np.float64)
    gold = np.asarray(gold, np.float64)
    if gold.shape != cosines.shape:
        raise ValueError(f"{gold.shape[0]} gold scores for {cosines.shape[0]} pairs")
    return {"spearman": float(stats.spearmanr(cosines, gold).statistic),
            "pearson": float(stats.pearsonr(cosines, gold).statistic),
            "num_pairs": int(cosines.shape[0])}
