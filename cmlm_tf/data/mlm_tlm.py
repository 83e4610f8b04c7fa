"""Masked and translation language modelling examples (MLM + TLM, as LaBSE pre-trains).

- MLM: one line of monolingual text (the CMLM text format: one sentence per line, blank
  lines between documents, which are skipped) packed as `[CLS] text [SEP]`.
- TLM (Conneau and Lample 2019): a translation pair from `cmlm_tf.data.bitext.read_bitext`
  packed as one sequence `[CLS] a [SEP] b [SEP]`, type ids 0 then 1. The order of source and
  target is drawn per example, so neither position nor type id tells the language, and no
  language id is added (LaBSE footnote 13): a masked word can only be recovered from its
  context and its translation.

The two streams are mixed at the example level: each example is TLM with probability
`tlm_fraction`. Both are masked by `cmlm_tf.data.masking.mask_tokens` over the whole packed
sequence (LaBSE: 20 % of the tokens, at most 80), so a TLM example has masks on both sides.
"""

import dataclasses
from typing import Dict, Optional, Sequence

import tensorflow as tf
from absl import logging

from cmlm_tf import configs
from cmlm_tf.data import bitext, masking, pipeline
from cmlm_tf.data.files import interleave_files, list_files
from cmlm_tf.data.sentence_pairs import scan_corpus
from cmlm_tf.text import packing, tokenization


@dataclasses.dataclass
class MLMTLMDataConfig(configs.TextDataConfig):
    """`input_path`: monolingual text for MLM; the pairs for TLM come from `task.bitext_data`.

    `tlm_fraction`: probability that an example is a TLM pair (0: MLM only, 1: TLM only).
    `bitext_input_path`: pairs for this split's TLM examples instead of
    `task.bitext_data.input_path` (validation on held-out pairs); empty: the task's.
    Per sequence, min(`max_predictions_per_seq`, round(`mask_ratio` · tokens)) tokens are
    predicted (LaBSE: 20 %, at most 80).
    """

    seq_length: int = 512
    max_predictions_per_seq: int = 80
    mask_ratio: float = 0.2
    tlm_fraction: float = 0.5
    shuffle_buffer_size: int = 10000
    bitext_input_path: str = ""


def text_lines(files: Sequence[str], *, input_context=None, is_training: bool = True,
               shuffle_buffer_size: int = 10000, seed: Optional[int] = None) -> tf.data.Dataset:
    """Non-empty, stripped lines of text files; repeated and shuffled while training."""
    dataset = interleave_files(
        files, lambda path: tf.data.TextLineDataset(path).map(tf.strings.strip),
        input_context=input_context, is_training=is_training, seed=seed)
    dataset = dataset.filter(lambda line: tf.strings.length(line) > 0)
    if is_training and shuffle_buffer_size > 1:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    return dataset


def _random_order(index, pair, seed):
    """TLM example (a, b) with source and target in an order drawn per example."""
    draw = tf.random.stateless_uniform([], seed=tf.stack([tf.cast(seed, tf.int64), index]))
    swap = draw < 0.5
    first = tf.where(swap, pair["target"], pair["source"])
    second = tf.where(swap, pair["source"], pair["target"])
    return {"first": first, "second": second, "is_tlm": tf.constant(1.0)}


def mixed_examples(lines: Optional[tf.data.Dataset], pairs: Optional[tf.data.Dataset],
                   tlm_fraction: float, seed: Optional[int] = None) -> tf.data.Dataset:
    """String examples `{"first", "second", "is_tlm"}`; MLM examples have `second == ""`.

    Each example is drawn from `pairs` with probability `tlm_fraction`, else from `lines`.
    """
    streams, weights = [], []
    if lines is not None and tlm_fraction < 1:
        streams.append(lines.map(lambda line: {"first": line, "second": tf.constant(""),
                                               "is_tlm": tf.constant(0.0)}))
        weights.append(1.0 - tlm_fraction)
    if pairs is not None and tlm_fraction > 0:
        streams.append(pairs.enumerate().map(
            lambda i, pair: _random_order(i, pair, (seed or 0) + 1)))
        weights.append(tlm_fraction)
    if not streams:
        raise ValueError("no MLM text and no TLM pairs to train on")
    if len(streams) == 1:
        return streams[0]
    return tf.data.Dataset.sample_from_datasets(streams, weights=weights, seed=seed)


class MLMTLMFeaturizer(masking.MaskingFeaturizer):
    """Tokenises, packs and masks a batch of `mixed_examples`, in one place.

    Output dict: `input_word_ids` (masked), `input_mask`, `input_type_ids` (int32
    [batch, seq_length]), `masked_lm_positions`, `masked_lm_ids` (int32), `masked_lm_weights`
    (float32) [batch, max_predictions_per_seq], and `is_tlm` float32 [batch] (1.0 for TLM).
    Constructor arguments as `masking.MaskingFeaturizer`.
    """

    def __call__(self, examples: Dict[str, tf.Tensor], batch_index=None) -> Dict:
        tokenizer, special = self.pack.tokenizer, self.pack.special
        first = tokenizer(tokenization.valid_utf8(examples["first"]))
        second = tokenizer(tokenization.valid_utf8(examples["second"]))
        packed = packing.pack_two_segments(
            first, second, self.pack.seq_length, special["start_of_sequence_id"],
            end_id=special["end_of_segment_id"], pad_id=special["padding_id"])
        masked = self.masker(packed["input_word_ids"], packed["input_mask"], batch_index)
        return dict(packed, **masked, is_tlm=tf.cast(examples["is_tlm"], tf.float32))


def mlm_tlm_dataset(data_config: MLMTLMDataConfig, bitext_config,
                    tokenizer_config: configs.TokenizerConfig, *, input_context=None,
                    field: str = "task.train_data", resume_step: int = 0,
                    reports: Optional[list] = None) -> tf.data.Dataset:
    """The MLM + TLM pipeline: text from `data_config`, pairs from `bitext_config` (in
    training, from `resume_step`'s batch on); the pairs' malformed-record report goes to
    `reports`."""
    fraction = data_config.tlm_fraction
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"{field}.tlm_fraction must be in [0, 1], got {fraction}")
    is_training = bool(data_config.is_training)
    lines = pairs = None
    if fraction < 1:
        files = list_files(data_config.input_path, field=f"{field}.input_path")
        stats = scan_corpus(files, field=f"{field}.input_path")
        logging.info("MLM text %s: %d files (%s %d lines read up front)", field, len(files),
                     "all" if stats.complete else "the first", stats.lines)
        lines = text_lines(files, input_context=input_context, is_training=is_training,
                           shuffle_buffer_size=data_config.shuffle_buffer_size,
                           seed=data_config.seed)
    if fraction > 0:
        bitext_field = "task.bitext_data"
        if data_config.bitext_input_path:
            # A missing file is reported under the field the user set.
            list_files(data_config.bitext_input_path, field=f"{field}.bitext_input_path")
            bitext_config = bitext_config.replace(input_path=data_config.bitext_input_path)
            bitext_field = f"{field}.bitext"
        stats = bitext.bitext_files(bitext_config, bitext_field)
        pairs = bitext.read_bitext(stats.files, stats.file_type, input_context=input_context,
                                   is_training=is_training,
                                   shuffle_buffer_size=bitext_config.shuffle_buffer_size,
                                   seed=data_config.seed,
                                   field=f"{bitext_field}.input_path", reports=reports)
    examples = mixed_examples(lines, pairs, fraction, seed=data_config.seed)
    featurizer = MLMTLMFeaturizer(tokenizer_config, data_config.seq_length,
                                  data_config.max_predictions_per_seq, data_config.mask_ratio,
                                  seed=data_config.seed)
    return pipeline.batch_and_featurize(examples, data_config, featurizer,
                                        input_context=input_context, field=field,
                                        with_batch_index=True, resume_step=resume_step)
