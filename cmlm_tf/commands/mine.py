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
import glob
import math
import os
import sys
from typing import Optional, Sequence

from cmlm_tf import progress
from cmlm_tf.commands import common
from cmlm_tf.evaluation import ann, mining, readers
from cmlm_tf.files import output_folders
from cmlm_tf.scale import corpus_mining
from cmlm_tf.scale.corpus_mining import ANN_ABOVE, FLAT_ABOVE

INDEXES = ("auto", "exact", "flat", "ann")
ANN_BACKENDS = ("faiss", "scann")


def build_parser() -> argparse.ArgumentParser:
    parser = common.ArgumentParser(
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
    parser.add_argument("--allow_different_models", action="store_true",
                        help="mine --src_vectors and --tgt_vectors whose manifests name "
                             "different models (default: refused; their spaces differ)")
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
                        help="with an index and no --probes, or flat: the recall@k to reach "
                             "on 1,000 sampled queries a side, against the exact search "
                             f"(default {ann.DEFAULT_RECALL}); below it, after the search, "
                             "both sides are searched exactly")
    search.add_argument("--candidates", type=int, default=None,
                        help="with an index: keys re-scored exactly per query (default 32)")
    search.add_argument("--work_dir", help="with Beam options: a folder every worker reads, "
                                           "where the run makes its own work folder and "
                                           "removes it afterwards (default: beside --output)")
    common.add_pcr_arguments(parser)
    return parser


def check_arguments(args, beam_args: Sequence[str]) -> None:
    """Refuses bad combinations before anything is loaded."""
    if args.k < 1:
        raise common.UsageError(f"--k must be positive, got {args.k}")
    if args.batch_size <= 0:
        raise common.UsageError(f"--batch_size must be positive, got {args.batch_size}")
    if args.threshold is not None and not math.isfinite(args.threshold):
        raise common.UsageError(f"--threshold must be a finite number, got {args.threshold}")
    if args.index == "ann":
        try:
            ann.check_backend(args.ann_backend)
        except ann.MissingBackendError as error:
            raise common.UsageError(f"--index ann: {error}") from None
    if args.save_pcr and not args.pcr:
        raise common.UsageError("--save_pcr needs --pcr (there is nothing fitted to save)")
    if (args.src_vectors is None) != (args.tgt_vectors is None):
        raise common.UsageError("--src_vectors and --tgt_vectors go together")
    if args.src_vectors is None and not args.model:
        raise common.UsageError("--model is required (or give --src_vectors and --tgt_vectors)")
    if args.allow_different_models and args.src_vectors is None:
        raise common.UsageError("--allow_different_models applies to --src_vectors and "
                                "--tgt_vectors")
    if args.src_vectors is not None and args.model:
        raise common.UsageError("--model and --src_vectors/--tgt_vectors are exclusive: the "
                             "vectors are already computed")
    if args.recall is not None and not 0 < args.recall <= 1:
        raise common.UsageError(f"--recall must be in (0, 1], got {args.recall}")
    if args.recall is not None and args.probes is not None:
        raise common.UsageError("--recall and --probes are exclusive: --recall chooses the probes")
    for flag in ("probes", "candidates", "recall"):
        value = getattr(args, flag)
        if value is not None and value < 1 and flag != "recall":
            raise common.UsageError(f"--{flag} must be positive, got {value}")
        refused = ("exact",) if flag == "recall" else ("exact", "flat")
        if value is not None and args.index in refused:
            raise common.UsageError(f"--{flag} applies to --index ann (or auto"
                                    f"{', flat' if flag == 'recall' else ''})")
    if args.work_dir and not beam_args:
        raise common.UsageError("--work_dir applies to a Beam run (give Beam options, e.g. "
                             "--runner=DirectRunner)")


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
            raise common.UsageError(f"{flag} {pattern} does not name {source}, a source of the "
                                 "embeddings; give the file (or glob) that was embedded")


def texts_of_rows(table, rows, pattern: str, flag: str) -> dict:
    """{row: text} for `rows` of an embeddings table (`corpus_mining.texts_of_rows`), once
    its source files are checked to be the ones `pattern` (the value of `flag`, --src or
    --tgt) names."""
    check_sources(table, pattern, flag)
    return corpus_mining.texts_of_rows(table, rows)


def read_tables(args) -> list:
    """The embeddings tables of `--src_vectors` and `--tgt_vectors`, refused in one line
    when empty, of two widths, or not made from the texts `--src` and `--tgt` name."""
    from cmlm_tf.scale import embedding_checks, embedding_files

    sides = (("--src_vectors", args.src_vectors, "--src", args.src),
             ("--tgt_vectors", args.tgt_vectors, "--tgt", args.tgt))
    tables = []
    for flag, folder, text_flag, pattern in sides:
        table = embedding_files.read_embeddings(folder)
        if not len(table):
            raise common.UsageError(f"{flag} {folder}: holds no vectors (its texts had no "
                                    "line to embed); nothing to mine")
        check_sources(table, pattern, text_flag)
        embedding_checks.check_texts(table.manifest, folder)
        note = embedding_checks.missing_fingerprints(table.manifest, folder)
        if note is not None:
            print(f"mine: warning: {note}", file=sys.stderr, flush=True)
        tables.append(table)
    if not args.allow_different_models:
        embedding_checks.check_same_model([table.manifest for table in tables],
                                          [args.src_vectors, args.tgt_vectors])
    if tables[0].vectors.shape[1] != tables[1].vectors.shape[1]:
        raise common.UsageError(
            f"{args.src_vectors} has vectors of dim {tables[0].vectors.shape[1]} "
            f"and {args.tgt_vectors} of dim {tables[1].vectors.shape[1]}; mine "
            "vectors of one model")
    return tables


def search_settings(args) -> corpus_mining.SearchSettings:
    """The k-NN search and margin the flags ask for."""
    return corpus_mining.SearchSettings(
        k=args.k, margin=args.margin, index=args.index, backend=args.ann_backend,
        probes=args.probes, candidates=args.candidates, recall=args.recall,
        work_dir=args.work_dir, output=args.output)


def _local_matches(pattern: Optional[str]) -> list:
    """The local files a path or glob names ([] for a remote one: never written here)."""
    if not pattern or "://" in pattern:
        return []
    return glob.glob(pattern) or [pattern]


def check_outputs(args) -> None:
    """Refuses a `--output` or `--save_pcr` that is one of the inputs, inside or around one
    (`output_folders.check_apart`): writing it would replace the input."""
    inputs = {"--src": _local_matches(args.src), "--tgt": _local_matches(args.tgt),
              "--src_vectors": args.src_vectors, "--tgt_vectors": args.tgt_vectors,
              "--model": args.model, "--pcr_file": args.pcr_file}
    output_folders.check_apart(args.output, "--output", inputs)
    if args.save_pcr:
        output_folders.check_apart(args.save_pcr, "--save_pcr",
                                   {**inputs, "--output": args.output})


def run(args, beam_args: Sequence[str] = ()) -> int:
    """Mines and writes the pairs; returns how many were written."""
    check_arguments(args, beam_args)
    check_outputs(args)
    corpus_mining.remove_dead_work(search_settings(args))
    pcr = common.load_pcr(args.pcr_file)
    common.check_pcr_languages(pcr, [args.src_lang, args.tgt_lang], args.pcr_file)
    stage = progress.Stages("mine")
    try:
        if args.src_vectors is not None:
            from cmlm_tf.evaluation import suite

            stage(f"reading {args.src_vectors} and {args.tgt_vectors}")
            tables = read_tables(args)
            (src_vectors, tgt_vectors), fitted = suite.remove_components(
                [args.src_lang, args.tgt_lang], [table.vectors for table in tables],
                fit_pcr=args.pcr, pcr=pcr)
            pairs = corpus_mining.mine_vectors(search_settings(args), src_vectors, tgt_vectors,
                                               beam_args, stage=stage)
            kept = slice(None) if args.threshold is None else pairs.scores >= args.threshold
            src = texts_of_rows(tables[0], pairs.src_indices[kept], args.src, "--src")
            tgt = texts_of_rows(tables[1], pairs.tgt_indices[kept], args.tgt, "--tgt")
            print(f"mine: {len(tables[0].vectors):,} source and {len(tables[1].vectors):,} "
                  f"target sentences; {len(pairs):,} 1-to-1 pairs", file=sys.stderr)
        else:
            from cmlm_tf.evaluation import suite

            src = readers.read_sentences(args.src, skip_empty=True)
            tgt = readers.read_sentences(args.tgt, skip_empty=True)
            for flag, path, sentences in (("--src", args.src, src), ("--tgt", args.tgt, tgt)):
                if not sentences:
                    raise common.UsageError(f"{flag} {path}: no sentences (every line is "
                                            "empty); nothing to mine")
            stage(f"loading {args.model}")
            encoder = common.load_encoder(args.model, args.batch_size, stage)
            (src_vectors, tgt_vectors), fitted = suite.embed_languages(
                encoder, [(args.src_lang, src), (args.tgt_lang, tgt)], fit_pcr=args.pcr, pcr=pcr)
            pairs = corpus_mining.mine_vectors(search_settings(args), src_vectors, tgt_vectors,
                                               beam_args, stage=stage)
        if fitted is not None and args.save_pcr:
            fitted.save(args.save_pcr)
        stage(f"writing {args.output}")
        return corpus_mining.write_pairs(args.output, pairs, src, tgt, threshold=args.threshold)
    finally:
        stage.done()


def main(argv: Optional[Sequence[str]] = None) -> int:
    from cmlm_tf.scale import options

    parser = build_parser()
    args, beam_args = options.split_arguments(parser, argv)
    common.check_input_paths(parser, {"--model": args.model})

    def body():
        written = run(args, beam_args)
        print(f"{written} pairs written to {args.output}", file=sys.stderr)

    return common.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
