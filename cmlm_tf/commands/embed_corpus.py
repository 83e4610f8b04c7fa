r"""Embeds a text corpus with an exported encoder, on Apache Beam, into Parquet shards.

    python -m cmlm_tf.embed_corpus --model EXPORT_DIR --input 'corpus/*.txt' \
        [--input GLOB ...] --output OUT [--text_column N] [--batch_size 64] \
        [--max_chars 100000] [--overwrite] [Beam options: --runner, --direct_num_workers, ...]

Input: one sentence per line (or, with `--text_column N`, the N-th tab-separated field);
empty and undecodable lines are skipped and counted (`cmlm_tf.scale.corpus_lines`). Output:
the folder OUT of Parquet shards (source, line, embedding) and a manifest written last
(`cmlm_tf.scale.embedding_files`; read it with `read_embeddings("OUT")` or pandas). OUT
appears complete or not at all. Without `--runner` the job runs on this machine, one worker
process per core, and prints its progress every 10 s; what else is written to stderr
meanwhile (Beam's and the workers' lines) goes to a log that the error line of a failed run
names, and Ctrl-C prints one line. Any other Beam runner takes its own
flags (`--runner=DataflowRunner --project ... --region ... --temp_location gs://...`). Needs
the `scale` extra: `pip install -e ".[scale]"`.
"""

import argparse
import glob
import os
import sys
from typing import Optional, Sequence

from cmlm_tf.commands import common
from cmlm_tf.did_you_mean import closest
from cmlm_tf.files import output_folders
from cmlm_tf.scale import corpus_lines, embedding_files, folders

_INSTALL = 'pip install -e ".[scale]"'


class _Parser(common.ArgumentParser):
    """The command's parser: a flag it does not know is Beam's, unless it looks like a
    misspelling of one of the command's own flags (`--modle`), which is reported as such."""

    def unrecognised_flags(self, given: Sequence[str]) -> list:
        own = [flag for flag in self._known_flags() if flag.startswith("--")]
        return [flag for flag in super().unrecognised_flags(given)
                if closest("--" + flag.lstrip("-").replace("-", "_"), own)]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m cmlm_tf.embed_corpus",
        description="Embed a text corpus into Parquet shards with an Apache Beam pipeline. "
                    "Flags not listed here are Beam pipeline options (--runner, "
                    "--direct_num_workers, ...).")
    parser.add_argument("--model", required=True, help="export folder (python -m cmlm_tf.export)")
    parser.add_argument("--input", required=True, action="append",
                        help="file glob, one sentence per line; repeat for more globs")
    parser.add_argument("--output", required=True,
                        help="output folder: part-*.parquet shards and a manifest")
    parser.add_argument("--text_column", type=int,
                        help="embed this tab-separated field (1-based) instead of the line")
    parser.add_argument("--batch_size", type=int, default=64, help="encode batch size")
    parser.add_argument("--max_chars", type=int, default=corpus_lines.MAX_CHARS,
                        help="cut longer lines to this many characters (default 100000)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing output folder (once the new one is complete)")
    return parser


def check_arguments(args) -> None:
    """Refuses bad arguments in one line each, before Beam or TensorFlow is imported."""
    if args.text_column is not None and args.text_column < 1:
        raise common.UsageError(f"--text_column must be 1 or more (it is 1-based), got "
                             f"{args.text_column}")
    if args.batch_size < 1:
        raise common.UsageError(f"--batch_size must be positive, got {args.batch_size}")
    if args.max_chars < 1:
        raise common.UsageError(f"--max_chars must be positive, got {args.max_chars}")
    if not folders.is_remote(args.model):
        if not os.path.isdir(args.model):
            raise common.UsageError(f"--model {args.model}: no such folder")
        if not os.path.exists(os.path.join(args.model, "cmlm_tf_export.json")):
            raise common.UsageError(f"--model {args.model}: not an export (no "
                                 "cmlm_tf_export.json); write one with python -m "
                                 "cmlm_tf.export")
    for pattern in args.input:
        if not folders.is_remote(pattern) and not any(
                os.path.isfile(path) for path in glob.glob(pattern)):
            raise common.UsageError(f"--input {pattern}: no file matches")


def import_embed():
    """`cmlm_tf.scale.embed`, or a UsageError naming the extra when Beam or pyarrow is missing.

    Beam's warnings at import about the optional filesystems it cannot load (GCS, S3 without
    their extras) are dropped: a `gs://` path then fails with Beam's own error naming the
    extra.
    """
    from cmlm_tf.scale import options

    try:
        with options.quiet_beam_import():
            from cmlm_tf.scale import embed
    except ModuleNotFoundError as error:
        package = (error.name or "").split(".")[0]
        if package not in ("apache_beam", "pyarrow"):
            raise
        raise common.UsageError(f"{package} is not installed; embed_corpus needs the scale "
                             f"extra: {_INSTALL}") from None
    return embed


def run(args, beam_args: Sequence[str]) -> int:
    """Checks the arguments, embeds, prints the summary; 1 if the pipeline failed."""
    check_arguments(args)
    output_folders.check_apart(args.output, "--output", {"--model": args.model, "--input": [
        path for pattern in args.input for path in glob.glob(pattern)]})
    try:
        notes = embedding_files.check_output(args.output, overwrite=args.overwrite)
    except embedding_files.EmbeddingFilesError as error:
        raise common.UsageError(str(error)) from None
    for note in notes:
        print(f"embed_corpus: warning: {note}", file=sys.stderr)
    embed = import_embed()
    from cmlm_tf.scale.pipeline_progress import PipelineFailed

    config = embed.EmbedConfig(model=args.model, inputs=args.input, output=args.output,
                               text_column=args.text_column, batch_size=args.batch_size,
                               max_chars=args.max_chars, overwrite=args.overwrite)
    try:
        summary = embed.run(config, beam_args=beam_args)
    except PipelineFailed as error:
        # A worker's error (a bug, a full disk, a killed worker), not a mistake in the
        # arguments: exit 1; CMLM_TF_DEBUG=1 shows Beam's traceback.
        if os.environ.get("CMLM_TF_DEBUG"):
            raise
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(summary.line(), file=sys.stderr)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from cmlm_tf.scale import options

    parser = build_parser()
    args, beam_args = options.split_arguments(parser, argv)
    common.check_input_paths(parser, {"--model": args.model})
    return common.run_main(lambda: run(args, beam_args))


if __name__ == "__main__":
    sys.exit(main())
