"""What makes a text record malformed, and the report of the malformed ones.

The bitext and NLI readers check every file once on the host before training (`scan_*`:
counting valid and malformed records, logging the first few with file and line) and then
skip the same records inside the `tf.data` pipeline. Both sides apply one rule: a record
needs its fields, and each text field must be valid UTF-8 and not empty after trimming ASCII
whitespace.
"""

from typing import Optional, Sequence

import tensorflow as tf
from absl import logging

from cmlm_tf import tokenization

ASCII_WHITESPACE = " \t\n\r\f\v"


def check_text_fields(fields: Sequence[bytes], needed: int,
                      text_fields: Optional[int] = None) -> Optional[str]:
    """Why a record is malformed, or None (the host-side check).

    Args:
        fields: the record's fields, as bytes.
        needed: how many fields the record must have at least.
        text_fields: how many leading fields are texts to check (default: `needed`).
    """
    if len(fields) < needed:
        return f"{len(fields)} field(s), expected at least {needed}"
    for index, value in enumerate(fields[:needed if text_fields is None else text_fields]):
        if not value.strip(ASCII_WHITESPACE.encode()):
            return f"field {index + 1} is empty"
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return f"field {index + 1} is not valid UTF-8"
    return None


def valid_text_fields(texts: tf.Tensor) -> tf.Tensor:
    """Whether every text of string [n] is non-empty after trimming and valid UTF-8 (the
    in-pipeline check): bool scalar."""
    non_empty = tf.reduce_all(tf.strings.length(tf.strings.strip(texts)) > 0)
    utf8 = tf.reduce_all(tf.equal(tokenization.valid_utf8(texts), texts))
    return tf.logical_and(non_empty, utf8)


def split_tsv_line(line: tf.Tensor, width: int):
    """A TSV line's fields: (how many it has, int32 scalar; the first `width`, string
    [width], padded with empty strings). A trailing carriage return is dropped."""
    return pad_fields(tf.strings.split(tf.strings.regex_replace(line, "\r$", ""), "\t"),
                      width)


def pad_fields(fields: tf.Tensor, width: int):
    """(`tf.size(fields)`, the first `width` fields of string [n] padded with "")."""
    count = tf.size(fields)
    padded = tf.concat([fields, tf.fill([tf.maximum(width - count, 0)], "")], 0)
    return count, padded[:width]


def describe_files(files: Sequence[str]) -> str:
    """The first three files, comma-separated, for an error message."""
    return ", ".join(files[:3]) + ("..." if len(files) > 3 else "")


def report_malformed(kind: str, problems: Sequence[str], malformed: int, unit: str) -> None:
    """Logs the first malformed records (`problems`, each naming its file and line) and,
    when there were more, how many `unit` were malformed in all."""
    for problem in problems:
        logging.warning("Skipping malformed %s: %s", kind, problem)
    if malformed > len(problems):
        logging.warning("... %d malformed %s in all", malformed, unit)


def no_valid_records(files: Sequence[str], field: str, what: str, records: int,
                     malformed: int, unit: str) -> ValueError:
    """The error for files that hold no valid record, naming the config field."""
    return ValueError(f"{field}: {describe_files(files)} holds no valid {what} ({records} "
                      f"{unit}, {malformed} malformed)")
