"""Plain sentences, one per line, packed one text per row: the input of unsupervised objectives.

Input format: UTF-8 text files, one sentence per line. Blank lines (empty after trimming
ASCII whitespace) are skipped without a word, so CMLM's corpora (blank lines between
documents) read as they are. A line that is not valid UTF-8 is malformed: skipped while the
pipeline streams, counted, and the first few logged with file and line
(`records.MalformedReport`); a corpus whose first lines (`records.SAMPLE_RECORDS`, read
before training) hold no sentence is an error.

Config (`SentencesDataConfig`): the Model Garden data fields (`input_path`,
`global_batch_size`, `is_training`, `drop_remainder`, `seed`), `seq_length` (tokens per
packed sentence, `[CLS]` and `[SEP]` included) and `shuffle_buffer_size` (lines shuffled in
memory while training).

Features of `sentences_dataset` (`SentencesFeaturizer`), per batch of B sentences:

- `sentence`: the encoder's TF Hub input dict of `[CLS] sentence [SEP]`, int32
  `input_word_ids`, `input_mask`, `input_type_ids` [B, seq_length];
- `sentence_id`: int64 [B] text fingerprints (`bitext.text_fingerprint`), so a loss can
  leave a repeated sentence out of a row's negatives.

An objective that encodes each sentence twice (SimCSE: two dropout masks make the positive
pair) calls the encoder twice on `sentence`.
"""

import dataclasses
from typing import Dict, Optional, Sequence

import tensorflow as tf
from absl import logging

from cmlm_tf import configs
from cmlm_tf.data import pipeline, records
from cmlm_tf.data.bitext import text_fingerprint
from cmlm_tf.data.files import interleave_files, list_files
from cmlm_tf.text import packing, tokenization


@dataclasses.dataclass
class SentencesDataConfig(configs.TextDataConfig):
    """Plain sentences: Model Garden data fields, `seq_length` and the shuffle buffer.

    `shuffle_buffer_size`: lines shuffled in memory while training.
    """

    seq_length: int = 128
    shuffle_buffer_size: int = 100000


@dataclasses.dataclass(kw_only=True)
class SentencesStats(records.ScanStats):
    blank: int = 0
    sentences: int = 0
    first_problem: Optional[str] = None


def _is_blank(raw: bytes) -> bool:
    return not raw.strip(records.ASCII_WHITESPACE.encode())


def _explain(raw: bytes) -> str:
    """Why a non-blank line is malformed (the host-side rule); "" when it is a sentence."""
    return records.check_text_fields([raw.rstrip(b"\r\n")], 1) or ""


def scan_sentences(files: Sequence[str], *, field: str = "input_path",
                   limit: int = records.SAMPLE_RECORDS) -> SentencesStats:
    """Counts the sentences, blank and malformed lines of the first `limit` lines (all of
    a small corpus), before training: a sample without a sentence is an error naming
    `field`; an unreadable file is an OSError."""
    sample, complete = records.sample_records(files, records.file_lines, field, limit)
    stats = SentencesStats(files=list(files), complete=complete)
    for raw in sample:
        stats.records += 1
        if _is_blank(raw):
            stats.blank += 1
            continue
        problem = _explain(raw)
        if problem:
            stats.malformed += 1
            stats.first_problem = stats.first_problem or problem
        else:
            stats.sentences += 1
    if stats.sentences == 0:
        raise records.no_valid_records(
            files, field, "sentence", stats.records, malformed=stats.malformed, unit="lines",
            complete=complete, first_problem=stats.first_problem)
    return stats


def read_sentences(files: Sequence[str], *, input_context=None, is_training: bool = True,
                   shuffle_buffer_size: int = 100000, seed: Optional[int] = None,
                   field: str = "input_path",
                   reports: Optional[list] = None) -> tf.data.Dataset:
    """Yields each sentence (string scalar, trimmed) of `files`, blank lines left out.

    Training repeats and shuffles (the files, then the lines before they are checked);
    evaluation reads every line once, in order. Malformed lines are skipped, counted and
    logged as they stream, under `field`; the report is added to `reports`.
    """
    report = records.MalformedReport("sentence line", field, _explain, reports=reports)
    shuffle = is_training and shuffle_buffer_size > 1

    def read(path):
        return tf.data.TextLineDataset(path).enumerate(start=1).map(
            lambda number, line: (path, number, line))

    @tf.autograph.experimental.do_not_convert  # graph ops only: nothing to convert
    def check(path, number, line):
        valid = records.valid_text_fields(tf.reshape(line, [1]))
        return report.skip(valid, path, number, line), line

    dataset = interleave_files(files, read, input_context=input_context,
                               is_training=is_training, seed=seed)
    dataset = dataset.filter(
        lambda path, number, line: tf.strings.length(tf.strings.strip(line)) > 0)
    if shuffle:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
        # In order, so that a seeded run sees the same sentences in the same order.
        dataset = dataset.map(check, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        # One by one: malformed lines are reported in file order.
        dataset = dataset.map(check)
    dataset = dataset.filter(lambda ok, line: ok)
    return dataset.map(lambda ok, line: tf.strings.strip(line))


class SentencesFeaturizer:
    """Tokenises a batch of `read_sentences` sentences, in one place for training and tests.

    Output dict: `sentence` (TF Hub input dict, int32 [batch, seq_length]) and
    `sentence_id` (int64 [batch] text fingerprints, lower-cased with the tokenizer).
    """

    def __init__(self, tokenizer_config: configs.TokenizerConfig, seq_length: int):
        self.pack = packing.SentencePacker(tokenization.build_tokenizer(tokenizer_config),
                                           seq_length)
        self.lower_case = bool(tokenizer_config.lower_case)

    def __call__(self, sentences: tf.Tensor) -> Dict:
        return {"sentence": self.pack(sentences),
                "sentence_id": text_fingerprint(sentences, lower_case=self.lower_case)}


def sentence_files(data_config, field: str = "task.train_data") -> SentencesStats:
    """Lists and scans the files of a `SentencesDataConfig`; logs a summary."""
    files = list_files(data_config.input_path, field=f"{field}.input_path")
    stats = scan_sentences(files, field=f"{field}.input_path")
    logging.info("Sentences %s: %d files; %s %d lines: %d sentences, %d blank, %d malformed",
                 field, len(files), "all" if stats.complete else "the first",
                 stats.records, stats.sentences, stats.blank, stats.malformed)
    return stats


def sentences_dataset(data_config: SentencesDataConfig,
                      tokenizer_config: configs.TokenizerConfig, *, input_context=None,
                      field: str = "task.train_data", resume_step: int = 0,
                      reports: Optional[list] = None) -> tf.data.Dataset:
    """The plain-sentence input pipeline: batches of packed sentences with static shapes
    (in training, from `resume_step`'s batch on); the malformed-line report goes to
    `reports`."""
    stats = sentence_files(data_config, field)
    featurizer = SentencesFeaturizer(tokenizer_config, data_config.seq_length)
    sentences = read_sentences(stats.files, input_context=input_context,
                               is_training=bool(data_config.is_training),
                               shuffle_buffer_size=data_config.shuffle_buffer_size,
                               seed=data_config.seed, field=f"{field}.input_path",
                               reports=reports)
    return pipeline.batch_and_featurize(sentences, data_config, featurizer,
                                        input_context=input_context, field=field,
                                        resume_step=resume_step)
