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

OUT gets what `convert_hf_bert` writes: the encoder checkpoint, the tokenizer file,
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

import glob
import os
import re
import sys
from typing import Dict, List, Tuple

import numpy as np

from cmlm_tf import convert_hf_bert, import_folder

# What `detect` tells apart -> how an export's README names it.
FAMILIES = {"hugging_face": "Hugging Face", "tf_hub": "TF Hub encoder",
            "tf1_checkpoint": "TF1 BERT checkpoint",
            "tf2_checkpoint": "Model Garden TF2 checkpoint"}
BERT_CONFIG_FILE = "bert_config.json"
# A checkpoint's `hidden_act` -> EncoderConfig.hidden_activation (BERT's TF code and Model
# Garden's `gelu` are the tanh approximation).
_CHECKPOINT_ACTIVATIONS = {"gelu": "gelu_approx", "gelu_new": "gelu_approx",
                           "relu": "relu", "swish": "swish", "silu": "swish"}
# What a TF Hub encoder may have been built with, tried in this order.
_HUB_ACTIVATIONS = ("gelu_approx", "gelu_exact", "relu")
_HUB_EPSILONS = (1e-12, 1e-6, 1e-5)
_MATCH_TOLERANCE = 1e-4


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
        if BERT_CONFIG_FILE in names:
            return _checkpoint_family(_checkpoint_prefix(path))
    elif os.path.exists(path + ".index"):
        return _checkpoint_family(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: model folder not found")
    raise ValueError(f"{path}: not a model this can import: no config.json (Hugging Face), "
                     f"saved_model.pb (TF Hub) or {BERT_CONFIG_FILE} with a checkpoint (BERT)")


def _cmlm_tf_export(path: str):
    """The cmlm_tf export `path` is, or is a folder of (`serving/1`, `encoder`,
    `preprocessor`), or None."""
    from cmlm_tf.inference import METADATA_FILE

    folder = os.path.normpath(os.path.abspath(path))
    for _ in range(3):
        if os.path.isfile(os.path.join(folder, METADATA_FILE)):
            return folder
        folder = os.path.dirname(folder)
    return None


def _checkpoint_prefix(folder: str) -> str:
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(folder)
    if latest:
        return latest
    indexes = sorted(glob.glob(os.path.join(folder, "*.index")))
    if len(indexes) != 1:
        found = ", ".join(os.path.basename(index) for index in indexes) or "none"
        raise FileNotFoundError(f"{folder}: expected one checkpoint (*.index) beside "
                                f"{BERT_CONFIG_FILE}, found {found}")
    return indexes[0][:-len(".index")]


def _checkpoint_family(prefix: str) -> Tuple[str, str]:
    import tensorflow as tf

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


def convert(path: str, output_dir: str, overwrite: bool = False) -> str:
    """Imports `path` (any family) into the import folder `output_dir`
    (`cmlm_tf.import_folder`; an existing one is replaced only with `overwrite`); returns the
    path of `warm_start.yaml`."""
    output_dir = import_folder.check_output(output_dir, overwrite)
    family, where = detect(path)
    if family == "hugging_face":
        return convert_hf_bert.convert(where, output_dir, overwrite=overwrite)
    if family == "tf_hub":
        encoder, meta, vocab = _read_hub(where)
    else:
        encoder, meta, vocab = _read_checkpoint(family, where)
    return import_folder.write(encoder, meta, vocab, output_dir,
                               {"source_dir": os.path.abspath(path), "family": family},
                               overwrite=overwrite)


def _meta(encoder: dict, lower_case: bool) -> dict:
    return {"encoder": encoder, "tokenizer_type": "wordpiece", "lower_case": lower_case,
            "max_seq_length": None, "position_offset": 0}


def _encoder_fields(**fields) -> dict:
    """EncoderConfig fields of a BERT whose sentence vector is its pooled output."""
    return {"pooling": "cls", "projection_size": fields["hidden_size"],
            "projection_activation": "tanh", "normalize": False, **fields}


def _is_uncased(vocab: List[str]) -> bool:
    return not any(token[:1].isupper() for token in vocab
                   if not (token.startswith("[") and token.endswith("]")))


def _read_checkpoint(family: str, prefix: str):
    folder = os.path.dirname(prefix)
    config_path = os.path.join(folder, BERT_CONFIG_FILE)
    config = convert_hf_bert._read_json(config_path, required=True)
    act = config.get("hidden_act", "gelu")
    if act not in _CHECKPOINT_ACTIVATIONS:
        raise ValueError(f"{config_path}: hidden_act {act!r} is not supported "
                         f"({', '.join(_CHECKPOINT_ACTIVATIONS)})")
    embedding_size = config.get("embedding_size")
    if embedding_size not in (None, config.get("hidden_size")):
        raise ValueError(f"{config_path}: embedding_size {embedding_size} differs from "
                         "hidden_size (factorised embeddings are not supported)")
    try:
        fields = _encoder_fields(
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
    vocab = convert_hf_bert.read_vocab_file(os.path.join(folder, "vocab.txt"))
    if len(vocab) != fields["vocab_size"]:
        raise ValueError(f"{os.path.join(folder, 'vocab.txt')}: {len(vocab)} tokens, but "
                         f"{BERT_CONFIG_FILE} says vocab_size {fields['vocab_size']}")
    if family == "tf1_checkpoint":
        mapped, pooler = _tf1_tensors(prefix, fields)
    else:
        mapped, pooler = _tf2_tensors(prefix, config_path)
    encoder = _build(fields, mapped, pooler, prefix)
    return encoder, _meta(fields, _is_uncased(vocab)), vocab


def _tf1_tensors(prefix: str, fields: dict):
    """The original BERT's variables (`bert/encoder/layer_0/attention/self/query/kernel`
    [in, out], ...), renamed to Hugging Face's (which were made from them) and mapped as
    `convert_hf_bert` maps those. The MLM and NSP heads, `global_step` and optimizer slots are
    left out."""
    import tensorflow as tf

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
    mapped = convert_hf_bert._map_hf_tensors(hf_names, fields["num_layers"],
                                             fields["num_attention_heads"], prefix)
    return mapped, pooler


def _model_garden_names(variables) -> Dict[str, np.ndarray]:
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


def _split_pooler(named: Dict[str, np.ndarray]):
    pooler = {key.split("/")[1]: named.pop(key) for key in list(named)
              if key.startswith("pooler_transform/")}
    return named, pooler


def _tf2_tensors(prefix: str, config_path: str):
    """Model Garden's TF2 checkpoint, read as Model Garden reads it (`export_tfhub_lib`): a
    `BertEncoder` restored from `model` or `encoder`."""
    import tensorflow as tf
    from official.legacy.bert import configs as bert_configs
    from official.nlp.tools import export_tfhub_lib

    bert = export_tfhub_lib.get_bert_encoder(bert_configs.BertConfig.from_json_file(config_path))
    try:
        tf.train.Checkpoint(model=bert, encoder=bert).read(
            prefix).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise ValueError(f"{prefix}: not a Model Garden BERT encoder checkpoint for "
                         f"{BERT_CONFIG_FILE} ({str(e).strip().splitlines()[0][:200]})") from None
    return _split_pooler(_model_garden_names(bert.weights))


def _build(fields: dict, mapped: Dict[str, np.ndarray], pooler: Dict[str, np.ndarray],
           source: str):
    from cmlm_tf import configs
    from cmlm_tf.modeling import sentence_encoder

    if set(pooler) != {"kernel", "bias"}:
        raise ValueError(f"{source}: no pooler (pooler/dense or pooler_transform) kernel and "
                         "bias: the pooled output cannot be reproduced")
    encoder = sentence_encoder.build_sentence_encoder(configs.EncoderConfig(**fields))
    convert_hf_bert.assign_bert_weights(encoder, mapped, source)
    convert_hf_bert._assign(encoder.projection.kernel, pooler["kernel"], source,
                            "pooler kernel")
    convert_hf_bert._assign(encoder.projection.bias, pooler["bias"], source, "pooler bias")
    return encoder


def _read_hub(folder: str):
    """A TF Hub BERT encoder: weights by Model Garden's variable names, the shape of the
    network from the weights, the activation and epsilon from running it."""
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(folder)
    except (tf.errors.OpError, ValueError, OSError) as e:
        raise ValueError(f"{folder}: cannot load the SavedModel "
                         f"({str(e).strip().splitlines()[0][:200]})") from None
    named, pooler = _split_pooler(_model_garden_names(loaded.variables))
    if "word_embeddings/embeddings" not in named:
        raise ValueError(f"{folder}: no word_embeddings/embeddings variable: not a Model "
                         "Garden BERT encoder")
    vocab_asset = getattr(loaded, "vocab_file", None)
    if vocab_asset is None:
        raise ValueError(f"{folder}: the encoder has no vocab_file (a SentencePiece or "
                         "preprocessor-only tokenizer is not supported)")
    vocab = convert_hf_bert.read_vocab_file(vocab_asset.asset_path.numpy().decode("utf-8"))
    lower_case = bool(loaded.do_lower_case.numpy()) if hasattr(loaded, "do_lower_case") \
        else _is_uncased(vocab)
    vocab_size, hidden = named["word_embeddings/embeddings"].shape
    num_layers = len({key.split("/")[1] for key in named if key.startswith("transformer/")})
    query = named.get("transformer/layer_0/self_attention/query/kernel")
    intermediate = named.get("transformer/layer_0/intermediate/kernel")
    if query is None or intermediate is None or query.ndim != 3:
        raise ValueError(f"{folder}: no transformer/layer_0 attention and feed-forward "
                         "weights of Model Garden's layout")
    base = dict(vocab_size=int(vocab_size), hidden_size=int(hidden), num_layers=num_layers,
                num_attention_heads=int(query.shape[1]),
                intermediate_size=int(intermediate.shape[1]),
                max_position_embeddings=int(named["position_embedding/embeddings"].shape[0]),
                type_vocab_size=int(named["type_embeddings/embeddings"].shape[0]))
    if len(vocab) != base["vocab_size"]:
        raise ValueError(f"{folder}: the vocabulary has {len(vocab)} tokens, the embeddings "
                         f"{base['vocab_size']}")
    inputs = _probe_inputs(base["vocab_size"], base["type_vocab_size"])
    expected = loaded(inputs, training=False)["pooled_output"].numpy()
    tried = []
    for activation in _HUB_ACTIVATIONS:
        for epsilon in _HUB_EPSILONS:
            fields = _encoder_fields(hidden_activation=activation, layer_norm_epsilon=epsilon,
                                     **base)
            encoder = _build(fields, dict(named), dict(pooler), folder)
            got = encoder(inputs, training=False)["pooled_output"].numpy()
            error = float(np.abs(got - expected).max())
            if error < _MATCH_TOLERANCE:
                return encoder, _meta(fields, lower_case), vocab
            tried.append(f"{activation}/{epsilon:g}: {error:.2g}")
    raise ValueError(f"{folder}: no activation and LayerNorm epsilon reproduce the encoder's "
                     f"pooled_output (largest difference {'; '.join(tried)})")


def _probe_inputs(vocab_size: int, type_vocab_size: int) -> dict:
    """Two rows of 24 ids (the second padded after 15) covering the vocabulary's range."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab_size, size=(2, 24)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 15:] = 0
    types = np.zeros_like(ids)
    types[0, 12:] = type_vocab_size - 1
    return {"input_word_ids": tf.constant(ids), "input_mask": tf.constant(mask),
            "input_type_ids": tf.constant(types)}


def build_parser():
    from cmlm_tf import cli

    parser = cli.ArgumentParser(
        prog="python -m cmlm_tf.import_model",
        description="Import a Hugging Face / sentence-transformers folder, a TF Hub BERT "
                    "encoder or a BERT checkpoint (TF1 or Model Garden TF2) as a cmlm_tf "
                    "encoder checkpoint with its warm_start.yaml.")
    parser.add_argument("--import_dir", required=True,
                        help="the model's folder (or a BERT checkpoint prefix)")
    parser.add_argument("--output_dir", required=True,
                        help="the import folder to write (cmlm_tf.import_folder)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing import folder")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from cmlm_tf import cli

    return cli.run_main(lambda: print(
        f"wrote {convert(args.import_dir, args.output_dir, overwrite=args.overwrite)}"))


if __name__ == "__main__":
    sys.exit(main())
