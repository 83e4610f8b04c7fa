"""Approximate k nearest neighbours by inner product, from an index, with exact scores.

An index over the keys (a faiss inverted file, or ScaNN's partition tree with asymmetric
hashing; both in the `scale` extra, `pip install -e ".[scale]"`) splits the keys into about
√m partitions, searches the `probes` partitions nearest each query with compressed codes
(4-bit product quantisation scanned in SIMD registers: faiss's fast scan, ScaNN's
asymmetric hashing) and proposes its `candidates` best keys. Their inner products with the
query are then computed again exactly, in the inputs' dtype, and the best k sorted as
`knn.top_k` sorts them. So every score returned is exact, and the only error an index can
make is to leave a true neighbour out. A query for which the index proposes fewer than k
keys is answered by the exact search (`knn.top_k`).

    index = ann.build_index(keys, backend="faiss")
    scores, indices = ann.top_k(queries, keys, k=4, index=index)

Inputs are used as given: pass L2-normalised rows for cosine. Recall depends on the data:
real sentence embeddings cluster, so a partition holds most of a query's neighbours; on
isotropic random vectors no partition does (docs/results.md, "Mining at corpus scale").
"""

import dataclasses
import math
import os
from typing import Optional, Tuple

import numpy as np

from cmlm_tf.evaluation import knn

BACKENDS = ("faiss", "scann")
# Candidates re-scored exactly per query, and partitions searched per query, by default:
# chosen on the measurements of docs/results.md ("Mining at corpus scale").
DEFAULT_CANDIDATES = 32
DEFAULT_PROBES = 32
# `calibrate_probes`: the recall@k to reach on a sample of queries, and the sample's size.
# At 0.985 an index kept 98.1 % of the exact search's pairs on held-out text, short of the
# 99 % mining asks for; hence 0.995 (docs/scale.md, "The index").
DEFAULT_RECALL = 0.995
CALIBRATION_SAMPLE = 1000
# The fewest keys an index is built on: the 4-bit codes have 16 centroids per block, and
# training them needs a key for each (faiss refuses fewer).
MIN_KEYS = 2 ** 4
# Training samples per partition centroid (faiss warns below 39).
_SAMPLES_PER_LIST = 64


class MissingBackendError(ImportError):
    """The index library is not installed; the message says which extra brings it."""


def _import_backend(backend: str):
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    try:
        if backend == "faiss":
            import faiss

            return faiss
        import scann

        return scann
    except ImportError:
        package = "faiss-cpu" if backend == "faiss" else "scann"
        raise MissingBackendError(
            f"the {backend} index needs the {package} package: pip install -e \".[scale]\" "
            f"(or pip install {package}), or use --index exact") from None


def check_backend(backend: str) -> None:
    """Raises `MissingBackendError` (naming the package) when `backend` is not installed."""
    _import_backend(backend)


def default_partitions(num_keys: int) -> int:
    """Partitions (IVF lists, ScaNN leaves) for `num_keys` keys: about √m, at least 1, and
    at least 64 keys each to train the centroids on."""
    return int(max(1, min(num_keys // _SAMPLES_PER_LIST, round(math.sqrt(num_keys)))))


@dataclasses.dataclass
class Index:
    """A built index over `num_keys` keys of width `dim`.

    Attributes:
        backend: `faiss` or `scann`.
        partitions: how many partitions the keys are split into.
        handle: the library's index object (`faiss.Index` or a ScaNN searcher).
    """

    backend: str
    num_keys: int
    dim: int
    partitions: int
    handle: object

    def candidates(self, queries: np.ndarray, count: int,
                   probes: int = DEFAULT_PROBES) -> np.ndarray:
        """int64 [n, count]: the keys the index proposes for each query, best first by its
        compressed scores (-1: none), from the `probes` nearest partitions."""
        count = min(count, self.num_keys)
        probes = max(1, min(self.partitions, probes))
        queries = np.ascontiguousarray(queries, np.float32)
        if self.backend == "faiss":
            self.handle.nprobe = probes
            _, ids = self.handle.search(queries, count)
            return ids.astype(np.int64, copy=False)
        ids, _ = self.handle.search_batched_parallel(
            queries, final_num_neighbors=count,
            leaves_to_search=probes)
        ids = np.asarray(ids, np.int64)
        if ids.shape[1] < count:  # ScaNN returns fewer columns when it finds fewer
            ids = np.pad(ids, ((0, 0), (0, count - ids.shape[1])), constant_values=-1)
        return ids

    def save(self, path: str) -> None:
        """Writes the index to `path` (a file for faiss, a folder for ScaNN)."""
        if self.backend == "faiss":
            _import_backend("faiss").write_index(self.handle, path)
        else:
            os.makedirs(path, exist_ok=True)
            self.handle.serialize(path)
        with open(_sidecar(path, self.backend), "w", encoding="utf-8") as f:
            f.write(f"{self.num_keys} {self.dim} {self.partitions}\n")


def _sidecar(path: str, backend: str) -> str:
    return os.path.join(path, "cmlm_tf_index.txt") if backend == "scann" else path + ".txt"


def load_index(path: str, backend: str) -> Index:
    """Reads an index written by `Index.save`."""
    library = _import_backend(backend)
    with open(_sidecar(path, backend), encoding="utf-8") as f:
        num_keys, dim, partitions = (int(x) for x in f.read().split())
    if backend == "faiss":
        handle = library.read_index(path)
    else:
        handle = library.scann_ops_pybind.load_searcher(path)
    return Index(backend, num_keys, dim, partitions, handle)


def build_index(keys: np.ndarray, backend: str = "faiss", partitions: Optional[int] = None,
                seed: int = 0) -> Index:
    """An index over float [m, dim] keys (inner product).

    faiss: an inverted file (`IndexIVFPQFastScan`: 4-bit codes of 2 dimensions each) whose
    centroids are trained with 10 k-means iterations on up to 64 keys per partition. ScaNN:
    a partition tree with anisotropic asymmetric hashing (2 dimensions per block, threshold
    0.2), as its documentation recommends for inner product. Both keep only codes: `top_k`
    re-scores their candidates on the float keys.

    Args:
        keys: float [m, dim].
        backend: `faiss` or `scann`.
        partitions: IVF lists / tree leaves (default `default_partitions(m)`).
        seed: seeds the training sample and k-means.
    """
    library = _import_backend(backend)
    keys = np.ascontiguousarray(keys, np.float32)
    if keys.ndim != 2 or keys.shape[0] < MIN_KEYS:
        raise ValueError(f"keys must be a [m, dim] matrix of at least {MIN_KEYS} rows, got "
                         f"shape {keys.shape}")
    num_keys, dim = keys.shape
    partitions = partitions or default_partitions(num_keys)
    if not 1 <= partitions <= num_keys:
        raise ValueError(f"partitions must be between 1 and {num_keys}, got {partitions}")
    rng = np.random.default_rng(seed)
    sample_size = min(num_keys, partitions * _SAMPLES_PER_LIST)
    sample = keys if sample_size == num_keys else \
        keys[np.sort(rng.choice(num_keys, sample_size, replace=False))]
    if backend == "faiss":
        quantizer = library.IndexFlatIP(dim)
        handle = library.IndexIVFPQFastScan(quantizer, dim, partitions,
                                            dim // 2 if dim % 2 == 0 else dim, 4,
                                            library.METRIC_INNER_PRODUCT)
        handle.cp.seed = seed
        handle.cp.niter = 10
        handle.train(sample)
        handle.add(keys)
    else:
        builder = library.scann_ops_pybind.builder(keys, 1, "dot_product")
        if partitions > 1:
            builder = builder.tree(num_leaves=partitions, num_leaves_to_search=1,
                                   training_sample_size=sample_size)
        handle = builder.score_ah(2, anisotropic_quantization_threshold=0.2).build()
    return Index(backend, num_keys, dim, partitions, handle)


def rescore(queries: np.ndarray, keys: np.ndarray, candidate_ids: np.ndarray,
            k: int) -> Tuple[np.ndarray, np.ndarray]:
    """The best k of each query's candidates by exact inner product.

    Args:
        queries: float [n, dim]; keys: float [m, dim].
        candidate_ids: int64 [n, c], key indices; -1 marks an empty slot. A key proposed
            twice counts once.

    Returns:
        scores [n, k] in the inputs' dtype and indices int64 [n, k], each row sorted by
        descending score, ties by ascending index; rows with fewer than k distinct
        candidates have -inf scores and index -1 in the slots left over.
    """
    dtype = np.result_type(queries.dtype, keys.dtype)
    ids = np.sort(candidate_ids, axis=1)
    invalid = (ids < 0) | np.concatenate(
        [np.zeros((ids.shape[0], 1), bool), ids[:, 1:] == ids[:, :-1]], axis=1)
    safe = np.where(invalid, 0, ids)
    scores = np.einsum("nd,ncd->nc", queries, keys[safe]).astype(dtype, copy=False)
    scores[invalid] = -np.inf
    ids = np.where(invalid, np.iinfo(np.int64).max, ids)
    order = np.lexsort((ids, -scores), axis=-1)[:, :k]
    best_ids = np.take_along_axis(ids, order, 1)
    best_ids[best_ids == np.iinfo(np.int64).max] = -1
    return np.take_along_axis(scores, order, 1), best_ids


def rescore_shortlists(queries: np.ndarray, keys: np.ndarray, ids: np.ndarray, k: int,
                       *, block_rows: int = 4096) -> Tuple[np.ndarray, np.ndarray]:
    """`rescore` of every query's shortlist `ids` (int64 [n, c]; -1 or ids past the keys:
    empty), in blocks of `block_rows` queries so the gathered keys of a block stay in cache.
    A query left with fewer than k distinct keys is searched exactly (`knn.top_k`)."""
    ids = np.where(ids < keys.shape[0], ids, -1)
    scores = np.empty([queries.shape[0], k], np.result_type(queries.dtype, keys.dtype))
    indices = np.empty([queries.shape[0], k], np.int64)
    for start in range(0, queries.shape[0], block_rows):
        stop = start + block_rows
        scores[start:stop], indices[start:stop] = rescore(
            queries[start:stop], keys, ids[start:stop], k)
    short = np.flatnonzero(indices[:, -1] < 0)
    if short.size:
        scores[short], indices[short] = knn.top_k(queries[short], keys, k)
    return scores, indices


def top_k(queries: np.ndarray, keys: np.ndarray, k: int, *, index: Optional[Index] = None,
          candidates: int = DEFAULT_CANDIDATES, probes: int = DEFAULT_PROBES,
          backend: str = "faiss", block_rows: int = 4096) -> Tuple[np.ndarray, np.ndarray]:
    """Approximate `knn.top_k(queries, keys, k)`: the same contract, exact scores.

    Args:
        queries: float [n, dim]; keys: float [m, dim], same width.
        k: neighbours per query, 1 ≤ k ≤ m.
        index: an index over `keys` (`build_index`); built here with `backend` if None.
        candidates: keys the index proposes per query, re-scored exactly (at least k).
        probes: partitions searched per query (more: slower, fewer neighbours missed).
        block_rows: queries searched and re-scored at a time (bounds the gathered keys).

    Returns:
        scores [n, k], indices int64 [n, k], each row by descending score (ties: lower index).
    """
    queries, keys = np.asarray(queries), np.asarray(keys)
    if queries.ndim != 2 or keys.ndim != 2 or queries.shape[1] != keys.shape[1]:
        raise ValueError(f"queries {queries.shape} and keys {keys.shape} must be [n, dim] "
                         "matrices of the same width")
    if not 1 <= k <= keys.shape[0]:
        raise ValueError(f"k must be between 1 and {keys.shape[0]}, got {k}")
    if probes < 1:
        raise ValueError(f"probes must be positive, got {probes}")
    if index is None:
        index = build_index(keys, backend)
    if (index.num_keys, index.dim) != keys.shape:
        raise ValueError(f"the index covers {index.num_keys} keys of width {index.dim}, "
                         f"the keys are {keys.shape}")
    ids = np.concatenate([index.candidates(queries[start:start + block_rows],
                                           max(k, candidates), probes)
                          for start in range(0, queries.shape[0], block_rows)])
    return rescore_shortlists(queries, keys, ids, k, block_rows=block_rows)


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean share of each row's exact k neighbours that `found` [n, k] also holds."""
    k = exact.shape[1]
    return float(np.mean([len(set(a.tolist()) & set(b.tolist())) / k
                          for a, b in zip(found, exact)]))


def _sample_rows(count: int, sample: int, seed: int) -> np.ndarray:
    """Sorted indices of a random sample of `sample` of `count` rows (all when fewer)."""
    rows = np.random.default_rng(seed).choice(count, min(sample, count), replace=False)
    return np.sort(rows)


def sampled_recall(queries: np.ndarray, keys: np.ndarray, found: np.ndarray,
                   *, sample: int = CALIBRATION_SAMPLE, seed: int = 0) -> Tuple[float, int]:
    """(recall@k, queries sampled) of an approximate search's answer `found` (int64 [n, k],
    the neighbours of every query among `keys`) on a random sample of the queries, against
    the exact search (`knn.top_k`) of that sample."""
    rows = _sample_rows(queries.shape[0], sample, seed)
    _, exact = knn.top_k(queries[rows], keys, found.shape[1])
    return recall_at_k(found[rows], exact), len(rows)


def keep_recall(src: np.ndarray, tgt: np.ndarray, found, target: float, *, say,
                name: str = "ann"):
    """`found`, both directions of an approximate mining search (((cosines, indices) of each
    source's nearest targets), (the same of each target's nearest sources)), once its
    recall@k on a sample of each direction's queries reaches `target` against the exact
    search (`sampled_recall`); else both directions searched again exactly, in float32
    (`knn.top_k`).

    Whatever the search (`name`: `flat`, whose bfloat16 rounding reorders a weak model's
    close cosines; `ann`, whose codes may not tell them apart at all), the measure says what
    it kept. `say` gets one line with the recall reached, and whether the exact search
    replaced the approximate one.
    """
    (forward, backward), k = found, found[0][1].shape[1]
    recalls = [sampled_recall(src, tgt, forward[1]), sampled_recall(tgt, src, backward[1])]
    recall, sampled = min(value for value, _ in recalls), sum(count for _, count in recalls)
    measured = (f"{name}: recall@{k} {recall:.4f} on {sampled:,} sampled queries against the "
                "exact search")
    if recall >= target:
        say(f"{measured} (target {target})")
        return found
    say(f"{measured}, below the target {target}: searching exactly (float32) instead")
    return (knn.top_k(src, tgt, forward[1].shape[1]),
            knn.top_k(tgt, src, backward[1].shape[1]))


def calibrate_probes(queries: np.ndarray, keys: np.ndarray, k: int, index: Index,
                     *, target: float = DEFAULT_RECALL, probes: int = DEFAULT_PROBES,
                     candidates: int = DEFAULT_CANDIDATES, sample: int = CALIBRATION_SAMPLE,
                     seed: int = 0) -> Tuple[int, float]:
    """The fewest probes, from `probes` growing by half up to every partition, whose recall@k
    on a random sample of the queries reaches `target`, measured against the exact search.

    How many partitions hold a query's neighbours depends on the data: a few on clustered
    sentence embeddings, most of them on isotropic vectors. Measuring on a sample keeps the
    recall asked for on either, at the cost of an exact search of `sample` queries.

    Returns:
        (probes, the sample's recall@k with them).
    """
    if not 0 < target <= 1:
        raise ValueError(f"target recall must be in (0, 1], got {target}")
    chosen = queries[_sample_rows(queries.shape[0], sample, seed)]
    _, exact = knn.top_k(chosen, keys, k)
    probes = max(1, min(probes, index.partitions))
    while True:
        _, found = top_k(chosen, keys, k, index=index, probes=probes, candidates=candidates)
        recall = recall_at_k(found, exact)
        if recall >= target or probes >= index.partitions:
            return probes, recall
        probes = min(index.partitions, max(probes + 1, probes * 3 // 2))
