"""Helpers of the evaluation tests: embeddings without a model, from real sentences.

`ngram_vectors` gives hashed character-trigram counts of real sentences from
`../shared/data`: no model is needed, yet they have what real embeddings have (near
neighbours across languages through names, numbers and cognates, exact duplicates and so
exact ties), so the metric code meets realistic inputs.
"""

import zlib

import numpy as np
import pytest

from tests.conftest import SHARED_DATA


def ngram_vectors(texts, dim=256):
    """Hashed lower-case character-trigram counts, float64 [n, dim]."""
    vectors = np.zeros([len(texts), dim])
    for row, text in enumerate(texts):
        padded = f"  {text.lower()} "
        for i in range(len(padded) - 2):
            vectors[row, zlib.crc32(padded[i:i + 3].encode("utf-8")) % dim] += 1
    return vectors


def shared_file(*parts):
    """A file of the shared data folder; the test is skipped where the folder is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found: the shared data folder is not beside the checkout")
    return path


def unit(vectors):
    """The rows of `vectors` at unit length (no zero rows here)."""
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def unique_pairs(src, tgt):
    """Drops pairs with a repeated side: distinct vectors never tie after normalisation."""
    src_count, tgt_count = {}, {}
    for a, b in zip(src, tgt):
        src_count[a] = src_count.get(a, 0) + 1
        tgt_count[b] = tgt_count.get(b, 0) + 1
    kept = [(a, b) for a, b in zip(src, tgt) if src_count[a] == 1 and tgt_count[b] == 1]
    return [a for a, _ in kept], [b for _, b in kept]
