"""Translation pairs (bitext) from TSV or TFRecord files: one reader for every objective.

Formats, chosen by `file_type` (`tsv` | `tfrecord`) or, when it is empty, by the extension
(`.tsv`, `.txt` → tsv; `.tfrecord`, `.tfrecords`, `.record` → tfrecord):

- TSV, UTF-8: `source<TAB>target`, one pair per line; with `num_hard_negatives: k`, the k
  hard negatives of the pair follow as extra columns (`source<TAB>target<TAB>neg1…negk`).
  A line with more columns than that is malformed (a tab inside a text would shift the
  fields).
- TFRecord of `tf.Example` with bytes features `src_raw` and `tgt_raw` (Model Garden's LaBSE
  format); hard negatives, when used, in a bytes-list feature `neg_raw`.

A record is malformed when it lacks a field, a required field is empty (after trimming ASCII
whitespace) or is not valid UTF-8. Malformed records are skipped while the pipeline streams,
counted, and the first few logged with file, line and reason (`records.MalformedReport`); a
corpus whose first records (`records.SAMPLE_RECORDS`, read before training) hold no valid
pair is an error.

`read_bitext` yields string dicts `{"source", "target"[, "hard_negatives"]}`, so objectives
that need raw text (BGT) or another packing (TLM) compose the same reader; `BitextFeaturizer`
turns a batch of them into TF Hub input dicts for dual encoders.
"""

import dataclasses
import os
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import tensorflow as tf
from absl import logging

from cmlm_tf import configs
from cmlm_tf.data import pipeline, records
from cmlm_tf.data.files import interleave_files, list_files
from cmlm_tf.text import packing, tokenization

FILE_TYPES = ("tsv", "tfrecord")
_EXTENSIONS = {".tsv": "tsv", ".txt": "tsv", ".tfrecord": "tfrecord",
               ".tfrecords": "tfrecord", ".record": "tfrecord"}
SOURCE_FEATURE, TARGET_FEATURE, NEGATIVES_FEATURE = "src_raw", "tgt_raw", "neg_raw"


@dataclasses.dataclass
class BitextDataConfig(configs.TextDataConfig):
    """Bitext input: Model Garden data fields plus the format and hard negatives.

    `num_hard_negatives`: extra negative targets per pair, read from the files.
    `shuffle_buffer_size`: pairs shuffled in memory while training.
    """

    seq_length: int = 128
    num_hard_negatives: int = 0
    shuffle_buffer_size: int = 100000


@dataclasses.dataclass(kw_only=True)
class BitextStats(records.ScanStats):
    file_type: str
    pairs: int = 0
    examples: List[str] = dataclasses.field(default_factory=list)


def infer_file_type(files: Sequence[str], file_type: str = "",
                    field: str = "file_type") -> str:
    """`file_type` if set, else the one type every file's extension names."""
    if file_type:
        if file_type not in FILE_TYPES:
            raise ValueError(f"{field} must be one of {FILE_TYPES}, got {file_type!r}")
        return file_type
    kinds = set()
    for path in files:
        name = path[:-3] if path.endswith(".gz") else path
        kind = _EXTENSIONS.get(os.path.splitext(name)[1].lower())
        if kind is None:
            raise ValueError(f"{path}: cannot tell the bitext format from the extension; set "
                             f"{field} to one of {FILE_TYPES}")
        kinds.add(kind)
    if len(kinds) > 1:
        raise ValueError(f"input files mix {sorted(kinds)} formats; set {field} explicitly")
    return kinds.pop()


def _tfrecord_fields(raw: bytes) -> List[bytes]:
    """The reader's fields of one serialised record; [] when it is not a tf.Example."""
    try:
        feature = tf.train.Example.FromString(raw).features.feature
    except Exception:  # noqa: BLE001  (any undecodable record is malformed)
        return []
    fields = []
    for key in (SOURCE_FEATURE, TARGET_FEATURE):
        values = feature[key].bytes_list.value if key in feature else []
        if not values:
            return fields
        fields.append(values[0])
    if NEGATIVES_FEATURE in feature:
        fields.extend(feature[NEGATIVES_FEATURE].bytes_list.value)
    return fields


def _tsv_fields(raw: bytes) -> List[bytes]:
    return raw.rstrip(b"\r\n").split(b"\t")


def _explain(file_type: str, needed: int) -> Callable[[bytes], str]:
    """raw record -> why it is malformed (the host-side rule)."""
    if file_type == "tsv":
        return lambda raw: records.check_text_fields(_tsv_fields(raw), needed, most=needed) or ""
    return lambda raw: records.check_text_fields(_tfrecord_fields(raw), needed) or ""


def _raw_records(path: str, file_type: str) -> Iterator[bytes]:
    if file_type == "tsv":
        yield from records.file_lines(path)
        return
    compression = "GZIP" if path.endswith(".gz") else ""
    yield from tf.data.TFRecordDataset(path, compression_type=compression).as_numpy_iterator()


def scan_bitext(files: Sequence[str], file_type: str, *, num_hard_negatives: int = 0,
                field: str = "input_path",
                limit: int = records.SAMPLE_RECORDS) -> BitextStats:
    """Checks the first `limit` records (all of a small corpus) before training: a sample
    without any valid pair is an error naming `field`; an unreadable file is an OSError.
    The pipeline counts and logs the malformed records of the whole corpus as it reads."""
    sample, complete = records.sample_records(
        files, lambda path: _raw_records(path, file_type), field, limit)
    stats = BitextStats(files=list(files), file_type=file_type, complete=complete)
    explain = _explain(file_type, 2 + num_hard_negatives)
    for raw in sample:
        stats.records += 1
        problem = explain(raw)
        if problem:
            stats.malformed += 1
            if len(stats.examples) < 5:
                stats.examples.append(problem)
        else:
            stats.pairs += 1
    if stats.pairs == 0:
        raise records.no_valid_records(
            files, field, f"{file_type} translation pair", stats.records, malformed=stats.malformed,
            unit="records", complete=complete,
            first_problem=stats.examples[0] if stats.examples else None)
    return stats


def _parse_tsv_line(line: tf.Tensor, needed: int):
    count, kept = records.split_tsv_line(line, needed)
    return tf.logical_and(tf.equal(count, needed), records.valid_text_fields(kept)), kept


def _parse_tfrecord(record: tf.Tensor, needed: int):
    parsed = tf.io.parse_single_example(record, {
        SOURCE_FEATURE: tf.io.FixedLenFeature([], tf.string, default_value=""),
        TARGET_FEATURE: tf.io.FixedLenFeature([], tf.string, default_value=""),
        NEGATIVES_FEATURE: tf.io.VarLenFeature(tf.string)})
    negatives = tf.sparse.to_dense(parsed[NEGATIVES_FEATURE], default_value="")
    fields = tf.concat([[parsed[SOURCE_FEATURE], parsed[TARGET_FEATURE]], negatives], 0)
    count, kept = records.pad_fields(fields, needed)
    return tf.logical_and(count >= needed, records.valid_text_fields(kept)), kept


def read_bitext(files: Sequence[str], file_type: str, *, num_hard_negatives: int = 0,
                input_context=None, is_training: bool = True,
                shuffle_buffer_size: int = 100000, seed: Optional[int] = None,
                field: str = "input_path",
                reports: Optional[list] = None) -> tf.data.Dataset:
    """Yields `{"source": str, "target": str}` (+ `"hard_negatives": str [k]`) per valid pair.

    Training repeats and shuffles (files, then TSV lines before they are parsed, or parsed
    TFRecord pairs: the shuffle buffer counts malformed lines too); evaluation reads once,
    in order. Malformed records are skipped, counted and logged as they stream (`records`), under
    `field`; the count's report is added to `reports`. Records of a TFRecord file that are
    not tf.Examples are counted from the gap they leave, so a run of them at the very end of
    a file goes uncounted.
    """
    needed = 2 + num_hard_negatives
    report = records.MalformedReport("bitext record", field, _explain(file_type, needed),
                                     where="line" if file_type == "tsv" else "record",
                                     reports=reports)
    shuffle = is_training and shuffle_buffer_size > 1
    if file_type == "tsv":
        def read(path):
            return tf.data.TextLineDataset(path).enumerate(start=1).map(
                lambda number, line: (path, number, line))

        @tf.autograph.experimental.do_not_convert  # graph ops only: nothing to convert
        def check(path, number, line):
            ok, fields = _parse_tsv_line(line, needed)
            return report.skip(ok, path, number, line), fields
    else:
        def read(path):
            compression = tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")
            parsed = tf.data.TFRecordDataset(path, compression_type=compression).enumerate(
                start=1).map(lambda number, record: (number, record,
                                                     *_parse_tfrecord(record, needed)))
            # A record that is not a tf.Example fails to parse and is dropped here; the gap
            # it leaves in the numbering is reported below.
            parsed = parsed.ignore_errors().scan(
                tf.constant(0, tf.int64),
                lambda last, item: (item[0], (last, *item)))

            def check_record(last, number, record, ok, fields):
                gap = report.skip_gap(path, last + 1, number - last - 1, "not a tf.Example")
                ok = tf.logical_and(gap, report.skip(ok, path, number, record))
                return ok, fields
            return parsed.map(check_record)
        check = None
    dataset = interleave_files(files, read, input_context=input_context, is_training=is_training,
                               seed=seed)
    if shuffle and check is not None:
        # Lines are shuffled before they are parsed: the buffer, which fills before the
        # first batch, takes them at the speed of reading.
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    if check is not None:
        # In training in parallel (in order); in evaluation one by one, so that malformed
        # lines are reported in file order.
        dataset = dataset.map(check, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True) \
            if shuffle else dataset.map(check)
    dataset = dataset.filter(lambda ok, fields: ok)

    def to_dict(ok, fields):
        pair = {"source": tf.strings.strip(fields[0]), "target": tf.strings.strip(fields[1])}
        if num_hard_negatives:
            # Static [k] (the lines were checked to hold exactly k): batches of static shape.
            pair["hard_negatives"] = tf.ensure_shape(tf.strings.strip(fields[2:]),
                                                     [num_hard_negatives])
        return pair

    dataset = dataset.map(to_dict)
    if shuffle and check is None:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    return dataset


def text_fingerprint(texts: tf.Tensor, *, lower_case: bool = False) -> tf.Tensor:
    """int64 fingerprints of trimmed (and optionally lower-cased) texts, to spot duplicates."""
    texts = tf.strings.strip(texts)
    if lower_case:
        texts = tf.strings.lower(texts, encoding="utf-8")
    return tf.strings.to_hash_bucket_fast(texts, 2 ** 62)


class BitextFeaturizer:
    """Tokenises a batch of `read_bitext` pairs for a dual encoder, in one place.

    Output dict: `source`, `target` (TF Hub input dicts, int32 [batch, seq_length]),
    `hard_negatives` (the same for the [batch · k] negatives, row i's at i·k…i·k+k−1) when
    k > 0, and `source_id`, `target_id` (int64 [batch] text fingerprints, so the loss can
    leave in-batch duplicates out of the negatives).
    """

    def __init__(self, tokenizer_config: configs.TokenizerConfig, seq_length: int):
        self.pack = packing.SentencePacker(tokenization.build_tokenizer(tokenizer_config),
                                                seq_length)
        self.lower_case = bool(tokenizer_config.lower_case)

    def __call__(self, pairs: Dict[str, tf.Tensor]) -> Dict:
        features = {
            "source": self.pack(pairs["source"]),
            "target": self.pack(pairs["target"]),
            "source_id": text_fingerprint(pairs["source"], lower_case=self.lower_case),
            "target_id": text_fingerprint(pairs["target"], lower_case=self.lower_case),
        }
        if "hard_negatives" in pairs:
            features["hard_negatives"] = self.pack(tf.reshape(pairs["hard_negatives"], [-1]))
        return features


def bitext_files(data_config, field: str = "task.train_data") -> BitextStats:
    """Lists, types and scans the files of a `BitextDataConfig`; logs a summary."""
    files = list_files(data_config.input_path, field=f"{field}.input_path")
    file_type = infer_file_type(files, data_config.file_type, field=f"{field}.file_type")
    stats = scan_bitext(files, file_type, num_hard_negatives=data_config.num_hard_negatives,
                        field=f"{field}.input_path")
    logging.info("Bitext %s: %d %s files; %s %d records: %d pairs, %d malformed", field,
                 len(files), file_type, "all" if stats.complete else "the first",
                 stats.records, stats.pairs, stats.malformed)
    return stats


def bitext_sentences(data_config, field: str = "task.train_data") -> Iterator[str]:
    """Yields both sentences of every valid pair of `data_config`'s files, once, in order
    (e.g. to learn a joint vocabulary)."""
    stats = bitext_files(data_config, field)
    pairs = read_bitext(stats.files, stats.file_type, is_training=False,
                        field=f"{field}.input_path")
    for pair in pairs.batch(1024).as_numpy_iterator():
        for side in ("source", "target"):
            for sentence in pair[side]:
                yield sentence.decode("utf-8")


def bitext_dataset(data_config: BitextDataConfig, tokenizer_config: configs.TokenizerConfig,
                   *, input_context=None, field: str = "task.train_data",
                   resume_step: int = 0, reports: Optional[list] = None) -> tf.data.Dataset:
    """The dual-encoder input pipeline: batched, tokenised pairs with static shapes (in
    training, from `resume_step`'s batch on); the malformed-record report goes to
    `reports`."""
    if data_config.num_hard_negatives < 0:
        raise ValueError(f"{field}.num_hard_negatives must be >= 0, got "
                         f"{data_config.num_hard_negatives}")
    stats = bitext_files(data_config, field)
    featurizer = BitextFeaturizer(tokenizer_config, data_config.seq_length)
    pairs = read_bitext(stats.files, stats.file_type,
                        num_hard_negatives=data_config.num_hard_negatives,
                        input_context=input_context, is_training=bool(data_config.is_training),
                        shuffle_buffer_size=data_config.shuffle_buffer_size,
                        seed=data_config.seed, field=f"{field}.input_path", reports=reports)
    return pipeline.batch_and_featurize(pairs, data_config, featurizer,
                                        input_context=input_context, field=field,
                                        resume_step=resume_step)
