r"""Command line of the exporter.

    python -m cmlm_tf.export --export_dir OUT \
        (--model_dir DIR [--checkpoint CKPT] [--encoder_key encoder] | --hf_dir DIR) \
        [--seq_length N] [--tflite] [--bf16] [--int8] [--sentence_transformers] [--onnx] \
        [--keras_hub] [--classic_wordpiece] [--overwrite]

`--model_dir` is a training run (`params.yaml` + checkpoints) or a folder written by
`cmlm_tf.convert_hf_bert` or `cmlm_tf.import_model` (`warm_start.yaml`); `--hf_dir` (or
`--import_dir`) imports a Hugging Face / sentence-transformers folder, a TF Hub BERT encoder or
a BERT checkpoint on the fly. Arguments are checked before TensorFlow is imported, and so is
`--export_dir`: `--overwrite` replaces only an export (`cmlm_tf.files.output_folders`), never a
source, and an export up to date with the checkpoint and the flags is kept as it is.
"""

import argparse
import os
import sys

# Standard library only at import time: errors in the arguments come before TensorFlow.
from cmlm_tf.export import export_lib, formats, source, staging


def build_parser(prog: str = "python -m cmlm_tf.export") -> argparse.ArgumentParser:
    from cmlm_tf.commands import common

    parser = common.ArgumentParser(
        prog=prog,
        description="Export a cmlm_tf encoder as TF Hub preprocessor + encoder SavedModels "
                    "and a TF Serving model, and in the formats its flags name.")
    parser.add_argument("--export_dir", required=True, help="folder to write")
    parser.add_argument("--model_dir",
                        help="training run or convert_hf_bert output folder")
    parser.add_argument("--checkpoint", help="checkpoint prefix (default: the latest)")
    parser.add_argument("--encoder_key", default="encoder",
                        help="checkpoint item holding the encoder (e.g. target_encoder)")
    parser.add_argument("--hf_dir", "--import_dir", dest="hf_dir",
                        help="model to import and export: a Hugging Face / "
                             "sentence-transformers folder, a TF Hub BERT encoder or a BERT "
                             "checkpoint folder (cmlm_tf.import_model)")
    parser.add_argument("--seq_length", type=int, default=None,
                        help="default: the HF folder's max_seq_length, else the training "
                             f"run's seq_length, else {source.DEFAULT_SEQ_LENGTH}")
    formats.add_flags(parser)  # --tflite, --bf16, --int8, ... (cmlm_tf.export.formats)
    parser.add_argument("--classic_wordpiece", action="store_true",
                        help="serving/1 tokenizes WordPiece with the classic TF-Text ops "
                             "(TF Serving 2.2-2.11) instead of the fast ones (2.12+)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    return parser


def main(argv=None, prog: str = "python -m cmlm_tf.export") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if bool(args.model_dir) == bool(args.hf_dir):
        parser.error("pass exactly one of --model_dir and --hf_dir")
    from cmlm_tf import progress
    from cmlm_tf.commands import common

    common.check_input_paths(parser, {"--model_dir": args.model_dir,
                                   "--hf_dir/--import_dir": args.hf_dir})
    if args.seq_length is not None and args.seq_length < 3:
        parser.error(f"--seq_length must be at least 3, got {args.seq_length}")

    def body():
        # From the files, before TensorFlow starts: an output it may not write, or an input.
        staging.check_export_dir(args.export_dir, model_dir=args.model_dir, hf_dir=args.hf_dir,
                                 checkpoint=args.checkpoint)
        staging.check_replaceable(args.export_dir, overwrite=args.overwrite)
        flags = {export_format.name: getattr(args, export_format.name)
                 for export_format in formats.FLAGGED}
        formats.require(flags)
        # Said at once (the export itself takes seconds to minutes, and ends with its path).
        print(f"exporting {args.model_dir or args.hf_dir} to {args.export_dir}", flush=True)
        stage = progress.Stages("export")  # its timer runs from here: TensorFlow loads slowly
        stage("starting TensorFlow")
        try:
            if args.model_dir and args.overwrite and os.path.isdir(args.export_dir):
                options = export_lib.export_options(
                    seq_length=args.seq_length, classic_wordpiece=args.classic_wordpiece,
                    encoder_key=args.encoder_key, **flags)
                current = export_lib.up_to_date(args.export_dir, args.model_dir,
                                                args.checkpoint, options)
                if current is not None:
                    print(f"{args.export_dir} is up to date with {current} of "
                          f"{args.model_dir}: kept as it is (--overwrite exports again "
                          "once the checkpoint or a flag has changed)")
                    return
            path = export_lib.export(args.export_dir, model_dir=args.model_dir,
                                     checkpoint=args.checkpoint, encoder_key=args.encoder_key,
                                     hf_dir=args.hf_dir, seq_length=args.seq_length,
                                     overwrite=args.overwrite,
                                     classic_wordpiece=args.classic_wordpiece, stage=stage,
                                     **flags)
        finally:
            stage.done()
        print(f"exported to {path}")

    return common.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
