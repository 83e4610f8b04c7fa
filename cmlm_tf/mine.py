r"""Mines translation pairs from two plain-text files with an exported encoder.

    python -m cmlm_tf.mine --model EXPORT_DIR --src en.txt --tgt es.txt --output pairs.tsv \
        [--threshold T] [--margin ratio|distance] [--k 4] [--index auto|exact|flat|ann] \
        [--pcr | --pcr_file F --src_lang en --tgt_lang es]
    python -m cmlm_tf.mine --src_vectors EMB_EN --tgt_vectors EMB_ES --src en.txt \
        --tgt es.txt --output pairs.tsv [Beam pipeline options, e.g. --runner=DirectRunner]

Input: one sentence per line (empty lines are skipped). Output: `score<TAB>src<TAB>tgt`, one
1-to-1 pair per line, sorted by descending margin score (LASER margin, `max` retrieval; see
`cmlm_tf.evaluation.mining`); all pairs unless `--threshold` is given. Tabs inside a sentence
are written as spaces so every output line has three fields. Memory grows as N·k: no full
similarity matrix is built.

`--src_vectors`/`--tgt_vectors` take the folders of `python -m cmlm_tf.embed_corpus` instead
of encoding here; `--src`/`--tgt` then only give the texts of the output lines. The k-NN
search is exact (`--index exact`, NumPy blocks), every pair scored in bfloat16 on CPUs that
multiply it natively with each sentence's shortlist re-scored exactly (`--index flat`,
`cmlm_tf.scale.flat_search`), or approximate (`--index ann`: an index per side,
`cmlm_tf.evaluation.ann`, in the `scale` extra). `auto` takes `exact` up to `FLAT_ABOVE`
candidate pairs, `flat` up to `ANN_ABOVE`, and `ann` above it when the extra is installed
(`flat` when not). Given Beam pipeline options, the
k-NN queries of both sides run as a Beam pipeline (`cmlm_tf.scale.knn`); without, in this
process, on every core.
"""

import argparse
import functools
import glob
import os
import sys
import tempfile
import time
from typing import Optional, Sequence

from cmlm_tf import cli, disk, progress
from cmlm_tf.evaluation import mining, readers

INDEXES = ("auto", "exact", "flat", "ann")
ANN_BACKENDS = ("faiss", "scann")
# `--index auto`, by candidate pairs (n_src × n_tgt): exact up to FLAT_ABOVE, where the flat
# product's start-up (TensorFlow, XLA) costs as much as it saves; flat up to ANN_ABOVE, about
# where an index per side becomes faster; an index above (docs/results.md, "Mining at
# corpus scale").
FLAT_ABOVE = 20_000 ** 2
ANN_ABOVE = 200_000 ** 2
# The in-process search reports progress after each of about this many parts of the queries.
_PROGRESS_PARTS = 20


def build_parser() -> argparse.ArgumentParser:
    parser = cli.ArgumentParser(
        prog="python -m cmlm_tf.mine",
        description="Mine 1-to-1 translation pairs from two text files (margin scoring). "
                    "Options the command does not know are Apache Beam pipeline options: "
                    "with them, the k-NN search runs as a Beam pipeline.")
    parser.add_argument("--model",
                        help="export folder (python -m cmlm_tf.export); not needed with "
                             "--src_vectors/--tgt_vectors")
    parser.add_argument("--src", required=True, help="source sentences, one per line")
    parser.add_argument("--tgt", required=True, help="target sentences, one per line")
    parser.add_argument("--output", required=True, help="pairs file: score<TAB>src<TAB>tgt")
    parser.add_argument("--src_vectors", help="the source side's embeddings folder "
                                              "(python -m cmlm_tf.embed_corpus) instead of "
                                              "encoding --src")
    parser.add_argument("--tgt_vectors", help="the target side's embeddings folder")
    parser.add_argument("--threshold", type=float,
                        help="keep pairs scoring at least this (default: keep all)")
    parser.add_argument("--margin", choices=mining.MARGINS, default="ratio")
    parser.add_argument("--k", type=int, default=4, help="neighbours for the margin (default 4)")
    parser.add_argument("--batch_size", type=int, default=64, help="encode batch size")
    search = parser.add_argument_group("k-NN search")
    search.add_argument("--index", choices=INDEXES, default="auto",
                        help="exact; flat (every pair in bfloat16, shortlists re-scored "
                             "exactly); ann (an index per side; the scale extra); or auto: "
                             f"exact up to {FLAT_ABOVE:,} candidate pairs, flat up to "
                             f"{ANN_ABOVE:,}, ann above when installed")
    search.add_argument("--ann_backend", choices=ANN_BACKENDS, default="faiss",
                        help="the index library (default faiss)")
    search.add_argument("--probes", type=int, default=None,
                        help="with an index: partitions searched per query (default: the "
                             "fewest, from 32 up by half, that reach --recall on a sample)")
    search.add_argument("--recall", type=float, default=None,
                        help="with an index and no --probes: the recall@k to reach on 1,000 "
                             "sampled queries, against the exact search (default 0.985)")
    search.add_argument("--candidates", type=int, default=None,
                        help="with an index: keys re-scored exactly per query (default 32)")
    search.add_argument("--work_dir", help="with Beam options: a folder every worker reads "
                                           "(default: a temporary folder beside --output)")
    cli.add_pcr_arguments(parser)
    return parser


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


def check_arguments(args, beam_args: Sequence[str]) -> None:
    """Refuses bad combinations before anything is loaded."""
    if args.k < 1:
        raise cli.UsageError(f"--k must be positive, got {args.k}")
    if args.batch_size <= 0:
        raise cli.UsageError(f"--batch_size must be positive, got {args.batch_size}")
    if args.save_pcr and not args.pcr:
        raise cli.UsageError("--save_pcr needs --pcr (there is nothing fitted to save)")
    if (args.src_vectors is None) != (args.tgt_vectors is None):
        raise cli.UsageError("--src_vectors and --tgt_vectors go together")
    if args.src_vectors is None and not args.model:
        raise cli.UsageError("--model is required (or give --src_vectors and --tgt_vectors)")
    if args.src_vectors is not None and args.model:
        raise cli.UsageError("--model and --src_vectors/--tgt_vectors are exclusive: the "
                             "vectors are already computed")
    if args.recall is not None and not 0 < args.recall <= 1:
        raise cli.UsageError(f"--recall must be in (0, 1], got {args.recall}")
    if args.recall is not None and args.probes is not None:
        raise cli.UsageError("--recall and --probes are exclusive: --recall chooses the probes")
    for flag in ("probes", "candidates", "recall"):
        value = getattr(args, flag)
        if value is not None and value < 1 and flag != "recall":
            raise cli.UsageError(f"--{flag} must be positive, got {value}")
        if value is not None and args.index in ("exact", "flat"):
            raise cli.UsageError(f"--{flag} applies to --index ann (or auto)")
    if args.work_dir and not beam_args:
        raise cli.UsageError("--work_dir applies to a Beam run (give Beam options, e.g. "
                             "--runner=DirectRunner)")


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


class _Progress:
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
                progress: Optional[_Progress] = None) -> mining.Search:
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


def _describe(index: str, backend: str) -> str:
    if index == "ann":
        return f"ann, {backend}"
    if index == "flat":
        from cmlm_tf.scale import flat_search

        return f"flat, {flat_search.compute_dtype()} product"
    return index


def mine_vectors(args, src_vectors, tgt_vectors, beam_args: Sequence[str],
                 stage: progress.Stages) -> mining.MinedPairs:
    """Margin-scored pairs of two vector sets, searched here or on Beam."""
    from cmlm_tf.evaluation import knn

    src_vectors, tgt_vectors = knn.normalize(src_vectors), knn.normalize(tgt_vectors)
    index = choose_index(args.index, len(src_vectors), len(tgt_vectors), args.ann_backend)
    stage(f"k-NN search ({_describe(index, args.ann_backend)}"
          f"{', on Beam' if beam_args else ''}) and {args.margin} margin scoring, k={args.k}")
    if not beam_args:
        progress = _Progress(len(src_vectors) + len(tgt_vectors))
        if index == "flat":
            from cmlm_tf.scale import flat_search

            return mining.max_retrieval(mining.margin_candidates(
                src_vectors, tgt_vectors, args.k, args.margin,
                search_both=functools.partial(flat_search.top_k_both, report=progress)))
        search = make_search(index, args.ann_backend, args.probes, args.candidates,
                             args.recall, progress)
        return mining.max_retrieval(mining.margin_candidates(
            src_vectors, tgt_vectors, args.k, args.margin, search=search))
    from cmlm_tf.evaluation import ann
    from cmlm_tf.scale import options

    with options.quiet_beam_import():
        from cmlm_tf.scale import knn as beam_knn

    spec = beam_knn.SearchSpec(index=index, backend=args.ann_backend,
                               candidates=args.candidates or ann.DEFAULT_CANDIDATES,
                               probes=args.probes, recall=args.recall or ann.DEFAULT_RECALL)
    work_dir = args.work_dir or tempfile.mkdtemp(
        prefix=".mine-work-", dir=os.path.dirname(os.path.abspath(args.output)))
    found = beam_knn.search_both_sides(src_vectors, tgt_vectors, args.k, spec, work_dir,
                                       beam_args)
    return mining.max_retrieval(mining.margin_scores(*found, kind=args.margin))


def _matching_files(pattern: str) -> set:
    """Real paths of the local files `pattern` matches (a glob), or the remote paths Beam's
    file systems match."""
    if "://" in pattern:
        from apache_beam.io.filesystems import FileSystems

        return {metadata.path for result in FileSystems.match([pattern])
                for metadata in result.metadata_list}
    return {os.path.realpath(path) for path in glob.glob(pattern)}


def check_sources(table, pattern: str, flag: str) -> None:
    """Refuses texts (`pattern`, the value of `flag`) that do not name every source file of
    an embeddings table."""
    named = _matching_files(pattern)
    for source in sorted(set(table.sources.tolist())):
        key = source if "://" in source else os.path.realpath(source)
        if key not in named:
            raise cli.UsageError(f"{flag} {pattern} does not name {source}, a source of the "
                                 "embeddings; give the file (or glob) that was embedded")


def texts_of_rows(table, rows, pattern: str, flag: str) -> dict:
    """{row: text} for `rows` of an embeddings table, read again from its source files.

    Each source file must be one that `pattern` (the value of `flag`, --src or --tgt)
    names. Lines are read by the policy that embedded them (`cmlm_tf.scale.corpus_lines`,
    with the table's `text_column`), in full: the output shows the whole text. Only the
    rows asked for are kept, so memory grows with the pairs, not the corpus.
    """
    import numpy as np

    from cmlm_tf.scale import corpus_lines, embedding_files

    wanted = {}
    for row in np.unique(np.asarray(rows, np.int64)):
        wanted.setdefault(str(table.sources[row]), {})[int(table.lines[row])] = int(row)
    check_sources(table, pattern, flag)
    texts = {}
    for source, lines in wanted.items():
        with embedding_files.open_file(source) as stream:
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


def run(args, beam_args: Sequence[str] = ()) -> int:
    """Mines and writes the pairs; returns how many were written."""
    check_arguments(args, beam_args)
    pcr = cli.load_pcr(args.pcr_file)
    cli.check_pcr_languages(pcr, [args.src_lang, args.tgt_lang], args.pcr_file)
    stage = progress.Stages("mine")
    try:
        if args.src_vectors is not None:
            from cmlm_tf.evaluation import suite
            from cmlm_tf.scale import embedding_files

            stage(f"reading {args.src_vectors} and {args.tgt_vectors}")
            tables = [embedding_files.read_embeddings(folder)
                      for folder in (args.src_vectors, args.tgt_vectors)]
            check_sources(tables[0], args.src, "--src")
            check_sources(tables[1], args.tgt, "--tgt")
            if tables[0].vectors.shape[1] != tables[1].vectors.shape[1]:
                raise cli.UsageError(
                    f"{args.src_vectors} has vectors of dim {tables[0].vectors.shape[1]} "
                    f"and {args.tgt_vectors} of dim {tables[1].vectors.shape[1]}; mine "
                    "vectors of one model")
            (src_vectors, tgt_vectors), fitted = suite.remove_components(
                [args.src_lang, args.tgt_lang], [table.vectors for table in tables],
                fit_pcr=args.pcr, pcr=pcr)
            pairs = mine_vectors(args, src_vectors, tgt_vectors, beam_args, stage)
            kept = slice(None) if args.threshold is None else pairs.scores >= args.threshold
            src = texts_of_rows(tables[0], pairs.src_indices[kept], args.src, "--src")
            tgt = texts_of_rows(tables[1], pairs.tgt_indices[kept], args.tgt, "--tgt")
            print(f"mine: {len(tables[0].vectors):,} source and {len(tables[1].vectors):,} "
                  f"target sentences; {len(pairs):,} 1-to-1 pairs", file=sys.stderr)
        else:
            from cmlm_tf.evaluation import suite

            src = readers.read_sentences(args.src, skip_empty=True)
            tgt = readers.read_sentences(args.tgt, skip_empty=True)
            stage(f"loading {args.model}")
            encoder = cli.load_encoder(args.model, args.batch_size, stage)
            (src_vectors, tgt_vectors), fitted = suite.embed_languages(
                encoder, [(args.src_lang, src), (args.tgt_lang, tgt)], args.pcr, pcr)
            pairs = mine_vectors(args, src_vectors, tgt_vectors, beam_args, stage)
        if fitted is not None and args.save_pcr:
            fitted.save(args.save_pcr)
        stage(f"writing {args.output}")
        return write_pairs(args.output, pairs, src, tgt, args.threshold)
    finally:
        stage.done()


def main(argv: Optional[Sequence[str]] = None) -> int:
    from cmlm_tf.scale import options

    parser = build_parser()
    args, beam_args = options.split_arguments(parser, argv)
    cli.check_input_paths(parser, {"--model": args.model})

    def body():
        written = run(args, beam_args)
        print(f"{written} pairs written to {args.output}", file=sys.stderr)

    return cli.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
