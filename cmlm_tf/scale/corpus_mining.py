"""Mining translation pairs from two sets of sentence vectors: the choice of the k-NN search
(exact NumPy blocks, the flat low-precision product of `cmlm_tf.scale.flat_search`, or an
index per side from `cmlm_tf.evaluation.ann`), the search in this process or as a Beam
pipeline (`cmlm_tf.scale.knn`), the margin scoring of `cmlm_tf.evaluation.mining`, the texts
of the mined rows of an embeddings table, and the pairs file.

`python -m cmlm_tf.mine` is the command line over it.
"""

import dataclasses
import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Optional, Sequence

import numpy as np

from cmlm_tf.evaluation import ann, knn, mining, readers
from cmlm_tf.files import disk, output_folders
from cmlm_tf.runtime import tf_logs
from cmlm_tf.scale import corpus_lines, flat_search, folders, options
from cmlm_tf.vectors import unit_rows

# `--index auto`, by candidate pairs (n_src × n_tgt): exact up to FLAT_ABOVE, where the flat
# product's start-up (TensorFlow, XLA) costs as much as it saves; flat up to ANN_ABOVE, about
# where an index per side becomes faster; an index above (docs/results.md, "Mining at
# corpus scale").
FLAT_ABOVE = 20_000 ** 2
ANN_ABOVE = 200_000 ** 2
# The in-process search reports progress after each of about this many parts of the queries.
_PROGRESS_PARTS = 20
# The start of a Beam search's work folder's name, beside the output or inside --work_dir.
WORK_PREFIX = ".mine-work-"


def write_pairs(path: str, pairs: mining.MinedPairs, src: Sequence[str], tgt: Sequence[str],
                *, threshold: Optional[float] = None) -> int:
    """Writes `score<TAB>src<TAB>tgt` lines (pairs already sorted); returns how many.

    `src[i]` and `tgt[j]` give the texts (a list, or a mapping holding at least the mined
    rows). The file appears complete or not at all (`cmlm_tf.files.disk.atomic_output`).
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    written = 0
    # Written under a temporary name and renamed: a failed write (a full disk) leaves no
    # partial file and names `path`.
    with disk.atomic_output(path) as temp, open(temp, "w", encoding="utf-8") as f:
        for source, target, score in zip(pairs.src_indices, pairs.tgt_indices, pairs.scores):
            if threshold is not None and score < threshold:
                break
            f.write(readers.tsv_line(f"{score:.6f}", src[source], tgt[target]))
            written += 1
    return written


def choose_index(requested: str, num_src: int, num_tgt: int, backend: str) -> str:
    """`exact`, `flat` or `ann` for `--index requested` (auto: by the candidate pairs, see
    `FLAT_ABOVE` and `ANN_ABOVE`; ann only when the backend is installed)."""
    if requested != "auto":
        return requested
    if num_src * num_tgt <= FLAT_ABOVE:
        return "exact"
    if num_src * num_tgt <= ANN_ABOVE:
        return "flat"
    try:
        __import__("faiss" if backend == "faiss" else "scann")
    except ImportError:
        return "flat"
    return "ann"


def _in_parts(search, report):
    """`search` run over parts of the queries, calling `report(done, total)` after each."""
    def run(queries, keys, k):
        step = max(1, -(-queries.shape[0] // _PROGRESS_PARTS))
        cosines, indices = [], []
        for start in range(0, queries.shape[0], step):
            part = search(queries[start:start + step], keys, k)
            cosines.append(part[0])
            indices.append(part[1])
            report(min(start + step, queries.shape[0]), queries.shape[0])
        return np.concatenate(cosines), np.concatenate(indices)

    return run


class SearchProgress:
    """`mine: searched N of M queries (Q/s, ETA m:ss)` on stderr, at most every 10 s."""

    def __init__(self, total: int, every: float = 10.0,
                 clock: Callable[[], float] = time.perf_counter):
        self.total = total
        self.every = every
        self.done_before = 0
        self._clock = clock
        self.started = self.last = clock()
        self.searched_before = 0.0  # seconds spent on the queries of finished sides
        self.printed = False

    def side_started(self) -> None:
        """Marks the start of a side's queries. The rate counts the seconds spent on
        queries only: an index's training and calibration before them would make the
        first ETAs many times too long."""
        self.started = self._clock()

    def side_done(self, count: int) -> None:
        self.done_before += count
        self.searched_before += self._clock() - self.started

    def __call__(self, done: int, _total: int) -> None:
        now = self._clock()
        finished = self.done_before + done
        if now - self.last < self.every and (finished < self.total or not self.printed):
            return
        self.last, self.printed = now, True
        rate = finished / max(self.searched_before + now - self.started, 1e-9)
        eta = (self.total - finished) / rate if rate else 0.0
        print(f"mine: searched {finished:,} of {self.total:,} queries ({rate:,.0f}/s, "
              f"ETA {int(eta // 60)}:{int(eta % 60):02d})", file=sys.stderr, flush=True)


def index_and_probes(queries, keys, k: int, backend: str, *, probes: Optional[int],
                     candidates: int, recall: float, side: str):
    """An index over `keys` and the probes to search it with: `probes` when given, else the
    fewest that reach `recall` on a sample of the queries (`ann.calibrate_probes`)."""
    index = ann.build_index(keys, backend)
    if probes is None:
        probes, measured = ann.calibrate_probes(queries, keys, k, index, target=recall,
                                                candidates=candidates)
        print(f"mine: {side}: {probes} of {index.partitions} partitions per query (recall@{k} "
              f"{measured:.3f} on {min(len(queries), ann.CALIBRATION_SAMPLE):,} sampled "
              "queries)", file=sys.stderr, flush=True)
    return index, probes


def make_search(index: str, backend: str, *, probes: Optional[int] = None,
                candidates: Optional[int] = None, recall: Optional[float] = None,
                progress: Optional[SearchProgress] = None) -> mining.Search:
    """The in-process search of one side: exact blocks, the flat product, or an index built
    on the keys."""
    sides = iter(("forward", "backward"))

    def search(queries, keys, k):
        if index == "exact":
            part = knn.top_k
        elif index == "flat":
            part = flat_search.FlatIndex(keys, k).search
        else:
            chosen = candidates or ann.DEFAULT_CANDIDATES
            built, used = index_and_probes(queries, keys, k, backend, probes=probes,
                                           candidates=chosen,
                                           recall=recall or ann.DEFAULT_RECALL, side=next(sides,
                                                                                          "search"))
            part = functools.partial(ann.top_k, index=built, probes=used, candidates=chosen)
        if progress is None:
            return part(queries, keys, k)
        progress.side_started()
        result = _in_parts(part, progress)(queries, keys, k)
        progress.side_done(queries.shape[0])
        return result

    return search


def describe_index(index: str, backend: str) -> str:
    """How the stage line names the search: `exact`, `flat, <dtype> product` or `ann, <backend>`."""
    if index == "ann":
        return f"ann, {backend}"
    if index == "flat":
        return f"flat, {flat_search.compute_dtype()} product"
    return index


@dataclasses.dataclass
class SearchSettings:
    """How `mine_vectors` searches: the margin's neighbours and kind, the index (`auto`,
    `exact`, `flat` or `ann`) and an index's settings (None: the defaults of
    `cmlm_tf.evaluation.ann`), and for a Beam run the folder its work folder goes in
    (default: the folder of `output`, the pairs file; see `_search_on_beam`)."""

    k: int
    margin: str
    index: str = "auto"
    backend: str = "faiss"
    probes: Optional[int] = None
    candidates: Optional[int] = None
    recall: Optional[float] = None
    work_dir: Optional[str] = None
    output: str = ""


def _say(line: str) -> None:
    print(f"mine: {line}", file=sys.stderr, flush=True)


def _search_here(settings: SearchSettings, index: str, src_vectors, tgt_vectors
                 ) -> mining.MinedPairs:
    """`mine_vectors`' search in this process, with progress lines."""
    progress = SearchProgress(len(src_vectors) + len(tgt_vectors))
    if index == "flat":
        def search_both(src, tgt, k):
            return ann.keep_recall(src, tgt, flat_search.top_k_both(src, tgt, k, report=progress),
                                   settings.recall or ann.DEFAULT_RECALL, say=_say, name="flat")

        return mining.max_retrieval(mining.margin_candidates(
            src_vectors, tgt_vectors, k=settings.k, kind=settings.margin, search_both=search_both))
    search = make_search(index, settings.backend, probes=settings.probes,
                         candidates=settings.candidates,
                         recall=settings.recall, progress=progress)
    if index == "ann":
        def search_both(src, tgt, k):  # each direction's index, then what they kept
            found = search(src, tgt, min(k, len(tgt))), search(tgt, src, min(k, len(src)))
            return ann.keep_recall(src, tgt, found, settings.recall or ann.DEFAULT_RECALL,
                                   say=_say)

        return mining.max_retrieval(mining.margin_candidates(
            src_vectors, tgt_vectors, k=settings.k, kind=settings.margin, search_both=search_both))
    return mining.max_retrieval(mining.margin_candidates(
        src_vectors, tgt_vectors, k=settings.k, kind=settings.margin, search=search))


def mine_vectors(settings: SearchSettings, src_vectors, tgt_vectors, beam_args: Sequence[str],
                 *, stage: Callable[[str], None]) -> mining.MinedPairs:
    """Margin-scored pairs of two vector sets, searched here or on Beam (with `beam_args`,
    Beam's pipeline options); `stage` is called with the line that names the search."""
    src_vectors, tgt_vectors = unit_rows(src_vectors), unit_rows(tgt_vectors)
    index = choose_index(settings.index, len(src_vectors), len(tgt_vectors), settings.backend)
    fewest = min(len(src_vectors), len(tgt_vectors))
    if index == "ann" and fewest < ann.MIN_KEYS:
        print(f"mine: an index needs at least {ann.MIN_KEYS} vectors a side to train on and "
              f"one side has {fewest}: searching exactly instead", file=sys.stderr, flush=True)
        index = "exact"
    if index == "ann" and len(src_vectors) * len(tgt_vectors) <= FLAT_ABOVE:
        print(f"mine: warning: --index ann on {len(src_vectors):,} × {len(tgt_vectors):,} "
              "sentences is slower than the exact search, which --index auto picks up to "
              f"{FLAT_ABOVE:,} candidate pairs; searching with the index as asked",
              file=sys.stderr, flush=True)
    stage(f"k-NN search ({describe_index(index, settings.backend)}"
          f"{', on Beam' if beam_args else ''}) and {settings.margin} margin scoring, "
          f"k={settings.k}")
    if not beam_args:
        # XLA's C++ lines ("Compiled cluster using XLA!") pass TF_CPP_MIN_LOG_LEVEL.
        with tf_logs.filtered_cpp_logs():
            return _search_here(settings, index, src_vectors, tgt_vectors)
    return _search_on_beam(settings, index, src_vectors, tgt_vectors, beam_args=beam_args)


def _search_on_beam(settings: SearchSettings, index: str, src_vectors, tgt_vectors,
                    *, beam_args: Sequence[str]) -> mining.MinedPairs:
    """`mine_vectors`' search as a Beam pipeline, in a work folder of its own
    (`WORK_PREFIX<host>-<pid>-<random>`, `cmlm_tf.files.output_folders.work_folder`) inside
    `--work_dir`, or beside the output: only that folder is removed afterwards, and the
    `--work_dir` itself only when this run made it."""
    with options.quiet_beam_import():
        from cmlm_tf.scale import knn as beam_knn

    spec = beam_knn.SearchSpec(index=index, backend=settings.backend,
                               candidates=settings.candidates or ann.DEFAULT_CANDIDATES,
                               probes=settings.probes, recall=settings.recall or ann.DEFAULT_RECALL)
    parent = work_parent(settings)
    if "://" in parent:
        work_dir, parent_made = output_folders.remote_work_folder(parent, WORK_PREFIX), False
    else:
        parent_made = settings.work_dir is not None and not os.path.exists(parent)
        work_dir = output_folders.work_folder(parent, WORK_PREFIX)
    try:
        found = beam_knn.search_both_sides(src_vectors, tgt_vectors, settings.k, spec,
                                           work_dir=work_dir, options=beam_args,
                                           own_prefix="mine: ")
    finally:
        if "://" not in parent:
            output_folders.remove_work(work_dir, parent, parent_made=parent_made)
    if index in ("flat", "ann"):
        found = [array for side in ann.keep_recall(
            src_vectors, tgt_vectors, (found[:2], found[2:]),
            settings.recall or ann.DEFAULT_RECALL, say=_say, name=index) for array in side]
    return mining.max_retrieval(mining.margin_scores(*found, kind=settings.margin))


def work_parent(settings: SearchSettings) -> str:
    """Where a Beam search makes its work folder: `--work_dir`, else the output's folder."""
    return settings.work_dir or os.path.dirname(os.path.abspath(settings.output))


def remove_dead_work(settings: SearchSettings) -> None:
    """Removes, with a warning, the work folders that killed runs left where this run would
    make its own (`output_folders.remove_dead_work`)."""
    for note in output_folders.remove_dead_work(work_parent(settings), WORK_PREFIX,
                                                "a mine run"):
        print(f"mine: warning: {note}", file=sys.stderr, flush=True)


def texts_of_rows(table, rows) -> dict:
    """{row: text} for `rows` of an embeddings table, read again from its source files.

    Lines are read by the policy that embedded them (`cmlm_tf.scale.corpus_lines`,
    with the table's `text_column`), in full: the output shows the whole text. Only the
    rows asked for are kept, so memory grows with the pairs, not the corpus.
    """
    wanted = {}
    for row in np.unique(np.asarray(rows, np.int64)):
        wanted.setdefault(str(table.sources[row]), {})[int(table.lines[row])] = int(row)
    texts = {}
    for source, lines in wanted.items():
        with folders.open_file(source) as stream:
            for record in corpus_lines.iter_records(stream, source,
                                                    table.manifest.get("text_column"),
                                                    max_chars=sys.maxsize):
                row = lines.get(record.line)
                if row is None:
                    continue
                if record.text is None:
                    raise readers.DataError(
                        f"{source}:{record.line}: embedded, but now {record.skipped}; the "
                        "file changed after it was embedded")
                texts[row] = record.text
        missing = sorted(line for line, row in lines.items() if row not in texts)
        if missing:
            raise readers.DataError(f"{source}: has no line {missing[0]}, which was embedded; "
                                    "the file changed after it was embedded")
    return texts
