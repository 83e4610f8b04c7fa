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
import tempfile
import time
from collections.abc import Callable
from typing import Optional, Sequence

from cmlm_tf import disk
from cmlm_tf.evaluation import mining, readers

# `--index auto`, by candidate pairs (n_src × n_tgt): exact up to FLAT_ABOVE, where the flat
# product's start-up (TensorFlow, XLA) costs as much as it saves; flat up to ANN_ABOVE, about
# where an index per side becomes faster; an index above (docs/results.md, "Mining at
# corpus scale").
FLAT_ABOVE = 20_000 ** 2
ANN_ABOVE = 200_000 ** 2
# The in-process search reports progress after each of about this many parts of the queries.
_PROGRESS_PARTS = 20


def write_pairs(path: str, pairs: mining.MinedPairs, src: Sequence[str], tgt: Sequence[str],
                threshold: Optional[float] = None) -> int:
    """Writes `score<TAB>src<TAB>tgt` lines (pairs already sorted); returns how many.

    `src[i]` and `tgt[j]` give the texts (a list, or a mapping holding at least the mined
    rows). The file appears complete or not at all (`cmlm_tf.disk.atomic_output`).
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
    import numpy as np

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

    def __init__(self, total: int, every: float = 10.0):
        self.total = total
        self.every = every
        self.done_before = 0
        self.started = self.last = time.perf_counter()
        self.printed = False

    def side_done(self, count: int) -> None:
        self.done_before += count

    def __call__(self, done: int, _total: int) -> None:
        now = time.perf_counter()
        finished = self.done_before + done
        if now - self.last < self.every and (finished < self.total or not self.printed):
            return
        self.last, self.printed = now, True
        rate = finished / max(now - self.started, 1e-9)
        eta = (self.total - finished) / rate if rate else 0.0
        print(f"mine: searched {finished:,} of {self.total:,} queries ({rate:,.0f}/s, "
              f"ETA {int(eta // 60)}:{int(eta % 60):02d})", file=sys.stderr, flush=True)


def index_and_probes(queries, keys, k: int, backend: str, probes: Optional[int],
                     candidates: int, recall: float, side: str):
    """An index over `keys` and the probes to search it with: `probes` when given, else the
    fewest that reach `recall` on a sample of the queries (`ann.calibrate_probes`)."""
    from cmlm_tf.evaluation import ann

    index = ann.build_index(keys, backend)
    if probes is None:
        probes, measured = ann.calibrate_probes(queries, keys, k, index, target=recall,
                                                candidates=candidates)
        print(f"mine: {side}: {probes} of {index.partitions} partitions per query (recall@{k} "
              f"{measured:.3f} on {min(len(queries), ann.CALIBRATION_SAMPLE):,} sampled "
              "queries)", file=sys.stderr, flush=True)
    return index, probes


def make_search(index: str, backend: str, probes: Optional[int] = None,
                candidates: Optional[int] = None, recall: Optional[float] = None,
                progress: Optional[SearchProgress] = None) -> mining.Search:
    """The in-process search of one side: exact blocks, the flat product, or an index built
    on the keys."""
    from cmlm_tf.evaluation import ann, knn

    sides = iter(("forward", "backward"))

    def search(queries, keys, k):
        if index == "exact":
            part = knn.top_k
        elif index == "flat":
            from cmlm_tf.scale import flat_search

            part = flat_search.FlatIndex(keys, k).search
        else:
            chosen = candidates or ann.DEFAULT_CANDIDATES
            built, used = index_and_probes(queries, keys, k, backend, probes, chosen,
                                           recall or ann.DEFAULT_RECALL, next(sides, "search"))
            part = functools.partial(ann.top_k, index=built, probes=used, candidates=chosen)
        if progress is None:
            return part(queries, keys, k)
        result = _in_parts(part, progress)(queries, keys, k)
        progress.side_done(queries.shape[0])
        return result

    return search


def describe_index(index: str, backend: str) -> str:
    """How the stage line names the search: `exact`, `flat, <dtype> product` or `ann, <backend>`."""
    if index == "ann":
        return f"ann, {backend}"
    if index == "flat":
        from cmlm_tf.scale import flat_search

        return f"flat, {flat_search.compute_dtype()} product"
    return index


@dataclasses.dataclass
class SearchSettings:
    """How `mine_vectors` searches: the margin's neighbours and kind, the index (`auto`,
    `exact`, `flat` or `ann`) and an index's settings (None: the defaults of
    `cmlm_tf.evaluation.ann`), and for a Beam run its work folder (default: a temporary
    folder beside `output`, the pairs file)."""

    k: int
    margin: str
    index: str = "auto"
    backend: str = "faiss"
    probes: Optional[int] = None
    candidates: Optional[int] = None
    recall: Optional[float] = None
    work_dir: Optional[str] = None
    output: str = ""


def mine_vectors(settings: SearchSettings, src_vectors, tgt_vectors, beam_args: Sequence[str],
                 stage: Callable[[str], None]) -> mining.MinedPairs:
    """Margin-scored pairs of two vector sets, searched here or on Beam (with `beam_args`,
    Beam's pipeline options); `stage` is called with the line that names the search."""
    from cmlm_tf.vectors import unit_rows

    src_vectors, tgt_vectors = unit_rows(src_vectors), unit_rows(tgt_vectors)
    index = choose_index(settings.index, len(src_vectors), len(tgt_vectors), settings.backend)
    stage(f"k-NN search ({describe_index(index, settings.backend)}"
          f"{', on Beam' if beam_args else ''}) and {settings.margin} margin scoring, "
          f"k={settings.k}")
    if not beam_args:
        progress = SearchProgress(len(src_vectors) + len(tgt_vectors))
        if index == "flat":
            from cmlm_tf.scale import flat_search

            return mining.max_retrieval(mining.margin_candidates(
                src_vectors, tgt_vectors, settings.k, settings.margin,
                search_both=functools.partial(flat_search.top_k_both, report=progress)))
        search = make_search(index, settings.backend, settings.probes, settings.candidates,
                             settings.recall, progress)
        return mining.max_retrieval(mining.margin_candidates(
            src_vectors, tgt_vectors, settings.k, settings.margin, search=search))
    from cmlm_tf.evaluation import ann
    from cmlm_tf.scale import options

    with options.quiet_beam_import():
        from cmlm_tf.scale import knn as beam_knn

    spec = beam_knn.SearchSpec(index=index, backend=settings.backend,
                               candidates=settings.candidates or ann.DEFAULT_CANDIDATES,
                               probes=settings.probes, recall=settings.recall or ann.DEFAULT_RECALL)
    work_dir = settings.work_dir or tempfile.mkdtemp(
        prefix=".mine-work-", dir=os.path.dirname(os.path.abspath(settings.output)))
    found = beam_knn.search_both_sides(src_vectors, tgt_vectors, settings.k, spec, work_dir,
                                       beam_args)
    return mining.max_retrieval(mining.margin_scores(*found, kind=settings.margin))


def texts_of_rows(table, rows) -> dict:
    """{row: text} for `rows` of an embeddings table, read again from its source files.

    Lines are read by the policy that embedded them (`cmlm_tf.scale.corpus_lines`,
    with the table's `text_column`), in full: the output shows the whole text. Only the
    rows asked for are kept, so memory grows with the pairs, not the corpus.
    """
    import numpy as np

    from cmlm_tf.scale import corpus_lines, folders

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
