"""The XLM-R family's part of the KerasHub preset (`keras_hub_preset.py`): a
sentence-transformers folder holding Transformers' `XLMRobertaModel` and XLM-R's SentencePiece
tokenizer (`xlmr_tokenizer_json.py`) becomes

- `XLMRobertaBackbone`, read from the folder by KerasHub's own Hugging Face converter, which
  drops the two position rows before RoBERTa's first position id and adds the one token-type
  row into the position table (cmlm_tf's encoder reads type id 0 only);
- `XLMRobertaTokenizer` over the folder's `sentencepiece.bpe.model`, the model cmlm_tf's
  preprocessor runs, shifted to fairseq's ids as `xlmr_tokenizer_json` shifts them;
- `XLMRobertaTextEmbedderPreprocessor`: `<s> text </s>`, truncated to the export's sequence
  length;
- where the head is pooling and L2 normalisation only, `XLMRobertaTextEmbedder`.

KerasHub's RoBERTa backbones return the sequence output itself, not a dict (`HIDDEN`).
"""

import os

from cmlm_tf.export import xlmr_tokenizer_json

__all__ = ["BACKBONE", "HIDDEN", "TOKENIZER_TYPE", "build_preprocessor", "layout_parts"]
TOKENIZER_TYPE = "xlmr_sentencepiece"  # task.model.tokenizer.type of the family
BACKBONE = "XLMRobertaBackbone"
# The backbone's call on the preprocessor's `inputs`, as the model card writes it.
HIDDEN = "backbone(inputs)"
# What `XLMRobertaBackbone` runs, whatever the model's config says.
_BACKBONE_ACTIVATION = "gelu_exact"
_BACKBONE_EPSILON = 1e-5


def layout_parts(metadata: dict, flag: str) -> dict:
    """The preset's `tokenizer` and `backbone` entries for a folder of XLM-R's tokenizer, as
    `hf_folder.read_hf_metadata` reads it; the backbone's notes say where KerasHub runs
    something other than the model's. Raises ValueError, one line starting with `flag`, for
    a BERT encoder under XLM-R's tokenizer (a folder cmlm_tf's export does not write), which
    no KerasHub backbone reads with that tokenizer."""
    if metadata["position_offset"] != xlmr_tokenizer_json.PAD_ID + 1:
        raise ValueError(f"{flag}: a BERT encoder with XLM-R's SentencePiece tokenizer has no "
                         "KerasHub preset; only XLM-RoBERTa encoders (XLMRobertaModel) are "
                         "written with XLMRobertaTokenizer")
    encoder, notes = metadata["encoder"], []
    if encoder["hidden_activation"] != _BACKBONE_ACTIVATION:
        notes.append("the tanh approximation of GELU runs as KerasHub's exact (erf) GELU")
    if encoder["layer_norm_epsilon"] != _BACKBONE_EPSILON:
        notes.append(f"LayerNorm epsilon {encoder['layer_norm_epsilon']:g} runs as "
                     f"KerasHub's {_BACKBONE_EPSILON:g}")
    return {"tokenizer": {"class": "XLMRobertaTokenizer",
                          "proto": xlmr_tokenizer_json.MODEL_FILE},
            "backbone": {"class": BACKBONE, "notes": notes}}


def build_preprocessor(keras_hub, st_folder: str, layout: dict) -> tuple:
    """In the Keras 3 child: the preset's preprocessor (its tokenizer inside) over the
    SentencePiece model of `st_folder`, and the `TextEmbedder` class of the family."""
    tokenizer = keras_hub.models.XLMRobertaTokenizer(
        proto=os.path.join(st_folder, layout["tokenizer"]["proto"]))
    preprocessor = keras_hub.models.XLMRobertaTextEmbedderPreprocessor(
        tokenizer, sequence_length=layout["sequence_length"])
    return preprocessor, keras_hub.models.XLMRobertaTextEmbedder
