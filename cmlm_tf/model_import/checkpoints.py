"""BERT checkpoints with `bert_config.json` and `vocab.txt` beside them: the original TF1
BERT checkpoint (variables `bert/...`) or Model Garden's TF2 one (a `BertEncoder` under
`encoder` or `model`, as its TF1 converter writes it).

Their `hidden_act: gelu` is BERT's tanh approximation, as in the TF1 and Model Garden code;
casing is uncased when the vocabulary has no capitalised token.
"""

import glob
import os
import re
from typing import Tuple

import tensorflow as tf
from official.legacy.bert import configs as bert_configs
from official.nlp.tools import export_tfhub_lib

from cmlm_tf.model_import import bert_weights, hf_folder, pooled_bert

BERT_CONFIG_FILE = "bert_config.json"
# A checkpoint's `hidden_act` -> EncoderConfig.hidden_activation (BERT's TF code and Model
# Garden's `gelu` are the tanh approximation).
_CHECKPOINT_ACTIVATIONS = {"gelu": "gelu_approx", "gelu_new": "gelu_approx",
                           "relu": "relu", "swish": "swish", "silu": "swish"}
# What a TF Hub encoder may have been built with, tried in this order.


def checkpoint_prefix(folder: str) -> str:
    """The checkpoint beside `bert_config.json`: the folder's latest, else its one `*.index`."""
    latest = tf.train.latest_checkpoint(folder)
    if latest:
        return latest
    indexes = sorted(glob.glob(os.path.join(folder, "*.index")))
    if len(indexes) != 1:
        found = ", ".join(os.path.basename(index) for index in indexes) or "none"
        raise FileNotFoundError(f"{folder}: expected one checkpoint (*.index) beside "
                                f"{BERT_CONFIG_FILE}, found {found}")
    return indexes[0][:-len(".index")]


def checkpoint_family(prefix: str) -> Tuple[str, str]:
    """(`tf1_checkpoint` or `tf2_checkpoint`, prefix) by the checkpoint's variable names."""
    try:
        names = [name for name, _ in tf.train.list_variables(prefix)]
    except (tf.errors.OpError, ValueError) as e:
        raise ValueError(f"{prefix}: cannot read the checkpoint "
                         f"({str(e).strip().splitlines()[0]})") from None
    if any(name.startswith("bert/") for name in names):
        return "tf1_checkpoint", prefix
    if any(name.split("/", 1)[0] in ("encoder", "model") for name in names):
        return "tf2_checkpoint", prefix
    raise ValueError(f"{prefix}: the checkpoint holds neither bert/... variables (TF1 BERT) "
                     "nor an encoder or model object (Model Garden)")


def read_checkpoint(family: str, prefix: str):
    """(encoder, import metadata, vocabulary) of a TF1 or Model Garden TF2 BERT checkpoint."""
    folder = os.path.dirname(prefix)
    config_path = os.path.join(folder, BERT_CONFIG_FILE)
    config = hf_folder.read_json(config_path, required=True)
    act = config.get("hidden_act", "gelu")
    if act not in _CHECKPOINT_ACTIVATIONS:
        raise ValueError(f"{config_path}: hidden_act {act!r} is not supported "
                         f"({', '.join(_CHECKPOINT_ACTIVATIONS)})")
    embedding_size = config.get("embedding_size")
    if embedding_size not in (None, config.get("hidden_size")):
        raise ValueError(f"{config_path}: embedding_size {embedding_size} differs from "
                         "hidden_size (factorised embeddings are not supported)")
    try:
        fields = pooled_bert.encoder_fields(
            vocab_size=int(config["vocab_size"]), hidden_size=int(config["hidden_size"]),
            num_layers=int(config["num_hidden_layers"]),
            num_attention_heads=int(config["num_attention_heads"]),
            intermediate_size=int(config["intermediate_size"]),
            hidden_activation=_CHECKPOINT_ACTIVATIONS[act],
            max_position_embeddings=int(config.get("max_position_embeddings", 512)),
            type_vocab_size=int(config.get("type_vocab_size", 2)),
            dropout_rate=float(config.get("hidden_dropout_prob", 0.1)),
            attention_dropout_rate=float(config.get("attention_probs_dropout_prob", 0.1)),
            initializer_range=float(config.get("initializer_range", 0.02)),
            layer_norm_epsilon=1e-12)
    except KeyError as e:
        raise ValueError(f"{config_path}: field {e.args[0]} is missing") from None
    vocab = hf_folder.read_vocab_file(os.path.join(folder, "vocab.txt"))
    if len(vocab) != fields["vocab_size"]:
        raise ValueError(f"{os.path.join(folder, 'vocab.txt')}: {len(vocab)} tokens, but "
                         f"{BERT_CONFIG_FILE} says vocab_size {fields['vocab_size']}")
    if family == "tf1_checkpoint":
        mapped, pooler = _tf1_tensors(prefix, fields)
    else:
        mapped, pooler = _tf2_tensors(prefix, config_path)
    encoder = pooled_bert.build_pooled_encoder(fields, mapped, pooler, prefix)
    return encoder, pooled_bert.import_meta(fields, lower_case=pooled_bert.is_uncased(vocab)), vocab


def _tf1_tensors(prefix: str, fields: dict):
    """The original BERT's variables (`bert/encoder/layer_0/attention/self/query/kernel`
    [in, out], ...), renamed to Hugging Face's (which were made from them) and mapped as
    `convert_hf_bert` maps those. The MLM and NSP heads, `global_step` and optimizer slots are
    left out."""
    reader = tf.train.load_checkpoint(prefix)
    hf_names, pooler = {}, {}
    for name in reader.get_variable_to_shape_map():
        if not name.startswith("bert/") or re.search(r"/adam_[mv]$", name):
            continue
        value = reader.get_tensor(name)
        if name.startswith("bert/pooler/dense/"):
            pooler[name.rsplit("/", 1)[1]] = value
            continue
        key = re.sub(r"layer_(\d+)", r"layer.\1", name[len("bert/"):]).replace("/", ".")
        if key.endswith(".kernel"):
            key, value = key[:-len("kernel")] + "weight", value.T
        elif re.fullmatch(r"embeddings\.\w+_embeddings", key):
            key += ".weight"
        hf_names[key] = value
    mapped = bert_weights.map_hf_tensors(hf_names, fields["num_layers"],
                                         fields["num_attention_heads"], prefix)
    return mapped, pooler


def _tf2_tensors(prefix: str, config_path: str):
    """Model Garden's TF2 checkpoint, read as Model Garden reads it (`export_tfhub_lib`): a
    `BertEncoder` restored from `model` or `encoder`."""
    bert = export_tfhub_lib.get_bert_encoder(bert_configs.BertConfig.from_json_file(config_path))
    try:
        tf.train.Checkpoint(model=bert, encoder=bert).read(
            prefix).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise ValueError(f"{prefix}: not a Model Garden BERT encoder checkpoint for "
                         f"{BERT_CONFIG_FILE} ({str(e).strip().splitlines()[0][:200]})") from None
    return pooled_bert.split_pooler(pooled_bert.model_garden_names(bert.weights))
