"""Imports a BERT-family sentence encoder, whatever form it comes in, into an import folder
(`cmlm_tf.model_import.import_folder`). The form is read from the files of the model's folder:

- `config.json` or `modules.json`: a Hugging Face or sentence-transformers folder
  (`hf_bert.py`: BERT or XLM-RoBERTa, WordPiece or XLM-R's SentencePiece);
- `saved_model.pb`: a TF Hub BERT text encoder (Model Garden's `export_tfhub_lib` layout, as
  LaBSE v2, universal-sentence-encoder-cmlm and the BERT encoders of tfhub.dev/Kaggle Models
  are published), with its vocabulary (`assets/vocab.txt`) and `do_lower_case` (`hub.py`);
- `bert_config.json` and a checkpoint (`bert_model.ckpt.index`, or the folder's latest): the
  original TF1 BERT checkpoint (variables `bert/...`), or Model Garden's TF2 one (a
  `BertEncoder` under `encoder` or `model`, as its TF1 converter writes it), with
  `vocab.txt` beside it (`checkpoints.py`).

The import folder gets what `hf_bert.convert` writes: the encoder checkpoint, the tokenizer file,
`warm_start.yaml` (pass it as the first `--config_file` of any experiment) and
`source.json`. TF Hub encoders and BERT checkpoints become `cls` pooling followed by BERT's
tanh pooler as the projection, not normalised: the TF Hub encoder's `pooled_output` (LaBSE's
sentence embedding before its L2 normalisation). Their activation: a checkpoint's
`hidden_act: gelu` is BERT's tanh approximation, as in the TF1 and Model Garden code; a TF
Hub encoder's activation and LayerNorm epsilon are found by running it and the converted
encoder on the same ids, and the import is refused if no candidate reproduces it. Casing:
`do_lower_case` of a TF Hub encoder; for a checkpoint, uncased when the vocabulary has no
capitalised token (BERT's uncased vocabularies have none).
"""

import os
from typing import Tuple

from cmlm_tf.export.export_metadata import SENTENCE_TRANSFORMERS_FOLDER
from cmlm_tf.inference import METADATA_FILE
from cmlm_tf.model_import import checkpoints, hf_bert, hub, import_folder

# What `detect` tells apart -> how an export's README names it.
FAMILIES = {"hugging_face": "Hugging Face", "tf_hub": "TF Hub encoder",
            "tf1_checkpoint": "TF1 BERT checkpoint",
            "tf2_checkpoint": "Model Garden TF2 checkpoint"}


def detect(path: str) -> Tuple[str, str]:
    """(family, where): the family of FAMILIES and the folder or checkpoint prefix to read."""
    export = _cmlm_tf_export(path)
    if export is not None:
        raise ValueError(
            f"{path}: is {'part of ' if export != os.path.abspath(path) else ''}a cmlm_tf "
            f"export ({export}); load it with cmlm_tf.load or hub.KerasLayer, or pass the "
            "training run or import folder it was exported from as --model_dir")
    if os.path.isdir(path):
        names = set(os.listdir(path))
        if import_folder.WARM_START_FILE in names and "config.json" not in names:
            raise ValueError(
                f"{path}: is already an import folder; pass its "
                f"{import_folder.WARM_START_FILE} as the first --config_file, or export it "
                "with --model_dir")
        if "saved_model.pb" in names:
            return "tf_hub", path
        if "config.json" in names or "modules.json" in names:
            return "hugging_face", path
        if checkpoints.BERT_CONFIG_FILE in names:
            return checkpoints.checkpoint_family(checkpoints.checkpoint_prefix(path))
    elif os.path.exists(path + ".index"):
        return checkpoints.checkpoint_family(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: model folder not found")
    raise ValueError(f"{path}: not a model this can import: no config.json (Hugging Face), "
                     f"saved_model.pb (TF Hub) or {checkpoints.BERT_CONFIG_FILE} with a checkpoint "
                     "(BERT)")


def _cmlm_tf_export(path: str):
    """The cmlm_tf export `path` is, or is a folder of (`serving/1`, `encoder`,
    `preprocessor`), or None. An export's sentence-transformers folder is a Hugging Face
    folder like any other: None."""
    folder = os.path.normpath(os.path.abspath(path))
    if os.path.basename(folder) == SENTENCE_TRANSFORMERS_FOLDER and \
            os.path.isfile(os.path.join(os.path.dirname(folder), METADATA_FILE)):
        return None
    for _ in range(3):
        if os.path.isfile(os.path.join(folder, METADATA_FILE)):
            return folder
        folder = os.path.dirname(folder)
    return None


def convert(path: str, output_dir: str, *, overwrite: bool = False) -> str:
    """Imports `path` (any family) into the import folder `output_dir`
    (`cmlm_tf.model_import.import_folder`; an existing one is replaced only with `overwrite`);
    returns the path of `warm_start.yaml`."""
    output_dir = import_folder.check_output(output_dir, overwrite=overwrite)
    family, where = detect(path)
    if family == "hugging_face":
        return hf_bert.convert(where, output_dir, overwrite=overwrite)
    if family == "tf_hub":
        encoder, meta, vocab = hub.read_hub(where)
    else:
        encoder, meta, vocab = checkpoints.read_checkpoint(family, where)
    return import_folder.write(encoder, meta, vocab, output_dir,
                               source={"source_dir": os.path.abspath(path), "family": family},
                               overwrite=overwrite)
