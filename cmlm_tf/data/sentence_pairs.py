"""Consecutive sentence pairs from plain-text corpora, for conditional masked LM.

Input format (the BERT pre-training convention): UTF-8 text files, one sentence (or segment)
per line, a blank line between documents. Every two consecutive sentences of a document form
a pair (s1, s2); documents of a single sentence give no pair and are counted as skipped.
"""

import dataclasses
from typing import Dict, List, Optional, Sequence

import tensorflow as tf
from absl import logging

from cmlm_tf import configs
from cmlm_tf.data import masking, pipeline, records
from cmlm_tf.data.files import interleave_files, list_files


@dataclasses.dataclass
class CorpusStats:
    files: List[str]
    lines: int = 0
    documents: int = 0
    pairs: int = 0
    single_sentence_documents: int = 0
    complete: bool = True  # whether the counts cover every line (else the first ones)


@dataclasses.dataclass
class CMLMDataConfig(configs.TextDataConfig):
    """s1 and s2 are each up to `seq_length` tokens. Per s2, min(`max_predictions_per_seq`,
    round(`mask_ratio` · maskable tokens)) tokens are predicted (paper: 80 of 256; set
    `mask_ratio: 1.0` for the fixed count)."""

    seq_length: int = 256
    max_predictions_per_seq: int = 80
    mask_ratio: float = 0.3125
    swap_probability: float = 0.5
    shuffle_buffer_size: int = 10000


def scan_corpus(files: Sequence[str], field: str = "input_path",
                limit: int = records.SAMPLE_RECORDS) -> CorpusStats:
    """Counts documents and pairs in the first `limit` lines (all of a small corpus), before
    training: an unreadable file, or a sample without a pair of consecutive sentences, is an
    error naming `field`. Start-up does not grow with the corpus."""
    sample, complete = records.sample_records(files, records.file_lines, field, limit)
    stats = CorpusStats(files=list(files), complete=complete)
    run = 0
    for raw in sample:
        stats.lines += 1
        if raw.strip():
            run += 1
            continue
        stats = _close_document(stats, run)
        run = 0
    stats = _close_document(stats, run)
    if stats.pairs == 0:
        seen = "" if complete else f" in its first {stats.lines} lines"
        raise ValueError(
            f"{field}: {records.describe_files(files)} holds no pair of consecutive sentences"
            f"{seen} (empty files, or only one-sentence documents)")
    return stats


def _close_document(stats: CorpusStats, sentences: int) -> CorpusStats:
    if sentences == 1:
        stats.single_sentence_documents += 1
    if sentences:
        stats.documents += 1
        stats.pairs += sentences - 1
    return stats


def _pairs_of_file(path: tf.Tensor) -> tf.data.Dataset:
    lines = tf.data.TextLineDataset(path).map(tf.strings.strip)
    pairs = tf.data.Dataset.zip((lines, lines.skip(1)))
    return pairs.filter(lambda a, b: tf.logical_and(tf.strings.length(a) > 0,
                                                    tf.strings.length(b) > 0))


def sentence_pairs(files: Sequence[str], *, input_context=None, is_training: bool = True,
                   shuffle_buffer_size: int = 10000, swap_probability: float = 0.5,
                   seed: Optional[int] = None) -> tf.data.Dataset:
    """Yields `(s1, s2)` string pairs; the order is swapped with `swap_probability`.

    Files are sharded across input pipelines (workers) when there are enough of them, else
    the pairs are.
    """
    dataset = interleave_files(files, _pairs_of_file, input_context=input_context,
                               is_training=is_training, seed=seed)
    if is_training and shuffle_buffer_size > 1:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    if swap_probability > 0:
        dataset = dataset.enumerate().map(
            lambda i, pair: _maybe_swap(i, pair, swap_probability, seed or 0))
    return dataset


def _maybe_swap(index, pair, probability, seed):
    s1, s2 = pair
    draw = tf.random.stateless_uniform([], seed=tf.stack([tf.cast(seed, tf.int64), index]))
    swap = draw < probability
    return tf.where(swap, s2, s1), tf.where(swap, s1, s2)


class ConditionalMLMFeaturizer(masking.MaskingFeaturizer):
    """Tokenises batches of (s1, s2) and masks s2, in one place for training and tests.

    Output dict: `sentence1` (TF Hub input dict of s1), `sentence2` (the same for masked s2),
    `masked_lm_positions`, `masked_lm_ids`, `masked_lm_weights`. All shapes are static:
    [batch, seq_length] and [batch, max_predictions_per_seq]. Constructor arguments as
    `masking.MaskingFeaturizer`.
    """

    def __call__(self, s1: tf.Tensor, s2: tf.Tensor, batch_index=None) -> Dict:
        first = self.pack(s1)
        second = self.pack(s2)
        masked = self.masker(second["input_word_ids"], second["input_mask"], batch_index)
        second = dict(second, input_word_ids=masked.pop("input_word_ids"))
        return {"sentence1": first, "sentence2": second, **masked}


def cmlm_dataset(data_config: CMLMDataConfig, tokenizer_config: configs.TokenizerConfig,
                 *, input_context=None, field: str = "task.train_data",
                 resume_step: int = 0) -> tf.data.Dataset:
    """The CMLM input pipeline for `task.train_data` / `task.validation_data` (`field`; in
    training, from `resume_step`'s batch on)."""
    files = list_files(data_config.input_path, field=f"{field}.input_path")
    stats = scan_corpus(files, field=f"{field}.input_path")
    logging.info("CMLM corpus: %d files; %s %d lines: %d documents, %d sentence pairs, %d "
                 "one-sentence documents skipped", len(files),
                 "all" if stats.complete else "the first", stats.lines, stats.documents,
                 stats.pairs, stats.single_sentence_documents)
    featurizer = ConditionalMLMFeaturizer(
        tokenizer_config, data_config.seq_length, data_config.max_predictions_per_seq,
        data_config.mask_ratio, seed=data_config.seed)
    pairs = sentence_pairs(files, input_context=input_context,
                           is_training=bool(data_config.is_training),
                           shuffle_buffer_size=data_config.shuffle_buffer_size,
                           swap_probability=data_config.swap_probability,
                           seed=data_config.seed)
    return pipeline.batch_and_featurize(
        pairs, data_config, lambda pair, index: featurizer(pair[0], pair[1], index),
        input_context=input_context, field=field, with_batch_index=True,
        resume_step=resume_step)
