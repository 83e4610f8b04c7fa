"""A BERT whose sentence vector is its pooled output, as TF Hub encoders and BERT
checkpoints are imported: `cls` pooling followed by BERT's tanh pooler as the projection,
not normalised (the TF Hub encoder's `pooled_output`, LaBSE's embedding before its
normalisation). Its EncoderConfig fields, Model Garden's variable names, and the encoder
built with the weights."""

import re
from typing import Dict, List

import numpy as np

from cmlm_tf import configs
from cmlm_tf.model_import import bert_weights
from cmlm_tf.modeling import sentence_encoder


def import_meta(encoder: dict, *, lower_case: bool) -> dict:
    """`read_hf_metadata`'s fields for a WordPiece BERT of `encoder` fields."""
    return {"encoder": encoder, "tokenizer_type": "wordpiece", "lower_case": lower_case,
            "max_seq_length": None, "position_offset": 0}


def encoder_fields(**fields) -> dict:
    """EncoderConfig fields of a BERT whose sentence vector is its pooled output."""
    return {"pooling": "cls", "projection_size": fields["hidden_size"],
            "projection_activation": "tanh", "normalize": False, **fields}


def is_uncased(vocab: List[str]) -> bool:
    """True when the vocabulary has no capitalised token (BERT's uncased ones have none)."""
    return not any(token[:1].isupper() for token in vocab
                   if not (token.startswith("[") and token.endswith("]")))


def model_garden_names(variables) -> Dict[str, np.ndarray]:
    """{`word_embeddings/embeddings`, `transformer/layer_0/...`, `pooler_transform/kernel`:
    value} from Model Garden BERT encoder variables, whatever scope they sit in."""
    named = {}
    for variable in variables:
        name = variable.name.split(":")[0]
        match = re.search(r"(word_embeddings/.*|position_embedding/.*|type_embeddings/.*|"
                          r"embeddings/layer_norm/.*|transformer/layer_\d+/.*|"
                          r"pooler_transform/.*)$", name)
        if match:
            named[match.group(1)] = variable.numpy()
    return named


def split_pooler(named: Dict[str, np.ndarray]):
    """(`named` without the pooler, {`kernel`, `bias`: the pooler's value})."""
    pooler = {key.split("/")[1]: named.pop(key) for key in list(named)
              if key.startswith("pooler_transform/")}
    return named, pooler


def build_pooled_encoder(fields: dict, mapped: Dict[str, np.ndarray],
                         pooler: Dict[str, np.ndarray], source: str):
    """A sentence encoder of `fields` with the BERT weights `mapped` and the pooler as its
    projection."""
    if set(pooler) != {"kernel", "bias"}:
        raise ValueError(f"{source}: no pooler (pooler/dense or pooler_transform) kernel and "
                         "bias: the pooled output cannot be reproduced")
    encoder = sentence_encoder.build_sentence_encoder(configs.EncoderConfig(**fields))
    bert_weights.assign_bert_weights(encoder, mapped, source)
    bert_weights.assign(encoder.projection.kernel, pooler["kernel"], source, "pooler kernel")
    bert_weights.assign(encoder.projection.bias, pooler["bias"], source, "pooler bias")
    return encoder
