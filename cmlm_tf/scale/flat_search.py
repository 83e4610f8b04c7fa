"""k nearest neighbours by scoring every pair in low precision, then the best few exactly.

Mining's cost is the product of two [n, dim] × [dim, m] matrices. On a CPU that multiplies
bfloat16 natively (AVX512_BF16, AMX), TensorFlow's oneDNN matmul does that several times
faster than float32 BLAS; elsewhere the product stays float32. From each block of the
product:

- each query's row is cut into chunks of `CHUNK` keys; the `CHUNKS` chunks with the highest
  maximum hold every key among the row's best `CHUNKS` (a key outside them has `CHUNKS`
  higher chunk maxima above it), and their keys' scores give the row's `shortlist`;
- the same is done down each key's column, per block, and merged across blocks, so the
  backward direction comes from the same product (`top_k_both`): no second matmul.

The maxima run as one XLA-compiled reduction per block (TensorFlow's own kernels convert
bfloat16 element by element and take longer than the matmul). Each shortlist is then
re-scored exactly in the inputs' float32 (`ann.rescore`), so every score returned is exact,
and a true neighbour is missed only if rounding to bfloat16 pushes it below the best
`CHUNKS` of its row: the rounding error of a cosine is about 1e-3, the gap between the 4th
and the 8th neighbour is usually ten times that (docs/results.md, "Mining at corpus scale").
Usually, not always: a weak model's cosines lie closer together, so mining measures what the
product kept (`ann.keep_recall`: recall@k on a sample, against the exact search) and
searches exactly when it kept too little.

    forward, backward = flat_search.top_k_both(src, tgt, k=4)
    scores, indices = flat_search.top_k(queries, keys, k=4)

Inputs are padded to whole chunks, and to at least `CHUNKS` of them: with that few keys every
key is on the shortlist. k above `MAX_K` goes to the exact search (`knn.top_k`), as does a
query left with fewer than k keys on its shortlist.
"""

from typing import Callable, Optional, Tuple

import numpy as np

from cmlm_tf.evaluation import ann, knn
from cmlm_tf.runtime import host

# Keys per chunk of a row (queries per chunk of a column), and chunks kept per row / column.
CHUNK = 8
CHUNKS = 8
# The shortlist re-scored exactly: at least SHORTLIST keys, and 4k.
SHORTLIST = 16
MAX_K = CHUNK * CHUNKS // 4
# One block of the product, [rows, m] in the compute dtype: the memory the search adds.
DEFAULT_BLOCK_BYTES = 1024 * 2**20
PRECISIONS = ("auto", "bfloat16", "float32")

Neighbours = Tuple[np.ndarray, np.ndarray]
# report(queries done, queries in all), after each block.
Report = Callable[[int, int], None]


def compute_dtype(precision: str = "auto") -> str:
    """`bfloat16` or `float32` for `precision` (auto: bfloat16 where the CPU multiplies it
    natively, else float32, which TensorFlow would otherwise emulate slowly)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    return "bfloat16" if host.native_bfloat16() else "float32"


def shortlist_size(k: int) -> int:
    return min(CHUNK * CHUNKS, max(SHORTLIST, 4 * k))


def _check(queries: np.ndarray, keys: np.ndarray, k: int) -> None:
    if queries.ndim != 2 or keys.ndim != 2 or queries.shape[1] != keys.shape[1]:
        raise ValueError(f"queries {queries.shape} and keys {keys.shape} must be [n, dim] "
                         "matrices of the same width")
    if not 1 <= k <= keys.shape[0]:
        raise ValueError(f"k must be between 1 and {keys.shape[0]}, got {k}")


def _padded(rows: int) -> int:
    """Rows padded to whole chunks, and to at least `CHUNKS` chunks."""
    return max(CHUNK * CHUNKS, -(-rows // CHUNK) * CHUNK)


def _block_rows(num_keys: int, itemsize: int, block_bytes: int) -> int:
    rows = block_bytes // max(1, _padded(num_keys) * itemsize)
    return _padded(rows // CHUNK * CHUNK)


class _Blocks:
    """The TensorFlow side: the keys in the compute dtype and the per-block functions."""

    def __init__(self, keys: np.ndarray, dtype: str, shortlist: int):
        import tensorflow as tf

        self.tf = tf
        self.num_keys = keys.shape[0]
        padded = _padded(self.num_keys)
        self.keys = tf.cast(np.pad(keys, ((0, padded - self.num_keys), (0, 0))), dtype)
        self.dtype = dtype
        self.shortlist = shortlist
        self.rows_maxima = tf.function(_rows_maxima, jit_compile=True)
        self.both_maxima = tf.function(_both_maxima, jit_compile=True)
        self.forward = tf.function(self._forward)
        self.both = tf.function(self._both)

    def queries(self, block: np.ndarray):
        rows = _padded(block.shape[0])
        return self.tf.cast(np.pad(block, ((0, rows - block.shape[0]), (0, 0))), self.dtype)

    def _row_shortlist(self, scores, row_maxima):
        """[rows, shortlist] key ids: the best of the keys in each row's best chunks."""
        tf = self.tf
        rows = tf.shape(scores)[0]
        _, chunks = tf.math.top_k(row_maxima, CHUNKS)
        chunked = tf.reshape(scores, [rows, -1, CHUNK])
        values = tf.reshape(tf.gather(chunked, chunks, axis=1, batch_dims=1),
                            [rows, CHUNKS * CHUNK])
        ids = _chunk_members(tf, chunks)
        # The last chunk's padding keys are never proposed.
        values = tf.where(ids < self.num_keys, tf.cast(values, tf.float32), -np.inf)
        _, best = tf.math.top_k(values, self.shortlist)
        return tf.gather(ids, best, batch_dims=1)

    def _forward(self, queries):
        scores = self.tf.matmul(queries, self.keys, transpose_b=True)
        return self._row_shortlist(scores, self.rows_maxima(scores))

    def _both(self, queries, valid_rows, offset, column_values, *, column_ids):
        tf = self.tf
        scores = tf.matmul(queries, self.keys, transpose_b=True)
        row_maxima, column_maxima = self.both_maxima(scores)
        forward = self._row_shortlist(scores, row_maxima)
        columns = tf.shape(scores)[1]
        _, chunks = tf.math.top_k(tf.transpose(column_maxima), CHUNKS)  # [m, CHUNKS]
        rows = _chunk_members(tf, chunks)
        cols = tf.broadcast_to(tf.range(columns)[:, None], [columns, CHUNKS * CHUNK])
        values = tf.cast(tf.gather_nd(scores, tf.stack([rows, cols], -1)), tf.float32)
        values = tf.where(rows < valid_rows, values, -np.inf)  # padding queries
        merged_values = tf.concat([column_values, values], 1)
        merged_ids = tf.concat([column_ids, rows + offset], 1)
        best_values, best = tf.math.top_k(merged_values, self.shortlist)
        return forward, best_values, tf.gather(merged_ids, best, batch_dims=1)


def _chunk_members(tf, chunks):
    """[r, CHUNKS] chunk numbers -> [r, CHUNKS * CHUNK] the indices they cover."""
    members = chunks[:, :, None] * CHUNK + tf.range(CHUNK)[None, None, :]
    return tf.reshape(members, [tf.shape(chunks)[0], CHUNKS * CHUNK])


def _rows_maxima(scores):
    import tensorflow as tf

    return tf.reduce_max(tf.reshape(scores, [tf.shape(scores)[0], -1, CHUNK]), -1)


def _both_maxima(scores):
    import tensorflow as tf

    return (_rows_maxima(scores),
            tf.reduce_max(tf.reshape(scores, [-1, CHUNK, tf.shape(scores)[1]]), 1))


class FlatIndex:
    """The keys, ready to be searched in blocks of queries: built once, searched by many
    shards (`cmlm_tf.scale.knn`)."""

    def __init__(self, keys: np.ndarray, k: int, precision: str = "auto",
                 block_bytes: int = DEFAULT_BLOCK_BYTES):
        self.keys = np.asarray(keys, np.float32)
        self.k = k
        if not 1 <= k <= self.keys.shape[0]:
            raise ValueError(f"k must be between 1 and {self.keys.shape[0]}, got {k}")
        self.exact = k > MAX_K
        if self.exact:
            return
        dtype = compute_dtype(precision)
        self._blocks = _Blocks(self.keys, dtype, shortlist_size(k))
        self._rows = _block_rows(self.keys.shape[0], 2 if dtype == "bfloat16" else 4,
                                 block_bytes)

    def search(self, queries: np.ndarray, report: Optional[Report] = None) -> Neighbours:
        """`top_k(queries, keys, k)` against these keys."""
        queries = np.asarray(queries, np.float32)
        _check(queries, self.keys, self.k)
        if self.exact:
            return knn.top_k(queries, self.keys, self.k)
        blocks = self._blocks
        ids = np.empty([queries.shape[0], blocks.shortlist], np.int64)
        for start in range(0, queries.shape[0], self._rows):
            block = queries[start:start + self._rows]
            ids[start:start + len(block)] = blocks.forward(blocks.queries(block)).numpy()[
                :len(block)]
            if report is not None:
                report(start + len(block), queries.shape[0])
        return ann.rescore_shortlists(queries, self.keys, ids, self.k)


def top_k(queries: np.ndarray, keys: np.ndarray, k: int, *, precision: str = "auto",
          block_bytes: int = DEFAULT_BLOCK_BYTES,
          report: Optional[Report] = None) -> Neighbours:
    """`knn.top_k(queries, keys, k)` by a low-precision product and an exact re-scoring.

    Args:
        queries: float32 [n, dim]; keys: float32 [m, dim]; L2-normalised rows for cosine.
        k: neighbours per query, 1 ≤ k ≤ m.
        precision: `auto`, `bfloat16` or `float32` (see `compute_dtype`).
        block_bytes: the size of one block of the product.
        report: called with (queries done, all queries) after each block.

    Returns:
        scores [n, k] (exact, float32), indices int64 [n, k], each row by descending score,
        ties by ascending key index.
    """
    return FlatIndex(keys, k, precision, block_bytes).search(queries, report)


def top_k_both(src: np.ndarray, tgt: np.ndarray, k: int, *, precision: str = "auto",
               block_bytes: int = DEFAULT_BLOCK_BYTES,
               report: Optional[Report] = None) -> Tuple[Neighbours, Neighbours]:
    """Both directions of mining's k-NN from one product: (each source's k nearest
    targets, each target's k nearest sources), as `top_k` would return them.

    `report(done, all)` counts the queries of both directions: a block of sources answers
    its sources and advances the targets' columns.
    """
    src, tgt = np.asarray(src, np.float32), np.asarray(tgt, np.float32)
    _check(src, tgt, min(k, tgt.shape[0]))
    _check(tgt, src, min(k, src.shape[0]))
    if k > MAX_K:
        return (knn.top_k(src, tgt, min(k, tgt.shape[0])),
                knn.top_k(tgt, src, min(k, src.shape[0])))
    dtype = compute_dtype(precision)
    blocks = _Blocks(tgt, dtype, shortlist_size(k))
    tf = blocks.tf
    num_src, num_tgt = src.shape[0], tgt.shape[0]
    rows = _block_rows(num_tgt, 2 if dtype == "bfloat16" else 4, block_bytes)
    forward = np.empty([num_src, blocks.shortlist], np.int64)
    column_values = tf.fill([_padded(num_tgt), blocks.shortlist], -np.inf)
    column_ids = tf.fill([_padded(num_tgt), blocks.shortlist], -1)
    for start in range(0, num_src, rows):
        block = src[start:start + rows]
        found, column_values, column_ids = blocks.both(
            blocks.queries(block), tf.constant(len(block)), tf.constant(start),
            column_values, column_ids=column_ids)
        forward[start:start + len(block)] = found.numpy()[:len(block)]
        if report is not None:
            done = start + len(block)
            report(done + done * num_tgt // num_src, num_src + num_tgt)
    backward = column_ids.numpy()[:num_tgt].astype(np.int64)
    return (ann.rescore_shortlists(src, tgt, forward, k),
            ann.rescore_shortlists(tgt, src, backward, k))
