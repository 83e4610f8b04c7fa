"""Builds the sentence-transformers stand-ins in tests/testdata/st_standins/ and their golden file.

Run once in a separate virtual environment (torch, transformers, sentence-transformers and
tokenizers are never dependencies of cmlm_tf):

    python tests/testdata/make_st_standins.py ../shared/data/udhr tests/testdata/st_standins [NAMES]

(NAMES: the comma-separated stand-ins to rebuild, keeping the others' golden entries.)

Each stand-in has the exact layout of a published family, random weights (every tensor,
LayerNorm and biases included, drawn from a normal distribution so that each one matters)
and a WordPiece vocabulary of 3,000 entries learnt from the UDHR in all its languages, so
that text in every script tokenises into real pieces:

- `labse_layout`: sentence-transformers/LaBSE's modules: BERT (cased), CLS pooling, a Dense
  module (64 -> 64, tanh), Normalize.
- `st6_bert_mean`: a BERT (uncased) with mean pooling and Normalize, saved by
  sentence-transformers 6 (`1_Pooling/config.json` with `"pooling_mode"`), with its
  tokenizer in `tokenizer.json` only (no `vocab.txt`) and `layer_norm_eps` 1e-7.

- `xlmr_layout`: paraphrase-multilingual-mpnet-base-v2's modules: XLM-RoBERTa (position
  ids after the padding id, one token type, `layer_norm_eps` 1e-5), mean pooling, no
  Normalize, with XLM-R's SentencePiece tokenizer (`sentencepiece.bpe.model` and
  `tokenizer.json`: `<s>`, `<pad>`, `</s>`, `<unk>`, then the model's pieces shifted by one,
  `<mask>` last).
- `bert_sentencepiece`: multilingual-e5-small's and paraphrase-multilingual-MiniLM-L12-v2's:
  a BERT with XLM-R's SentencePiece tokenizer, mean pooling, Normalize.

`labse_size_vocab` is no model: the ids of Hugging Face's cased `BertTokenizer` with a
vocabulary of LaBSE's size (501,153 entries, `labse_size_vocab()`: the labse_layout
stand-in's, then pieces of two of its characters), for the tokenizer at that size.

The two SentencePiece stand-ins share one unigram model of 4,000 pieces learnt from the UDHR
(NFKC normalisation, as XLM-R's).

`st_standins_golden.json.gz` holds, for each stand-in, the first two paragraphs of the UDHR in
60 languages chosen to cover its scripts (Khmer, Malayalam and Persian with their zero-width
characters among them), the token ids of the stand-in's own tokenizer (with `[CLS]` and
`[SEP]`, truncated at its `max_seq_length`) and its sentence-transformers vectors (float32,
CPU).
"""

import gzip
import io
import json
import os
import shutil
import sys
import unicodedata

import numpy as np
import sentencepiece

VOCAB_SIZE = 3000
SP_VOCAB_SIZE = 4000
LABSE_VOCAB_SIZE = 501153  # LaBSE's cased WordPiece vocabulary
MAX_SEQ_LENGTH = 128
# Languages whose script no other file of the selection shares, then well-known languages.
EXTRA = ["khm", "mal", "pes_1", "hin", "ben", "tam", "tel", "kan", "guj", "pan", "sin", "mya",
         "tha", "lao", "bod", "kat", "hye", "heb", "arb", "urd", "amh", "tir", "ell", "rus",
         "ukr", "bul", "srp_cyrl", "kaz", "mon", "cmn_hans", "cmn_hant", "jpn", "kor", "vie",
         "tur", "deu_1996", "fra", "spa", "por_PT", "ita", "pol", "ces", "hun", "fin", "est",
         "lit", "lav", "ron", "hrv", "slv", "swe", "nld", "eng", "yor", "hau", "swh", "zul",
         "ind", "tgl", "eus", "cat", "cym", "gle", "isl", "mlt", "que", "grn", "nav", "chr",
         "iii", "div", "uig_arab", "yid"]


def script_of(text):
    letters = [unicodedata.name(c, "?").split()[0] for c in text if c.isalpha()]
    return max(set(letters), key=letters.count) if letters else "?"


def choose_files(udhr_dir, count=60):
    available = {n[:-4] for n in os.listdir(udhr_dir) if n.endswith(".txt")}
    chosen, scripts = [], set()
    for code in EXTRA:
        if code in available and code not in chosen:
            chosen.append(code)
            scripts.add(script_of(open(os.path.join(udhr_dir, code + ".txt"),
                                       encoding="utf-8").readline()))
    for code in sorted(available):  # any script not covered yet
        script = script_of(open(os.path.join(udhr_dir, code + ".txt"),
                                encoding="utf-8").readline())
        if script not in scripts:
            chosen.append(code)
            scripts.add(script)
    return chosen[:max(count, len(chosen))], sorted(scripts)


def all_udhr_lines(udhr_dir):
    for name in sorted(os.listdir(udhr_dir)):
        if name.endswith(".txt"):
            with open(os.path.join(udhr_dir, name), encoding="utf-8") as f:
                yield from (line.rstrip("\n") for line in f)


def randomize(model, seed):
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            scale = 0.1 if parameter.dim() == 1 else 0.05
            noise = torch.randn(parameter.shape, generator=generator) * scale
            parameter.copy_(noise + (1.0 if name.endswith("LayerNorm.weight") else 0.0))


def build(udhr_dir, out_dir, name, lower_case, *, hidden, pooling, dense, eps, seed):
    import torch
    from sentence_transformers import SentenceTransformer, models
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertModel, BertTokenizer

    work = os.path.join(out_dir, "_work_" + name)
    os.makedirs(work, exist_ok=True)
    trainer = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True,
                                     strip_accents=lower_case, lowercase=lower_case)
    trainer.train_from_iterator(all_udhr_lines(udhr_dir), vocab_size=VOCAB_SIZE,
                                limit_alphabet=1200, show_progress=False)
    trainer.save_model(work)
    tokenizer = BertTokenizer(vocab=os.path.join(work, "vocab.txt"), do_lower_case=lower_case)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=2 * hidden,
                        max_position_embeddings=MAX_SEQ_LENGTH, layer_norm_eps=eps)
    torch.manual_seed(seed)
    bert = BertModel(config, add_pooling_layer=False)
    randomize(bert, seed)
    bert.save_pretrained(work)
    tokenizer.save_pretrained(work)
    transformer = models.Transformer(work, max_seq_length=MAX_SEQ_LENGTH)
    modules = [transformer, models.Pooling(hidden, pooling_mode=pooling)]
    if dense:
        layer = models.Dense(hidden, hidden, activation_function=torch.nn.Tanh())
        randomize(layer, seed + 1)
        modules.append(layer)
    modules.append(models.Normalize())
    model = SentenceTransformer(modules=modules, device="cpu")
    target = os.path.join(out_dir, name)
    shutil.rmtree(target, ignore_errors=True)
    model.save(target)
    shutil.rmtree(work)
    return model, target


def labse_size_vocab(base):
    """A WordPiece vocabulary of LaBSE's size: `base` (the labse_layout stand-in's), then
    every piece of two of its single characters (`xy`, then `##xy`) in code point order, up
    to 501,153 entries. Made the same way wherever it is needed, so only the small `base`
    is committed."""
    chars = sorted({token for token in base if len(token) == 1 and not token.isspace()})
    vocab, seen = list(base), set(base)
    for first in chars:
        for second in chars:
            for token in (first + second, "##" + first + second):
                if token not in seen:
                    vocab.append(token)
                    seen.add(token)
                    if len(vocab) == LABSE_VOCAB_SIZE:
                        return vocab
    raise ValueError(f"{len(chars)} single characters give fewer than {LABSE_VOCAB_SIZE} "
                     "entries")


def standin_vocab(folder):
    """A stand-in's WordPiece vocabulary in id order, from its `tokenizer.json`."""
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        ids = json.load(f)["model"]["vocab"]
    return sorted(ids, key=ids.get)


def labse_size_ids(out_dir, texts):
    """`transformers.BertTokenizer`'s ids (cased, as LaBSE's) with `labse_size_vocab`."""
    from transformers import BertTokenizer

    work = os.path.join(out_dir, "_labse_size_vocab.txt")
    with open(work, "w", encoding="utf-8") as f:
        f.write("".join(token + "\n" for token in
                        labse_size_vocab(standin_vocab(os.path.join(out_dir, "labse_layout")))))
    tokenizer = BertTokenizer(vocab=work, do_lower_case=False)
    os.remove(work)
    assert len(tokenizer) == LABSE_VOCAB_SIZE
    return [tokenizer(text, truncation=True, max_length=MAX_SEQ_LENGTH)["input_ids"]
            for text in texts]


def train_sentencepiece(udhr_dir, path):
    """XLM-R's kind of SentencePiece model: unigram, NFKC, `<unk>` 0, `<s>` 1, `</s>` 2."""
    lines = (line for line in all_udhr_lines(udhr_dir) if line.strip())
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=lines, model_writer=model, vocab_size=SP_VOCAB_SIZE,
        model_type="unigram", character_coverage=0.9995, normalization_rule_name="nmt_nfkc",
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, input_sentence_size=200000,
        shuffle_input_sentence=True, num_threads=2, minloglevel=2)
    with open(path, "wb") as f:
        f.write(model.getvalue())


def xlmr_tokenizer(sp_model):
    """Hugging Face's XLM-R tokenizer for a SentencePiece model, with fairseq's ids."""
    from sentencepiece import sentencepiece_model_pb2
    from transformers import XLMRobertaTokenizer

    proto = sentencepiece_model_pb2.ModelProto()
    with open(sp_model, "rb") as f:
        proto.ParseFromString(f.read())
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += [(piece.piece, piece.score) for piece in proto.pieces[3:]]
    vocab.append(("<mask>", 0.0))
    charsmap = proto.normalizer_spec.precompiled_charsmap
    return XLMRobertaTokenizer(vocab=vocab, _spm_precompiled_charsmap=charsmap,
                               model_max_length=MAX_SEQ_LENGTH)


def build_sentencepiece(udhr_dir, out_dir, name, sp_model, *, roberta, hidden, eps, normalize,
                        seed):
    """A stand-in with XLM-R's tokenizer: an XLM-RoBERTa (`roberta`) or a BERT."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, XLMRobertaConfig, XLMRobertaModel

    work = os.path.join(out_dir, "_work_" + name)
    os.makedirs(work, exist_ok=True)
    tokenizer = xlmr_tokenizer(sp_model)
    sizes = dict(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=2,
                 num_attention_heads=4, intermediate_size=2 * hidden, layer_norm_eps=eps,
                 pad_token_id=1)
    torch.manual_seed(seed)
    if roberta:  # positions start after the padding id: 2 + MAX_SEQ_LENGTH rows
        encoder = XLMRobertaModel(XLMRobertaConfig(
            max_position_embeddings=MAX_SEQ_LENGTH + 2, type_vocab_size=1, **sizes),
            add_pooling_layer=False)
    else:
        encoder = BertModel(BertConfig(max_position_embeddings=MAX_SEQ_LENGTH, **sizes),
                            add_pooling_layer=False)
    randomize(encoder, seed)
    encoder.save_pretrained(work)
    tokenizer.save_pretrained(work)
    shutil.copy(sp_model, os.path.join(work, "sentencepiece.bpe.model"))
    transformer = models.Transformer(work, max_seq_length=MAX_SEQ_LENGTH)
    modules = [transformer, models.Pooling(hidden, pooling_mode="mean")]
    if normalize:
        modules.append(models.Normalize())
    model = SentenceTransformer(modules=modules, device="cpu")
    target = os.path.join(out_dir, name)
    shutil.rmtree(target, ignore_errors=True)
    model.save(target)
    shutil.copy(sp_model, os.path.join(target, "sentencepiece.bpe.model"))
    shutil.rmtree(work)
    return model, target


def main(udhr_dir, out_dir, names=""):
    """Builds the stand-ins `names` (comma-separated; all when empty), keeping the golden
    entries of the others."""
    os.makedirs(out_dir, exist_ok=True)
    codes, scripts = choose_files(udhr_dir)
    texts, ids_of = [], []
    for code in codes:
        with open(os.path.join(udhr_dir, code + ".txt"), encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f]
        for line_number in (0, 1):
            texts.append(lines[line_number])
            ids_of.append(f"{code}.txt:{line_number + 1}")
    golden_path = os.path.join(out_dir, "..", "st_standins_golden.json.gz")
    golden = {"texts": texts, "sources": ids_of, "scripts": scripts, "models": {}}
    if names and os.path.exists(golden_path):
        with gzip.open(golden_path, "rt", encoding="utf-8") as f:
            kept = json.load(f)
        assert kept["texts"] == texts, "the golden file's texts differ: rebuild every stand-in"
        golden["models"] = kept["models"]
        if "labse_size_vocab" in kept:
            golden["labse_size_vocab"] = kept["labse_size_vocab"]
    if not names or "labse_size_vocab" in names.split(","):
        golden["labse_size_vocab"] = {"ids": labse_size_ids(out_dir, texts)}
    sp_model = os.path.join(out_dir, "_sentencepiece.model")
    train_sentencepiece(udhr_dir, sp_model)
    standins = {
        "labse_layout": (build, dict(lower_case=False, hidden=64, pooling="cls", dense=True,
                                     eps=1e-12, seed=1)),
        "st6_bert_mean": (build, dict(lower_case=True, hidden=32, pooling="mean",
                                      dense=False, eps=1e-7, seed=2)),
        "xlmr_layout": (build_sentencepiece, dict(sp_model=sp_model, roberta=True, hidden=48,
                                                  eps=1e-5, normalize=False, seed=3)),
        "bert_sentencepiece": (build_sentencepiece, dict(sp_model=sp_model, roberta=False,
                                                         hidden=32, eps=1e-12, normalize=True,
                                                         seed=4)),
    }
    for name, (builder, kwargs) in standins.items():
        if names and name not in names.split(","):
            continue
        model, target = builder(udhr_dir, out_dir, name, **kwargs)
        if name == "st6_bert_mean":
            for extra in ("vocab.txt",):  # the tokenizer only in tokenizer.json
                if os.path.exists(os.path.join(target, extra)):
                    os.remove(os.path.join(target, extra))
        vectors = model.encode(texts, batch_size=16, convert_to_numpy=True)
        features = model.tokenize(texts)
        ids = [row[mask.bool()].tolist() for row, mask in
               zip(features["input_ids"], features["attention_mask"])]
        golden["models"][name] = {"ids": ids, "vectors": np.round(vectors, 7).tolist()}
    import sentence_transformers
    import transformers

    golden["made_with"] = (f"sentence-transformers {sentence_transformers.__version__}, "
                           f"transformers {transformers.__version__}, CPU float32")
    os.remove(sp_model)
    with gzip.open(golden_path, "wt", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False)
    print(len(codes), "languages,", len(scripts), "scripts,", len(texts), "texts")


if __name__ == "__main__":
    main(*sys.argv[1:])
