"""An export as a sentence-transformers folder: `SentenceTransformer(OUT/sentence_transformers)`
loads it with sentence-transformers alone (5.x and 6.x), without cmlm_tf or TensorFlow.

The folder is the layout sentence-transformers itself saves, with nothing of cmlm_tf in it:

- `model.safetensors` and `config.json`: the encoder as Transformers' `BertModel`
  (`model_import.bert_weights.hf_bert_tensors`, the importer's mapping read backwards), or,
  for an encoder that reads XLM-R's ids (`xlmr_sentencepiece`), as `XLMRobertaModel`, whose
  position table gets back the rows before RoBERTa's first position id that the importer
  drops (zeros: no token reads them);
- `vocab.txt`, `tokenizer.json`, `tokenizer_config.json`, `special_tokens_map.json`: BERT's
  WordPiece tokenizer with the normalisation cmlm_tf's preprocessor applies (Hugging Face's
  `BertNormalizer`, which `bert_normalizer.py` reproduces: control and format characters
  deleted, CJK ideographs split, and for uncased vocabularies accents stripped and lower case);
  or XLM-R's SentencePiece tokenizer (`xlmr_tokenizer_json.py`);
- with `--onnx`, `onnx/model.onnx` and its int8 twin (`onnx_model.py`);
- `modules.json` with `1_Pooling` (the encoder's pooling), `2_Dense` for a projection (the
  LaBSE layout) and `Normalize` when the encoder's vectors are L2-normalised;
  `sentence_bert_config.json` (`max_seq_length`: the export's sequence length),
  `config_sentence_transformers.json` and a model card `README.md`.

`check_representable` refuses, in one line naming what is missing, an encoder this layout
cannot hold (a SentencePiece tokenizer other than XLM-R's, a case-folded XLM-R tokenizer, an
activation Transformers' BERT lacks), before the export writes anything.
"""

import json
import os
import shutil
from typing import Optional

import numpy as np
from safetensors.numpy import save_file

from cmlm_tf.export import onnx_model, xlmr_tokenizer_json
from cmlm_tf.export.export_metadata import SENTENCE_TRANSFORMERS_FOLDER as FOLDER
from cmlm_tf.model_import import bert_weights, hf_folder

__all__ = ["FOLDER", "check_representable", "model_card", "tokenizer_json", "write_folder",
           "write_readme"]
# The special tokens of BERT's WordPiece vocabularies, by their Transformers names.
_SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "cls_token": "[CLS]", "mask_token": "[MASK]"}
# The sentence-transformers release whose layout the folder follows (5.x and 6.x read it).
_ST_LAYOUT_VERSION = "5.1.0"


def check_representable(model, flag: Optional[str] = None) -> None:
    """Raises ValueError, one line starting with `flag` (the one that asked for the folder;
    `--sentence_transformers` by default), when `model` (a `SentenceModelConfig`) has a part
    that a sentence-transformers BERT folder cannot hold."""
    encoder, tokenizer = model.encoder, model.tokenizer
    flag = flag or "--sentence_transformers"
    if tokenizer.type not in ("wordpiece", "xlmr_sentencepiece"):
        raise ValueError(f"{flag}: the {tokenizer.type} tokenizer "
                         "(task.model.tokenizer.type) has no Hugging Face tokenizer; only "
                         "WordPiece vocabularies and XLM-R's SentencePiece model are written")
    if tokenizer.type == "xlmr_sentencepiece":
        if tokenizer.lower_case:
            raise ValueError(f"{flag}: task.model.tokenizer.lower_case is true: Transformers' "
                             "XLM-R tokenizer does not case-fold (set it false)")
        missing = xlmr_tokenizer_json.unsupported(
            xlmr_tokenizer_json.read_model(tokenizer.sp_model_file))
        if missing:
            raise ValueError(f"{flag}: {tokenizer.sp_model_file} is {missing}, which "
                             "Transformers' XLM-R tokenizer cannot reproduce")
    if encoder.hidden_activation not in hf_folder.HF_ACTIVATION_NAMES:
        raise ValueError(f"{flag}: hidden_activation "
                         f"{encoder.hidden_activation!r} (task.model.encoder) has no "
                         "Transformers BERT equivalent (supported: "
                         f"{', '.join(hf_folder.HF_ACTIVATION_NAMES)})")
    if encoder.projection_size and \
            encoder.projection_activation not in hf_folder.DENSE_ACTIVATION_CLASSES:
        raise ValueError(f"{flag}: projection_activation "
                         f"{encoder.projection_activation!r} (task.model.encoder) has no "
                         "sentence-transformers Dense activation (supported: "
                         f"{', '.join(hf_folder.DENSE_ACTIVATION_CLASSES)})")


def _read_vocab(vocab_file: str) -> list:
    with open(vocab_file, encoding="utf-8") as f:
        return [line.rstrip("\n").rstrip("\r") for line in f]


def _bert_config(encoder_config, pad_id: int) -> dict:
    """Transformers' `config.json` for `BertModel` with the encoder's sizes."""
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": encoder_config.vocab_size,
        "hidden_size": encoder_config.hidden_size,
        "num_hidden_layers": encoder_config.num_layers,
        "num_attention_heads": encoder_config.num_attention_heads,
        "intermediate_size": encoder_config.intermediate_size,
        "hidden_act": hf_folder.HF_ACTIVATION_NAMES[encoder_config.hidden_activation],
        "hidden_dropout_prob": encoder_config.dropout_rate,
        "attention_probs_dropout_prob": encoder_config.attention_dropout_rate,
        "max_position_embeddings": encoder_config.max_position_embeddings,
        "type_vocab_size": encoder_config.type_vocab_size,
        "initializer_range": encoder_config.initializer_range,
        "layer_norm_eps": encoder_config.layer_norm_epsilon,
        "pad_token_id": pad_id,
        "position_embedding_type": "absolute",
        "torch_dtype": "float32",
    }


def _xlmr_transformer(tensors: dict, encoder_config) -> tuple:
    """(tensors, `config.json`) of Transformers' `XLMRobertaModel` with the
    encoder's weights (`tensors`, BERT's names, which RoBERTa shares): its position ids start
    at the padding id + 1, so the rows before it, which the importer drops, come back as
    zeros (only padding reads row `PAD_ID`, and its outputs are masked)."""
    offset = xlmr_tokenizer_json.PAD_ID + 1
    name = "embeddings.position_embeddings.weight"
    positions = tensors[name]
    tensors = {**tensors, name: np.concatenate(
        [np.zeros((offset, positions.shape[1]), np.float32), positions])}
    config = {**_bert_config(encoder_config, xlmr_tokenizer_json.PAD_ID),
              "architectures": ["XLMRobertaModel"], "model_type": "xlm-roberta",
              "max_position_embeddings": encoder_config.max_position_embeddings + offset,
              "bos_token_id": 0, "eos_token_id": 2}
    return tensors, config


def tokenizer_json(vocab: list, *, lower_case: bool) -> dict:
    """The `tokenizers` library's description of BERT's WordPiece tokenizer over `vocab`:
    Hugging Face's BERT normalisation, BERT's pre-tokenizer, WordPiece with `##`, and
    `[CLS] text [SEP]` around each text."""
    ids = {token: index for index, token in enumerate(vocab)}
    missing = [token for token in _SPECIAL_TOKENS.values() if token not in ids]
    if missing:
        raise ValueError(f"--sentence_transformers: the vocabulary lacks {missing}, which a "
                         "BERT tokenizer needs")

    def special(token):
        return {"SpecialToken": {"id": token, "type_id": 0}}

    def sequence(name, type_id):
        return {"Sequence": {"id": name, "type_id": type_id}}

    cls, sep = _SPECIAL_TOKENS["cls_token"], _SPECIAL_TOKENS["sep_token"]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": ids[token], "content": token, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True}
                         for token in sorted(_SPECIAL_TOKENS.values(), key=ids.get)],
        "normalizer": {"type": "BertNormalizer", "clean_text": True,
                       "handle_chinese_chars": True, "strip_accents": None,
                       "lowercase": bool(lower_case)},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special(cls), sequence("A", 0), special(sep)],
            "pair": [special(cls), sequence("A", 0), special(sep), sequence("B", 1),
                     {"SpecialToken": {"id": sep, "type_id": 1}}],
            "special_tokens": {token: {"id": token, "ids": [ids[token]], "tokens": [token]}
                               for token in (cls, sep)},
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": _SPECIAL_TOKENS["unk_token"],
                  "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                  "vocab": ids},
    }


def _write_json(path: str, value) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _write_tokenizer(folder: str, vocab_file: str, *, lower_case: bool, seq_length: int) -> None:
    vocab = _read_vocab(vocab_file)
    _write_json(os.path.join(folder, "tokenizer.json"), tokenizer_json(vocab,
                                                                       lower_case=lower_case))
    shutil.copyfile(vocab_file, os.path.join(folder, "vocab.txt"))
    _write_json(os.path.join(folder, "special_tokens_map.json"), _SPECIAL_TOKENS)
    _write_json(os.path.join(folder, "tokenizer_config.json"), {
        "tokenizer_class": "BertTokenizer", "do_lower_case": bool(lower_case),
        "strip_accents": None, "tokenize_chinese_chars": True, "do_basic_tokenize": True,
        "model_max_length": seq_length, "clean_up_tokenization_spaces": False,
        **_SPECIAL_TOKENS})


def _write_modules(folder: str, encoder, encoder_config) -> list:
    """The modules after the Transformer: Pooling, then a Dense projection and Normalize
    where the encoder has them; returns `modules.json`'s entries."""
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"}]
    os.makedirs(os.path.join(folder, "1_Pooling"))
    mode = encoder_config.pooling
    _write_json(os.path.join(folder, "1_Pooling", "config.json"), {
        "word_embedding_dimension": encoder_config.hidden_size,
        "pooling_mode_cls_token": mode == "cls", "pooling_mode_mean_tokens": mode == "mean",
        "pooling_mode_max_tokens": mode == "max", "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": False,
        "include_prompt": True})
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling",
                    "type": "sentence_transformers.models.Pooling"})
    if encoder_config.projection_size:
        dense = os.path.join(folder, "2_Dense")
        os.makedirs(dense)
        kernel = encoder.projection.kernel.numpy().astype(np.float32)
        bias = encoder.projection.bias.numpy().astype(np.float32)
        save_file({"linear.weight": np.ascontiguousarray(kernel.T), "linear.bias": bias},
                  os.path.join(dense, "model.safetensors"))
        _write_json(os.path.join(dense, "config.json"), {
            "in_features": int(kernel.shape[0]), "out_features": int(kernel.shape[1]),
            "bias": True, "activation_function":
                hf_folder.DENSE_ACTIVATION_CLASSES[encoder_config.projection_activation]})
        modules.append({"idx": 2, "name": "2", "path": "2_Dense",
                        "type": "sentence_transformers.models.Dense"})
    if encoder_config.normalize:
        index = len(modules)
        os.makedirs(os.path.join(folder, f"{index}_Normalize"))
        modules.append({"idx": index, "name": str(index), "path": f"{index}_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    return modules


def write_folder(folder: str, encoder, model, seq_length: int, *, card_lines: str = "",
                 dim: Optional[int] = None, onnx: bool = False) -> dict:
    """Writes the sentence-transformers folder of `encoder` (a `SentenceEncoder` built from
    `model.encoder`, `model` a `SentenceModelConfig` whose vocabulary file is readable) into
    the new folder `folder`, with `onnx`, its ONNX models too (`onnx_model.write_onnx`);
    returns what the export's metadata records of it."""
    check_representable(model)
    os.makedirs(folder)
    tensors = bert_weights.hf_bert_tensors(encoder)
    if model.tokenizer.type == "xlmr_sentencepiece":
        tensors, config = _xlmr_transformer(tensors, model.encoder)
        xlmr_tokenizer_json.write_files(folder, model.tokenizer.sp_model_file, seq_length)
    else:
        vocab = _read_vocab(model.tokenizer.vocab_file)
        config = _bert_config(model.encoder, vocab.index(_SPECIAL_TOKENS["pad_token"])
                              if _SPECIAL_TOKENS["pad_token"] in vocab else 0)
        _write_tokenizer(folder, model.tokenizer.vocab_file, lower_case=model.tokenizer.lower_case,
                         seq_length=seq_length)
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    _write_json(os.path.join(folder, "config.json"), config)
    modules = _write_modules(folder, encoder, model.encoder)
    _write_json(os.path.join(folder, "modules.json"), modules)
    _write_json(os.path.join(folder, "sentence_bert_config.json"),
                {"max_seq_length": seq_length, "do_lower_case": False})
    _write_json(os.path.join(folder, "config_sentence_transformers.json"), {
        "__version__": {"sentence_transformers": _ST_LAYOUT_VERSION},
        "model_type": "SentenceTransformer", "prompts": {}, "default_prompt_name": None,
        "similarity_fn_name": "cosine"})
    written = {"folder": FOLDER, "modules": [module["type"].rsplit(".", 1)[-1]
                                             for module in modules]}
    if onnx:
        written["onnx"] = onnx_model.write_onnx(os.path.join(folder, onnx_model.FOLDER),
                                                tensors, model.encoder)
    write_readme(folder, model, seq_length, dim, card_lines=card_lines, onnx=onnx)
    return written


def write_readme(folder: str, model, seq_length: int, dim: Optional[int], *, card_lines: str,
                 onnx: bool = False) -> None:
    """Writes (or rewrites, once the ONNX models are in) the folder's `README.md`
    (`model_card`)."""
    with open(os.path.join(folder, "README.md"), "w", encoding="utf-8") as f:
        f.write(model_card(model, seq_length, dim, card_lines, onnx=onnx))


def model_card(model, seq_length: int, dim: Optional[int], card_lines: str, *,
               onnx: bool = False) -> str:
    """The folder's `README.md`: the Hugging Face metadata block, how to load it (with
    `onnx`, its ONNX models too), and the export's own card (`card_lines`: how the model was
    trained and what it scored)."""
    encoder = model.encoder
    parts = [f"{encoder.pooling} pooling"]
    if encoder.projection_size:
        parts.append(f"a {encoder.projection_activation} Dense projection to "
                     f"{encoder.projection_size}")
    if encoder.normalize:
        parts.append("L2 normalisation")
    return "\n".join([
        "---",
        "library_name: sentence-transformers",
        "pipeline_tag: sentence-similarity",
        "tags:",
        "- sentence-transformers",
        "- feature-extraction",
        "- sentence-similarity",
        "- cmlm_tf",
        "---",
        "",
        "# Sentence encoder exported by cmlm_tf",
        "",
        f"{'An XLM-RoBERTa' if model.tokenizer.type == 'xlmr_sentencepiece' else 'A BERT'} "
        f"encoder ({encoder.num_layers} layers, width {encoder.hidden_size}) with "
        f"{', '.join(parts)}: {dim or encoder.hidden_size}-dimensional vectors of texts of up "
        f"to {seq_length} tokens. It needs sentence-transformers only:",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        'model = SentenceTransformer("path/to/sentence_transformers")',
        'vectors = model.encode(["Anne was very happy.", "She felt great joy."])',
        "```",
        "",
        *(_onnx_card_lines() if onnx else []),
        card_lines.strip(),
        "",
    ])


def _onnx_card_lines() -> list:
    return [
        f"`{onnx_model.FOLDER}/{onnx_model.FLOAT32_FILE}` is the same encoder for ONNX Runtime, "
        f"`{onnx_model.FOLDER}/{onnx_model.INT8_FILE}` its dynamically quantised int8 "
        "twin (`pip install \"sentence-transformers[onnx]\"`):",
        "",
        "```python",
        'model = SentenceTransformer("path/to/sentence_transformers", backend="onnx")',
        'int8_model = SentenceTransformer("path/to/sentence_transformers", backend="onnx", '
        f'model_kwargs={{"file_name": "{onnx_model.FOLDER}/{onnx_model.INT8_FILE}"}})',
        "```",
        "",
    ]
