"""XLM-R's tokenizer as Hugging Face writes it: the files of a sentence-transformers folder
whose encoder reads `xlmr_sentencepiece` ids (`tokenization.XlmrSentencepieceTokenizer`).

- `sentencepiece.bpe.model`: the SentencePiece model, copied;
- `tokenizer.json`: the `tokenizers` library's Unigram model over the model's pieces and
  scores with fairseq's ids (`<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3, every other piece one
  up, `<mask>` last), the model's own normalisation (its precompiled character map, the
  rules TF-Text's SentencePiece op applies in cmlm_tf's preprocessor), whitespace split and
  the `▁` prefix (SentencePiece's extra-whitespace removal and dummy prefix), and
  `<s> text </s>` around each text;
- `tokenizer_config.json` (`XLMRobertaTokenizer`) and `special_tokens_map.json`.

The SentencePiece model is read from its protobuf wire format here (`read_model`): the
`sentencepiece` package's generated module may not load beside the installed protobuf, and
Transformers is not a dependency.
"""

import base64
import json
import os
import shutil
import struct
from typing import Optional

__all__ = ["MODEL_FILE", "PAD_ID", "SPECIAL_TOKENS", "read_model", "tokenizer_json",
           "unsupported", "write_files"]
MODEL_FILE = "sentencepiece.bpe.model"  # the name Transformers' XLM-R tokenizer reads
PAD_ID = 1  # fairseq's; RoBERTa's position ids start after it
# Transformers' names of XLM-R's special tokens.
SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                  "sep_token": "</s>", "pad_token": "<pad>", "cls_token": "<s>",
                  "mask_token": "<mask>"}
_FAIRSEQ_FIRST = ("<s>", "<pad>", "</s>", "<unk>")
_UNIGRAM = 1  # TrainerSpec.ModelType; absent means unigram
_METASPACE = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
              "split": True}


def _varint(data: bytes, pos: int) -> tuple:
    value, shift = 0, 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(data: bytes) -> list:
    """[(field number, value)] of one protobuf message: varints as int, fixed 32-bit values
    as their 4 bytes, length-delimited ones as bytes; 64-bit values skipped."""
    fields, pos = [], 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _varint(data, pos)
        elif wire_type in (1, 5):
            size = 8 if wire_type == 1 else 4
            value, pos = data[pos:pos + size], pos + size
        elif wire_type == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
        else:
            raise ValueError(f"wire type {wire_type}")
        if pos > len(data):
            raise ValueError("truncated field")
        fields.append((number, value))
    return fields


def read_model(path: str) -> dict:
    """What `tokenizer.json` needs of a SentencePiece `ModelProto`: `pieces` [(piece,
    score)], `charsmap` (the normaliser's precompiled map, bytes), `add_dummy_prefix`,
    `remove_extra_whitespaces`, `model_type` (1 unigram, 2 BPE, ...) and `byte_fallback`."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ValueError(f"{path}: cannot read the SentencePiece model ({e.strerror})") from None
    model = {"pieces": [], "charsmap": b"", "add_dummy_prefix": True,
             "remove_extra_whitespaces": True, "model_type": _UNIGRAM, "byte_fallback": False}
    try:
        for number, value in _fields(data):
            if number == 1:  # SentencePiece: piece 1, score 2
                piece = dict(_fields(value))
                score = struct.unpack("<f", piece[2])[0] if 2 in piece else 0.0
                model["pieces"].append((piece.get(1, b"").decode("utf-8"), score))
            elif number == 2:  # TrainerSpec: model_type 3, byte_fallback 35
                trainer = dict(_fields(value))
                model["model_type"] = trainer.get(3, _UNIGRAM)
                model["byte_fallback"] = bool(trainer.get(35, 0))
            elif number == 3:  # NormalizerSpec
                normalizer = dict(_fields(value))
                model["charsmap"] = normalizer.get(2, b"")
                model["add_dummy_prefix"] = bool(normalizer.get(3, 1))
                model["remove_extra_whitespaces"] = bool(normalizer.get(4, 1))
    except (ValueError, KeyError, TypeError, struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a SentencePiece model ({e})") from None
    if not model["pieces"]:
        raise ValueError(f"{path}: not a SentencePiece model (no pieces)")
    return model


def unsupported(model: dict) -> Optional[str]:
    """What of a SentencePiece model (`read_model`) Transformers' XLM-R tokenizer cannot
    reproduce, or None."""
    if model["model_type"] != _UNIGRAM:
        return f"a SentencePiece model of type {model['model_type']} (only unigram)"
    if model["byte_fallback"]:
        return "a SentencePiece model with byte fallback"
    if not (model["add_dummy_prefix"] and model["remove_extra_whitespaces"]):
        return ("a SentencePiece model without its dummy prefix or extra-whitespace "
                "removal")
    if tuple(piece for piece, _ in model["pieces"][:3]) != ("<unk>", "<s>", "</s>"):
        return "a SentencePiece model whose first pieces are not <unk>, <s>, </s>"
    return None


def tokenizer_json(model: dict) -> dict:
    """The `tokenizers` library's description of XLM-R's tokenizer over `model`
    (`read_model`), with fairseq's ids."""
    vocab = [[token, 0.0] for token in _FAIRSEQ_FIRST]
    vocab += [[piece, score] for piece, score in model["pieces"][3:]]
    vocab.append([SPECIAL_TOKENS["mask_token"], 0.0])
    ids = {token: index for index, (token, _) in enumerate(vocab)
           if token in _FAIRSEQ_FIRST or token == SPECIAL_TOKENS["mask_token"]}

    def special(token):
        return {"SpecialToken": {"id": token, "type_id": 0}}

    def sequence(name):
        return {"Sequence": {"id": name, "type_id": 0}}

    bos, eos = SPECIAL_TOKENS["bos_token"], SPECIAL_TOKENS["eos_token"]
    charsmap = model["charsmap"]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": index, "content": token, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True} for token, index in ids.items()],
        "normalizer": {"type": "Precompiled",
                       "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")}
        if charsmap else None,
        "pre_tokenizer": {"type": "Sequence",
                          "pretokenizers": [{"type": "WhitespaceSplit"}, dict(_METASPACE)]},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special(bos), sequence("A"), special(eos)],
            "pair": [special(bos), sequence("A"), special(eos), special(eos), sequence("B"),
                     special(eos)],
            "special_tokens": {token: {"id": token, "ids": [ids[token]], "tokens": [token]}
                               for token in (bos, eos)},
        },
        "decoder": dict(_METASPACE),
        "model": {"type": "Unigram", "unk_id": ids[SPECIAL_TOKENS["unk_token"]],
                  "vocab": vocab, "byte_fallback": False},
    }


def _write_json(path: str, value) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_files(folder: str, sp_model_file: str, seq_length: int) -> None:
    """Writes XLM-R's tokenizer files for `sp_model_file` into `folder` (module docstring)."""
    model = read_model(sp_model_file)
    shutil.copyfile(sp_model_file, os.path.join(folder, MODEL_FILE))
    _write_json(os.path.join(folder, "tokenizer.json"), tokenizer_json(model))
    _write_json(os.path.join(folder, "special_tokens_map.json"), SPECIAL_TOKENS)
    _write_json(os.path.join(folder, "tokenizer_config.json"), {
        "tokenizer_class": "XLMRobertaTokenizer", "add_prefix_space": True,
        "model_max_length": seq_length, "clean_up_tokenization_spaces": False,
        **SPECIAL_TOKENS})
