"""A Hugging Face BERT or XLM-RoBERTa folder converted into a cmlm_tf import folder
(`cmlm_tf.model_import.import_folder`).

Reads `config.json` (`model_type` bert or xlm-roberta), `model.safetensors`, the tokenizer
and, when present, the sentence-transformers
metadata: `modules.json` (Transformer, Pooling, optionally one `Dense` module with its
activation, Normalize), the Pooling module's `config.json` (the `pooling_mode_*_tokens` flags
of sentence-transformers 2-4, or the `pooling_mode` of 5 and 6: cls, mean or max),
`sentence_bert_config.json` and `tokenizer_config.json`. `layer_norm_eps` comes from
`config.json`.

The tokenizer is XLM-R's SentencePiece model (`sentencepiece.bpe.model`) when the folder's
tokenizer is XLM-R's (`tokenizer_class` XLMRobertaTokenizer, or a Unigram `tokenizer.json`),
as for XLM-R itself, multilingual-e5 and paraphrase-multilingual-MiniLM; otherwise the
WordPiece vocabulary (`vocab.txt`, or `tokenizer.json` when a folder has only that).
XLM-RoBERTa's position ids start after its padding id: the rows before them are dropped, so
the encoder's positions start at 0 as BERT's do. Writes to OUT:

- `encoder.index` / `encoder.data-*`: `tf.train.Checkpoint(encoder=SentenceEncoder)`, the
  `Dense` module as the encoder's projection;
- `vocab.txt`, or `sentencepiece.bpe.model`;
- `warm_start.yaml`: sets `task.model.encoder`, `task.model.tokenizer` and
  `task.init_checkpoint` (paths relative to OUT), to pass as the first `--config_file` of
  any experiment;
- `source.json`: where the weights came from and the folder's `max_seq_length`.

Casing comes from `tokenizer_config.json` (`do_lower_case`; else `tokenizer.json`'s
normalizer), never from `sentence_bert_config.json`, whose `do_lower_case` describes
something else; XLM-R's tokenizer is cased. Anything else (another `model_type`, module or
pooling mode) is refused with one line naming the file and the field.
"""

import os

from cmlm_tf import configs
from cmlm_tf.model_import import bert_weights, hf_folder, import_folder
from cmlm_tf.modeling import sentence_encoder
from cmlm_tf.text import tokenization


def convert(hf_dir: str, output_dir: str, *, overwrite: bool = False) -> str:
    """Converts `hf_dir` into the import folder `output_dir`
    (`cmlm_tf.model_import.import_folder`; an existing one is replaced only with `overwrite`);
    returns the path of `warm_start.yaml`."""
    output_dir = import_folder.check_output(output_dir, overwrite=overwrite)  # before the slow part

    meta = hf_folder.read_hf_metadata(hf_dir)
    weights_path = os.path.join(meta["transformer_dir"], "model.safetensors")
    if not os.path.exists(weights_path):
        raise FileNotFoundError(f"{weights_path}: required file not found")
    tensors = bert_weights.load_safetensors(weights_path)
    encoder_config = configs.EncoderConfig(**meta["encoder"])
    if meta["tokenizer_type"] == "xlmr_sentencepiece":
        sp_model = hf_folder.sentencepiece_model(meta["transformer_dir"])
        # Models that took XLM-R's vocabulary may have spare embedding rows after it.
        vocab_size = tokenization.XlmrSentencepieceTokenizer(sp_model).vocab_size
        if vocab_size > encoder_config.vocab_size:
            raise ValueError(f"{sp_model}: the tokenizer has {vocab_size} ids but config.json "
                             f"says vocab_size {encoder_config.vocab_size}")
    else:
        vocab = hf_folder.read_wordpiece_vocab(meta["transformer_dir"])
        if len(vocab) != encoder_config.vocab_size:
            raise ValueError(f"{meta['transformer_dir']}: the vocabulary has {len(vocab)} "
                             f"tokens but config.json says vocab_size "
                             f"{encoder_config.vocab_size}")

    encoder = sentence_encoder.build_sentence_encoder(encoder_config)
    mapped = bert_weights.map_hf_tensors(tensors, encoder_config.num_layers,
                                         encoder_config.num_attention_heads, weights_path,
                                         position_offset=meta["position_offset"])
    bert_weights.assign_bert_weights(encoder, mapped, weights_path)
    if meta["dense"] is not None:
        bert_weights.assign_dense(encoder.projection, meta["dense"])

    tokenizer_file = sp_model if meta["tokenizer_type"] == "xlmr_sentencepiece" else vocab
    return import_folder.write(encoder, meta, tokenizer_file, output_dir,
                               source={"source_dir": os.path.abspath(hf_dir),
                                "family": "hugging_face"}, overwrite=overwrite)
