"""NLI sentence pairs from TSV files, monolingual or drawn across languages.

Format, UTF-8, one example per line:

    premise<TAB>hypothesis<TAB>label[<TAB>premise_language<TAB>hypothesis_language]

`label` is `entailment`, `neutral` or `contradiction` (any case) or 0 / 1 / 2 in that order
(MNLI's). The language columns are optional and only carried along. A line is malformed when
it has fewer than three fields, an empty premise or hypothesis (after trimming ASCII
whitespace), more than five fields, invalid UTF-8 or an unknown label (MNLI's `-`, a header
line): malformed lines are skipped while the pipeline streams, counted, and the first few
logged with file, line and reason. A corpus whose first lines (`records.SAMPLE_RECORDS`, read
before training) hold no valid example is an error. `python -m cmlm_tf.convert_nli` writes
this format from MNLI / XNLI / SNLI files.

**Cross-lingual pairs** (CMLM paper §4.3), `cross_lingual: true`: `input_path` lists two or
more line-aligned files, one per language, holding the same examples in the same order
(e.g. MNLI machine-translated into each language). For each example a premise language and a
different hypothesis language are drawn uniformly, and the premise and the hypothesis are
taken from those two files. A line must be valid in every file and carry the same label in
all of them, or it is counted as malformed and skipped. Files of different lengths are an
error when the difference shows within the lines read before training; otherwise the
pipeline reports it where the shorter file ends and reads no further.
"""

import dataclasses
import os
from typing import Dict, List, Optional, Sequence

import tensorflow as tf
from absl import logging

from cmlm_tf import configs
from cmlm_tf.data import pipeline, records
from cmlm_tf.data.files import interleave_files, list_files
from cmlm_tf.text import packing, tokenization

# XNLI's machine-translated training files spell the third class `contradictory`.
LABEL_IDS = {"entailment": 0, "neutral": 1, "contradiction": 2, "contradictory": 2,
             "0": 0, "1": 1, "2": 2}


@dataclasses.dataclass
class NLIDataConfig(configs.TextDataConfig):
    """NLI input: Model Garden data fields plus cross-lingual drawing.

    `cross_lingual`: `input_path` lists line-aligned per-language files; each example takes
        its premise and hypothesis from two different ones.
    `shuffle_buffer_size`: examples shuffled in memory while training.
    """

    seq_length: int = 128
    cross_lingual: bool = False
    shuffle_buffer_size: int = 100000


@dataclasses.dataclass(kw_only=True)
class NLIStats(records.ScanStats):
    examples: int = 0
    labels: List[int] = dataclasses.field(default_factory=lambda: [0, 0, 0])
    problems: List[str] = dataclasses.field(default_factory=list)


def parse_label(value: bytes) -> Optional[int]:
    """The class id of a label field, or None when it is not a known label."""
    try:
        return LABEL_IDS.get(value.decode("utf-8").strip(records.ASCII_WHITESPACE).lower())
    except UnicodeDecodeError:
        return None


def check_line(line: bytes):
    """(label id, None) for a valid line, else (None, why it is malformed)."""
    fields = line.rstrip(b"\r\n").split(b"\t")
    problem = records.check_text_fields(fields, 3, text_fields=2, most=5)
    if problem:
        return None, problem
    label = parse_label(fields[2])
    if label is None:
        return None, f"unknown label {fields[2][:40]!r}"
    return label, None


def _note(stats: NLIStats, path: str, number: int, problem: str, *, max_examples: int) -> None:
    stats.malformed += 1
    if len(stats.problems) < max_examples:
        stats.problems.append(f"{path} line {number}: {problem}")


# Joins the lines of one example across line-aligned files, for the host-side explanation.
_JOIN = b"\x00"
# What a line-aligned file yields after its last line (no line of a text file holds it).
_END = "\n"


def _explain_aligned(files: Sequence[str]):
    def explain(raw: bytes) -> str:
        checked = [check_line(line) for line in raw.split(_JOIN)]
        for path, (_, why) in zip(files, checked):
            if why:
                return f"{why} ({os.path.basename(path)})"
        return "the label differs between languages"
    return explain


def _explain_line(raw: bytes) -> str:
    return check_line(raw)[1] or ""


def scan_nli(files: Sequence[str], *, cross_lingual: bool = False, field: str = "input_path",
             max_examples: int = 5, limit: int = records.SAMPLE_RECORDS) -> NLIStats:
    """Checks the first `limit` lines (all of a small corpus) before training: a sample
    without any valid example is an error naming `field`, and so are cross-lingual files
    whose lengths differ within it. The pipeline counts and logs the malformed lines of the
    whole corpus as it reads."""
    stats = NLIStats(files=list(files))
    if cross_lingual:
        if len(files) < 2:
            raise ValueError(f"{field}: cross_lingual needs two or more line-aligned files "
                             f"(one per language), got {len(files)}")
        columns = [records.sample_records([path], records.file_lines, field, limit)
                   for path in files]
        for path, (lines, complete) in zip(files[1:], columns[1:]):
            first, first_complete = columns[0]
            if (complete or first_complete) and len(lines) != len(first):
                raise ValueError(
                    f"{path} has {len(lines) if complete else 'more than ' + str(limit)} "
                    f"lines but {files[0]} has "
                    f"{len(first) if first_complete else 'more than ' + str(limit)}: "
                    f"cross-lingual files must be line-aligned ({field})")
        stats.complete = all(complete for _, complete in columns)
        explain = _explain_aligned(files)
        for number, lines in enumerate(zip(*(lines for lines, _ in columns)), start=1):
            stats.records += 1
            checked = [check_line(line) for line in lines]
            if any(why for _, why in checked) or len({label for label, _ in checked}) > 1:
                joined = _JOIN.join(line.rstrip(b"\r\n") for line in lines)
                _note(stats, files[0], number, explain(joined), max_examples=max_examples)
            else:
                stats.examples += 1
                stats.labels[checked[0][0]] += 1
    else:
        sample, stats.complete = records.sample_records(
            files, lambda path: ((path, line) for line in records.file_lines(path)), field, limit)
        numbers = {}
        for path, line in sample:
            numbers[path] = numbers.get(path, 0) + 1
            stats.records += 1
            label, why = check_line(line)
            if why:
                _note(stats, path, numbers[path], why, max_examples=max_examples)
            else:
                stats.examples += 1
                stats.labels[label] += 1
    if stats.examples == 0:
        raise records.no_valid_records(files, field, "NLI example", stats.records,
                                       malformed=stats.malformed, unit="lines",
                                       complete=stats.complete,
                                       first_problem=stats.problems[0] if stats.problems else None)
    return stats


def _label_table() -> tf.lookup.StaticHashTable:
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(list(LABEL_IDS), list(LABEL_IDS.values()),
                                            key_dtype=tf.string, value_dtype=tf.int32),
        default_value=-1)


def _parse_line(line: tf.Tensor, labels: tf.lookup.StaticHashTable):
    """(valid, premise, hypothesis, label, premise_language, hypothesis_language)."""
    count, padded = records.split_tsv_line(line, 5)
    texts = padded[:2]
    label = labels.lookup(tf.strings.lower(tf.strings.strip(padded[2])))
    valid = tf.reduce_all([count >= 3, count <= 5, records.valid_text_fields(texts),
                           label >= 0])
    return (valid, tf.strings.strip(texts[0]), tf.strings.strip(texts[1]), label,
            tf.strings.strip(padded[3]), tf.strings.strip(padded[4]))


def _language_name(path: str) -> str:
    """`xnli.train.es.tsv` -> `xnli.train.es`: how a cross-lingual file is reported."""
    return os.path.splitext(os.path.basename(path))[0]


def read_nli(files: Sequence[str], *, cross_lingual: bool = False, input_context=None,
             is_training: bool = True, shuffle_buffer_size: int = 100000,
             seed: Optional[int] = None, field: str = "input_path",
             reports: Optional[list] = None) -> tf.data.Dataset:
    """Yields `{"premise", "hypothesis", "premise_language", "hypothesis_language"}` strings
    and `"label"` (int32) per valid example; the malformed-line report goes to `reports`.

    Training repeats and shuffles; evaluation reads once, in order. In cross-lingual mode the
    languages are the files' base names and the two sides always come from different files.
    """
    labels = _label_table()
    if not cross_lingual:
        report = records.MalformedReport("NLI line", field, _explain_line, reports=reports)

        def read(path):
            def check(number, line):
                valid, *rest = _parse_line(line, labels)
                return (report.skip(valid, path, number, line), *rest)
            return tf.data.TextLineDataset(path).enumerate(start=1).map(check)
        dataset = interleave_files(files, read, input_context=input_context,
                                   is_training=is_training, seed=seed)
        dataset = dataset.filter(lambda valid, *rest: valid)
        dataset = dataset.map(lambda valid, premise, hypothesis, label, lang_p, lang_h: {
            "premise": premise, "hypothesis": hypothesis, "label": label,
            "premise_language": lang_p, "hypothesis_language": lang_h})
    else:
        dataset = _aligned_examples(files, labels, is_training=is_training, seed=seed, field=field,
                                    reports=reports)
        if input_context and input_context.num_input_pipelines > 1:
            # Line-aligned files cannot be split between input pipelines: shard examples.
            dataset = dataset.shard(input_context.num_input_pipelines,
                                    input_context.input_pipeline_id)
    if is_training and shuffle_buffer_size > 1:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    return dataset


def _aligned_examples(files: Sequence[str], labels, *, is_training: bool,
                      seed: Optional[int], field: str,
                      reports: Optional[list] = None) -> tf.data.Dataset:
    count = len(files)
    names = tf.constant([_language_name(path) for path in files])
    report = records.MalformedReport("cross-lingual NLI line", field, _explain_aligned(files),
                                     reports=reports)
    # Every file ends in one `_END`, so a file shorter than the others shows up (and is
    # reported) where it ends, instead of cutting the others off in silence.
    ends = tf.data.Dataset.from_tensors(tf.constant(_END))
    lines = tf.data.Dataset.zip(tuple(
        tf.data.TextLineDataset(path).concatenate(ends) for path in files)).enumerate(start=1)

    def aligned(number, line_tuple):
        ended = tf.stack([tf.equal(line, _END) for line in line_tuple])

        def misaligned():
            def host(n, flags):
                short = [os.path.basename(path) for path, flag in zip(files, flags.numpy())
                         if flag]
                report.note(files[0].encode(), int(n.numpy()), b"", count=1,
                            reason=f"{', '.join(short)} ended here but the other files go on: "
                            f"cross-lingual files must be line-aligned; the rest is not read")
                return False
            return tf.reshape(tf.py_function(host, [number, ended], tf.bool), [])
        all_or_none = tf.logical_or(tf.reduce_all(ended), tf.logical_not(tf.reduce_any(ended)))
        return tf.cond(all_or_none, lambda: tf.logical_not(tf.reduce_any(ended)), misaligned)

    lines = lines.take_while(aligned)
    if is_training:
        lines = lines.repeat()
    # One random draw per example; a new draw every epoch, reproducible with `seed`.
    draws = tf.data.Dataset.random(seed=seed)
    dataset = tf.data.Dataset.zip((lines, draws))

    def pick(numbered, draw):
        number, line_tuple = numbered
        parsed = [_parse_line(line, labels) for line in line_tuple]
        valid = tf.stack([p[0] for p in parsed])
        label = tf.stack([p[3] for p in parsed])
        ok = tf.logical_and(tf.reduce_all(valid), tf.reduce_all(tf.equal(label, label[0])))
        ok = report.skip(ok, files[0], number, tf.strings.reduce_join(line_tuple,
                                                                      separator=_JOIN))
        draw = tf.abs(draw)
        premise_index = tf.cast(draw % count, tf.int32)
        offset = tf.cast((draw // count) % (count - 1), tf.int32) + 1
        hypothesis_index = (premise_index + offset) % count
        premises = tf.stack([p[1] for p in parsed])
        hypotheses = tf.stack([p[2] for p in parsed])
        return ok, {"premise": premises[premise_index],
                    "hypothesis": hypotheses[hypothesis_index], "label": label[0],
                    "premise_language": names[premise_index],
                    "hypothesis_language": names[hypothesis_index]}

    dataset = dataset.map(pick, num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=pipeline.is_deterministic(seed, is_training=is_training))
    dataset = dataset.filter(lambda keep, _: keep)
    return dataset.map(lambda _, example: example)


class NLIFeaturizer:
    """Tokenises a batch of `read_nli` examples: `premise`, `hypothesis` (TF Hub input
    dicts, int32 [batch, seq_length]) and `label` (int32 [batch])."""

    def __init__(self, tokenizer_config: configs.TokenizerConfig, seq_length: int):
        self.pack = packing.SentencePacker(tokenization.build_tokenizer(tokenizer_config),
                                                seq_length)

    def __call__(self, examples: Dict[str, tf.Tensor]) -> Dict:
        return {"premise": self.pack(examples["premise"]),
                "hypothesis": self.pack(examples["hypothesis"]),
                "label": examples["label"]}


def nli_files(data_config: NLIDataConfig, field: str) -> NLIStats:
    """Lists and scans the files of an `NLIDataConfig`; logs a summary."""
    files = list_files(data_config.input_path, field=f"{field}.input_path")
    stats = scan_nli(files, cross_lingual=data_config.cross_lingual, field=f"{field}.input_path")
    logging.info("NLI %s: %d files%s; %s %d lines: %d examples (entailment %d, neutral %d, "
                 "contradiction %d), %d malformed", field, len(files),
                 " (cross-lingual)" if data_config.cross_lingual else "",
                 "all" if stats.complete else "the first", stats.records, stats.examples,
                 *stats.labels, stats.malformed)
    return stats


def nli_dataset(data_config: NLIDataConfig, tokenizer_config: configs.TokenizerConfig,
                *, input_context=None, field: str = "task.train_data",
                resume_step: int = 0, reports: Optional[list] = None) -> tf.data.Dataset:
    """The NLI input pipeline: batched, tokenised pairs with static shapes (in training,
    from `resume_step`'s batch on); the malformed-line report goes to `reports`."""
    stats = nli_files(data_config, field)
    examples = read_nli(stats.files, cross_lingual=data_config.cross_lingual,
                        input_context=input_context,
                        is_training=bool(data_config.is_training),
                        shuffle_buffer_size=data_config.shuffle_buffer_size,
                        seed=data_config.seed, field=f"{field}.input_path", reports=reports)
    return pipeline.batch_and_featurize(
        examples, data_config, NLIFeaturizer(tokenizer_config, data_config.seq_length),
        input_context=input_context, field=field, resume_step=resume_step)
