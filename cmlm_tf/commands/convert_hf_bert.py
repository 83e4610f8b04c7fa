r"""Converts a Hugging Face BERT or XLM-RoBERTa folder into a cmlm_tf encoder checkpoint.

    python -m cmlm_tf.convert_hf_bert --hf_dir DIR --output_dir OUT [--overwrite]

The conversion is `cmlm_tf.model_import.hf_bert` (the folder's files read by
`cmlm_tf.model_import.hf_folder`); its docstring says which files it reads and what it writes
to OUT: the encoder checkpoint, the vocabulary, `warm_start.yaml` (the first `--config_file`
of any experiment) and `source.json`. Anything it cannot convert (another `model_type`,
module or pooling mode) is refused with one line naming the file and the field.
"""

import sys

from cmlm_tf.model_import.hf_bert import convert


def build_parser():
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m cmlm_tf.convert_hf_bert",
        description="Convert a Hugging Face BERT or XLM-RoBERTa folder into a cmlm_tf encoder "
                    "checkpoint.")
    parser.add_argument("--hf_dir", required=True,
                        help="folder with config.json, model.safetensors and the tokenizer "
                             "(vocab.txt, tokenizer.json or sentencepiece.bpe.model)")
    parser.add_argument("--output_dir", required=True,
                        help="the import folder to write (cmlm_tf.model_import.import_folder)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing import folder")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from cmlm_tf.commands import common

    return common.run_main(lambda: print(
        f"wrote {convert(args.hf_dir, args.output_dir, overwrite=args.overwrite)}"))


if __name__ == "__main__":
    sys.exit(main())
