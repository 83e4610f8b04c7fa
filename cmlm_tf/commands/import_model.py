r"""Imports a BERT-family sentence encoder you already have, whatever form it comes in.

    python -m cmlm_tf.import_model --import_dir DIR --output_dir OUT [--overwrite]

The form is read from the files in DIR:

- `config.json` or `modules.json`: a Hugging Face or sentence-transformers folder
  (`cmlm_tf.convert_hf_bert`: BERT or XLM-RoBERTa, WordPiece or XLM-R's SentencePiece);
- `saved_model.pb`: a TF Hub BERT text encoder (Model Garden's `export_tfhub_lib` layout, as
  LaBSE v2, universal-sentence-encoder-cmlm and the BERT encoders of tfhub.dev/Kaggle Models
  are published), with its vocabulary (`assets/vocab.txt`) and `do_lower_case`;
- `bert_config.json` and a checkpoint (`bert_model.ckpt.index`, or the folder's latest): the
  original TF1 BERT checkpoint (variables `bert/...`), or Model Garden's TF2 one (a
  `BertEncoder` under `encoder` or `model`, as its TF1 converter writes it), with
  `vocab.txt` beside it.

The import is `cmlm_tf.model_import.importer`. OUT gets what `convert_hf_bert` writes: the
encoder checkpoint, the tokenizer file, `warm_start.yaml` (pass it as the first
`--config_file` of any experiment) and `source.json`. TF Hub encoders and BERT checkpoints
become `cls` pooling followed by BERT's tanh pooler as the projection, not normalised: the
TF Hub encoder's `pooled_output` (LaBSE's sentence embedding before its L2 normalisation).
Their activation: a checkpoint's `hidden_act: gelu` is BERT's tanh approximation, as in the
TF1 and Model Garden code; a TF Hub encoder's activation and LayerNorm epsilon are found by
running it and the converted encoder on the same ids, and the import is refused if no
candidate reproduces it. Casing: `do_lower_case` of a TF Hub encoder; for a checkpoint,
uncased when the vocabulary has no capitalised token (BERT's uncased vocabularies have
none).
"""

import sys

from cmlm_tf.model_import.importer import convert


def build_parser():
    from cmlm_tf.commands import common

    parser = common.ArgumentParser(
        prog="python -m cmlm_tf.import_model",
        description="Import a Hugging Face / sentence-transformers folder, a TF Hub BERT "
                    "encoder or a BERT checkpoint (TF1 or Model Garden TF2) as a cmlm_tf "
                    "encoder checkpoint with its warm_start.yaml.")
    parser.add_argument("--import_dir", required=True,
                        help="the model's folder (or a BERT checkpoint prefix)")
    parser.add_argument("--output_dir", required=True,
                        help="the import folder to write (cmlm_tf.model_import.import_folder)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing import folder")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from cmlm_tf.commands import common

    return common.run_main(lambda: print(
        f"wrote {convert(args.import_dir, args.output_dir, overwrite=args.overwrite)}"))


if __name__ == "__main__":
    sys.exit(main())
