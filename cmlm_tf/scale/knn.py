"""The k-NN queries of bitext mining as an Apache Beam pipeline.

Mining needs each source's k nearest targets (forward) and each target's k nearest sources
(backward). This process writes both sides' vectors, and the index over each side
(`cmlm_tf.evaluation.ann`, or none for the exact search), to a work folder. The pipeline
then splits the queries of both directions into shards of `shard_rows` rows; each worker
loads the keys and the index once (`apache_beam.utils.shared`), searches its shards and
writes each shard's neighbours to a file of its own, under a temporary name renamed into
place, so a retried shard rewrites the same file. This process reads the files back:
`search_both_sides` returns what `knn.top_k` or `ann.top_k` would have returned here.

The work folder must be readable by every worker: a local folder for the DirectRunner, a
`gs://` (or other shared) folder for Dataflow, Flink or Spark. Scoring and the 1-to-1 step
(`cmlm_tf.evaluation.mining`) run in this process: they are O(N·k).
"""

import dataclasses
import io
import os
import shutil
import tempfile
import uuid
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.utils import shared

from cmlm_tf.evaluation import ann, knn
from cmlm_tf.runtime import host
from cmlm_tf.scale import flat_search, folders, pipeline_progress
from cmlm_tf.scale import options as beam_options

DIRECTIONS = ("forward", "backward")
DEFAULT_SHARD_ROWS = 16384


@dataclasses.dataclass(frozen=True)
class SearchSpec:
    """How the workers search: `index` is `exact`, `flat` or `ann` (then `backend`, `candidates`
    and `probes` as in `ann.top_k`; probes None: the fewest that reach `recall` on a sample,
    `ann.calibrate_probes`, chosen once per direction before the pipeline runs); `threads`
    caps each worker's BLAS/OpenMP threads (None: leave the library's default)."""

    index: str = "ann"
    backend: str = "faiss"
    candidates: int = ann.DEFAULT_CANDIDATES
    probes: Optional[int] = ann.DEFAULT_PROBES
    recall: float = ann.DEFAULT_RECALL
    threads: Optional[int] = None


def _write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` whole: under a temporary name, then renamed."""
    temp = f"{path}.tmp-{uuid.uuid4().hex}"
    if not folders.is_remote(path):
        with open(temp, "wb") as f:
            f.write(data)
        os.replace(temp, path)
        return
    with FileSystems.create(temp) as f:
        f.write(data)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([temp], [path])


def _read_array(path: str, *, mmap: bool = True) -> np.ndarray:
    if not folders.is_remote(path):
        return np.load(path, mmap_mode="r" if mmap else None)
    with FileSystems.open(path) as f:
        return np.load(io.BytesIO(f.read()))


def _local_copy(path: str) -> Tuple[str, Optional[str]]:
    """A local path for `path` (a remote file is copied to a temporary one, returned too)."""
    if not folders.is_remote(path):
        return path, None

    handle, local = tempfile.mkstemp(suffix=os.path.basename(path))
    with os.fdopen(handle, "wb") as out, FileSystems.open(path) as f:
        out.write(f.read())
    return local, local


@dataclasses.dataclass
class _Side:
    """What a worker holds for one direction: the keys and their index (None: exact; a
    `flat_search.FlatIndex` for flat, made on the worker's first shard of that direction)."""

    keys: np.ndarray
    index: Optional[ann.Index]
    flat: Optional[object] = None


class _Loaded:
    """The work folder's arrays and indexes in one worker (a `shared.Shared` value must
    allow weak references, which a dict does not)."""

    def __init__(self, sides):
        self.sides = sides


def _load_side(work_dir: str, direction: str, spec: SearchSpec) -> _Side:
    keys = _read_array(folders.join(work_dir, f"{_key_side(direction)}.npy"))
    if spec.index != "ann":
        return _Side(keys, None)
    local, temporary = _local_copy(folders.join(work_dir, f"index-{direction}"))
    if temporary is not None:  # the sidecar travels with the index
        sidecar, _ = _local_copy(folders.join(work_dir, f"index-{direction}.txt"))
        os.replace(sidecar, local + ".txt")
    index = ann.load_index(local, spec.backend)
    return _Side(keys, index)


def _key_side(direction: str) -> str:
    return "tgt" if direction == "forward" else "src"


def _query_side(direction: str) -> str:
    return "src" if direction == "forward" else "tgt"


def _result_name(direction: str, start: int) -> str:
    return f"neighbours-{direction}-{start:012d}.npz"


class SearchShard(beam.DoFn):
    """Searches one shard `(direction, start, stop)` of queries and writes its neighbours
    (`cosines`, `indices`, float32 / int64 [stop - start, k]) to the work folder."""

    def __init__(self, work_dir: str, k: int, spec: SearchSpec, handle: shared.Shared,
                 *, probes: Optional[Dict[str, int]] = None):
        self._work_dir = work_dir
        self._k = k
        self._spec = spec
        self._probes = probes or {}
        self._handle = handle
        self._loaded = None
        self._searched = beam.metrics.Metrics.counter("cmlm_tf", "queries_searched")

    def setup(self):
        if self._spec.threads:
            _limit_threads(self._spec.threads, self._spec)

        def load():
            return _Loaded({direction: _load_side(self._work_dir, direction, self._spec)
                            for direction in DIRECTIONS})

        self._loaded = self._handle.acquire(load)

    def process(self, shard: Tuple[str, int, int]) -> Iterator[str]:
        direction, start, stop = shard
        queries = _read_array(folders.join(self._work_dir, f"{_query_side(direction)}.npy"))
        queries = np.asarray(queries[start:stop], np.float32)
        side = self._loaded.sides[direction]
        k = min(self._k, side.keys.shape[0])
        if self._spec.index == "flat":
            if side.flat is None:
                side.flat = flat_search.FlatIndex(side.keys, k)
            cosines, indices = side.flat.search(queries)
        elif side.index is None:
            cosines, indices = knn.top_k(queries, side.keys, k)
        else:
            cosines, indices = ann.top_k(
                queries, side.keys, k, index=side.index, candidates=self._spec.candidates,
                probes=self._probes.get(direction, self._spec.probes or ann.DEFAULT_PROBES))
        buffer = io.BytesIO()
        np.savez(buffer, cosines=cosines, indices=indices)
        path = folders.join(self._work_dir, _result_name(direction, start))
        _write_bytes(path, buffer.getvalue())
        self._searched.inc(stop - start)
        yield _result_name(direction, start)


def _limit_threads(threads: int, spec: SearchSpec) -> None:
    """Caps the worker's threads (faiss's OpenMP, TensorFlow's pools for the flat product)
    so workers on one machine share its cores."""
    if spec.index == "flat":
        host.apply_thread_settings(threads, 1)
        return
    if spec.backend == "faiss":
        try:
            import faiss
        except ImportError:
            return
        faiss.omp_set_num_threads(threads)


def _ranges(rows: int, shard_rows: int) -> List[Tuple[int, int]]:
    if shard_rows < 1:
        raise ValueError(f"shard_rows must be positive, got {shard_rows}")
    return [(start, min(start + shard_rows, rows)) for start in range(0, rows, shard_rows)]


def shards(num_src: int, num_tgt: int, shard_rows: int) -> List[Tuple[str, int, int]]:
    """The `(direction, start, stop)` query shards of both directions."""
    return [(direction, start, stop)
            for direction, rows in (("forward", num_src), ("backward", num_tgt))
            for start, stop in _ranges(rows, shard_rows)]


def prepare(src: np.ndarray, tgt: np.ndarray, work_dir: str, spec: SearchSpec, *, k: int = 4,
            seed: int = 0) -> Dict[str, int]:
    """Writes both sides' vectors and, for `ann`, both indexes into `work_dir`; returns the
    probes of each direction (`spec.probes`, or calibrated when None; empty for exact)."""
    if not folders.is_remote(work_dir):
        os.makedirs(work_dir, exist_ok=True)
    for name, vectors in (("src", src), ("tgt", tgt)):
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(vectors, np.float32))
        _write_bytes(folders.join(work_dir, f"{name}.npy"), buffer.getvalue())
    if spec.index != "ann":
        return {}

    probes = {}
    with tempfile.TemporaryDirectory() as local:
        for direction in DIRECTIONS:
            queries, keys = (src, tgt) if direction == "forward" else (tgt, src)
            path = os.path.join(local, f"index-{direction}")
            index = ann.build_index(keys, spec.backend, seed=seed)
            probes[direction] = spec.probes
            if spec.probes is None:
                probes[direction], _ = ann.calibrate_probes(
                    queries, keys, min(k, len(keys)), index, target=spec.recall,
                    candidates=spec.candidates, seed=seed)
            index.save(path)
            for name in (f"index-{direction}", f"index-{direction}.txt"):
                with open(os.path.join(local, name), "rb") as f:
                    _write_bytes(folders.join(work_dir, name), f.read())
    return probes


def build_pipeline(pipeline: beam.Pipeline, work_dir: str, num_src: int, num_tgt: int, *, k: int,
                   spec: SearchSpec, shard_rows: int = DEFAULT_SHARD_ROWS,
                   probes: Optional[Dict[str, int]] = None):
    """Adds the sharded search to `pipeline`; returns the PCollection of result names."""
    return (pipeline
            | "Shards" >> beam.Create(shards(num_src, num_tgt, shard_rows))
            | "Spread" >> beam.Reshuffle()
            | "Search" >> beam.ParDo(SearchShard(work_dir, k, spec, shared.Shared(),
                                                 probes=probes)))


def collect(work_dir: str, num_src: int, num_tgt: int, k: int,
            *, shard_rows: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Reads every shard's neighbours back: (forward cosines, forward indices, backward
    cosines, backward indices), refusing a missing shard."""
    arrays = {}
    for direction, rows, keys in (("forward", num_src, num_tgt),
                                  ("backward", num_tgt, num_src)):
        width = min(k, keys)
        cosines = np.empty([rows, width], np.float32)
        indices = np.empty([rows, width], np.int64)
        for start, stop in _ranges(rows, shard_rows):
            path = folders.join(work_dir, _result_name(direction, start))
            if not FileSystems.exists(path):
                raise RuntimeError(f"{path}: missing; the k-NN pipeline did not search "
                                   f"{direction} queries {start}-{stop}")
            with FileSystems.open(path) as f:
                result = np.load(io.BytesIO(f.read()))
                cosines[start:stop], indices[start:stop] = result["cosines"], result["indices"]
        arrays[direction] = (cosines, indices)
    return arrays["forward"] + arrays["backward"]


def search_both_sides(src: np.ndarray, tgt: np.ndarray, k: int, spec: SearchSpec,
                      *, work_dir: str, options: Sequence[str] = (),
                      shard_rows: int = DEFAULT_SHARD_ROWS, seed: int = 0,
                      own_prefix: Optional[str] = None
                      ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Forward and backward k-NN of two L2-normalised sets of vectors, on Beam.

    Args:
        src: float [n_src, dim]; tgt: float [n_tgt, dim].
        k: neighbours per query (at most the other side's size).
        spec: the search (`exact` or `ann`).
        work_dir: a folder every worker can read; it is removed afterwards when local.
        options: Beam pipeline options (`--runner=...`; none: worker processes here,
            `cmlm_tf.scale.options.make_options`). Local workers share the cores: each
            gets its share of threads unless `spec.threads` says otherwise.
        own_prefix: the command's own lines start with it: while local workers run, every
            other line on stderr (the workers' included) goes to a log file, kept and named
            only when the pipeline fails (`pipeline_progress.run_pipeline`).

    Returns:
        forward cosines, forward indices [n_src, k]; backward cosines, indices [n_tgt, k].
    """
    pipeline_options = beam_options.make_options(options)
    if spec.threads is None:
        spec = dataclasses.replace(spec, threads=beam_options.worker_threads(pipeline_options)[0])
    try:
        probes = prepare(src, tgt, work_dir, spec, k=k, seed=seed)
        pipeline = beam.Pipeline(runner=beam_options.make_runner(pipeline_options),
                                 options=pipeline_options)
        build_pipeline(pipeline, work_dir, src.shape[0], tgt.shape[0], k=k, spec=spec,
                       shard_rows=shard_rows,
                       probes=probes)
        local = beam_options.runs_here(pipeline_options) and not folders.is_remote(work_dir)
        pipeline_progress.run_pipeline(pipeline, None, None, lambda line: None,
                                       own_prefix=own_prefix if local else None,
                                       output=work_dir)
        return collect(work_dir, src.shape[0], tgt.shape[0], k, shard_rows=shard_rows)
    finally:
        if not folders.is_remote(work_dir):
            shutil.rmtree(work_dir, ignore_errors=True)
        else:
            FileSystems.delete([work_dir])
