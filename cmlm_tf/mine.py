r"""Mines translation pairs from two plain-text files with an exported encoder.

    python -m cmlm_tf.mine --model EXPORT_DIR --src en.txt --tgt es.txt --output pairs.tsv \
        [--threshold T] [--margin ratio|distance] [--k 4] \
        [--pcr | --pcr_file F --src_lang en --tgt_lang es]

Input: one sentence per line (empty lines are skipped). Output: `score<TAB>src<TAB>tgt`, one
1-to-1 pair per line, sorted by descending margin score (LASER margin, `max` retrieval; see
`cmlm_tf.evaluation.mining`); all pairs unless `--threshold` is given. Tabs inside a sentence
are written as spaces so every output line has three fields. Memory grows as N·k: no full
similarity matrix is built.
"""

import argparse
import os
import sys
from typing import Optional, Sequence

from cmlm_tf import cli, disk
from cmlm_tf.evaluation import mining, readers


def build_parser() -> argparse.ArgumentParser:
    parser = cli.ArgumentParser(
        prog="python -m cmlm_tf.mine",
        description="Mine 1-to-1 translation pairs from two text files (margin scoring).")
    parser.add_argument("--model", required=True, help="export folder (python -m cmlm_tf.export)")
    parser.add_argument("--src", required=True, help="source sentences, one per line")
    parser.add_argument("--tgt", required=True, help="target sentences, one per line")
    parser.add_argument("--output", required=True, help="pairs file: score<TAB>src<TAB>tgt")
    parser.add_argument("--threshold", type=float,
                        help="keep pairs scoring at least this (default: keep all)")
    parser.add_argument("--margin", choices=mining.MARGINS, default="ratio")
    parser.add_argument("--k", type=int, default=4, help="neighbours for the margin (default 4)")
    parser.add_argument("--batch_size", type=int, default=64, help="encode batch size")
    cli.add_pcr_arguments(parser)
    return parser


def write_pairs(path: str, pairs: mining.MinedPairs, src: Sequence[str], tgt: Sequence[str],
                threshold: Optional[float] = None) -> int:
    """Writes `score<TAB>src<TAB>tgt` lines (pairs already sorted); returns how many.

    The file appears complete or not at all (`cmlm_tf.disk.atomic_output`).
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


def run(args) -> int:
    """Mines and writes the pairs; returns how many were written."""
    from cmlm_tf.evaluation import suite

    if args.k < 1:
        raise cli.UsageError(f"--k must be positive, got {args.k}")
    if args.batch_size <= 0:
        raise cli.UsageError(f"--batch_size must be positive, got {args.batch_size}")
    if args.save_pcr and not args.pcr:
        raise cli.UsageError("--save_pcr needs --pcr (there is nothing fitted to save)")
    src = readers.read_sentences(args.src, skip_empty=True)
    tgt = readers.read_sentences(args.tgt, skip_empty=True)
    pcr = cli.load_pcr(args.pcr_file)
    cli.check_pcr_languages(pcr, [args.src_lang, args.tgt_lang], args.pcr_file)
    stage = cli.Stages("mine")
    try:
        stage(f"loading {args.model}")
        encoder = cli.load_encoder(args.model, args.batch_size, stage)
        sides = []

        def encode(texts):
            # After the second side: the k-nearest-neighbour search and margin scoring.
            vectors = encoder(texts)
            sides.append(len(texts))
            if len(sides) == 2:
                stage(f"scoring candidate pairs ({args.margin} margin, k={args.k})")
            return vectors

        pairs, fitted = suite.mine_texts(encode, src, tgt, k=args.k, margin=args.margin,
                                         src_lang=args.src_lang, tgt_lang=args.tgt_lang,
                                         fit_pcr=args.pcr, pcr=pcr)
        if fitted is not None and args.save_pcr:
            fitted.save(args.save_pcr)
        stage(f"writing {args.output}")
        return write_pairs(args.output, pairs, src, tgt, args.threshold)
    finally:
        stage.done()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    cli.quiet_tensorflow_logs()

    def body():
        written = run(args)
        print(f"{written} pairs written to {args.output}", file=sys.stderr)

    return cli.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
