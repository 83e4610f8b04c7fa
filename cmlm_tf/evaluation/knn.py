"""Exact top-k cosine neighbours in blocks, so memory stays O(N·k + block·N), never N×N.

Each block of queries is multiplied with all keys (one BLAS call), the k best columns of each
row are found with `argpartition`, and only those k scores and indices are kept. Ties go to
the lower key index, as a stable sort of the full row would order them; rows whose k-th score
is tied with scores outside the k are resolved exactly.
"""

from typing import Tuple

import numpy as np

DEFAULT_BLOCK_BYTES = 128 * 2**20


def block_rows(num_keys: int, itemsize: int, block_bytes: int = DEFAULT_BLOCK_BYTES) -> int:
    """How many query rows fit in one [rows, num_keys] similarity block of `block_bytes`."""
    return max(1, block_bytes // max(1, num_keys * itemsize))


def _order_candidates(scores: np.ndarray, indices: np.ndarray) -> Tuple[np.ndarray,
                                                                         np.ndarray]:
    """Sorts each row's candidates by descending score, then ascending index."""
    order = np.lexsort((indices, -scores), axis=-1)
    return np.take_along_axis(scores, order, -1), np.take_along_axis(indices, order, -1)


def _top_k_rows(similarity: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """Top-k of each row of a [rows, n] block: (scores [rows, k], indices int64 [rows, k])."""
    num_keys = similarity.shape[1]
    if k >= num_keys:
        indices = np.broadcast_to(np.arange(num_keys), similarity.shape)
        return _order_candidates(similarity, indices)
    indices = np.argpartition(similarity, num_keys - k, axis=1)[:, num_keys - k:]
    scores = np.take_along_axis(similarity, indices, 1)
    kth = scores.min(axis=1, keepdims=True)
    # argpartition picks an arbitrary member of a tie at the k-th score; redo those rows.
    tied = np.flatnonzero((similarity >= kth).sum(axis=1) > k)
    for row in tied:
        values = similarity[row]
        above = np.flatnonzero(values > kth[row, 0])
        at_kth = np.flatnonzero(values == kth[row, 0])[: k - above.size]
        indices[row] = np.concatenate([above, at_kth])
        scores[row] = values[indices[row]]
    return _order_candidates(scores, indices)


def top_k(queries: np.ndarray, keys: np.ndarray, k: int, *, exclude_self: bool = False,
          block_bytes: int = DEFAULT_BLOCK_BYTES) -> Tuple[np.ndarray, np.ndarray]:
    """The k keys with the highest inner product with each query.

    Inputs are used as given: pass L2-normalised rows (`cmlm_tf.vectors.unit_rows`) for cosine.

    Args:
        queries: float [n, dim].
        keys: float [m, dim], same dtype as `queries`.
        k: neighbours per query (at most m, or m - 1 with `exclude_self`).
        exclude_self: `queries` and `keys` are the same set; query i never returns key i.
        block_bytes: size of one [rows, m] similarity block; bounds the extra memory.

    Returns:
        scores [n, k] (the dtype of the inputs), indices int64 [n, k]; each row is sorted by
        descending score, ties by ascending key index.
    """
    queries, keys = np.asarray(queries), np.asarray(keys)
    if queries.ndim != 2 or keys.ndim != 2 or queries.shape[1] != keys.shape[1]:
        raise ValueError(f"queries {queries.shape} and keys {keys.shape} must be [n, dim] "
                         "matrices of the same width")
    if exclude_self and queries.shape[0] != keys.shape[0]:
        raise ValueError("exclude_self needs queries and keys to be the same set")
    available = keys.shape[0] - int(exclude_self)
    if not 1 <= k <= available:
        raise ValueError(f"k must be between 1 and {available}, got {k}")
    dtype = np.result_type(queries.dtype, keys.dtype)
    scores = np.empty([queries.shape[0], k], dtype)
    indices = np.empty([queries.shape[0], k], np.int64)
    rows = block_rows(keys.shape[0], dtype.itemsize, block_bytes)
    for start in range(0, queries.shape[0], rows):
        stop = min(start + rows, queries.shape[0])
        similarity = queries[start:stop] @ keys.T
        if exclude_self:
            local = np.arange(stop - start)
            similarity[local, start + local] = -np.inf
        scores[start:stop], indices[start:stop] = _top_k_rows(similarity, k)
    return scores, indices
