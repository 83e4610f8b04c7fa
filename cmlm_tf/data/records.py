"""What makes a text record malformed, and the report of the malformed ones.

Corpora are validated while they stream: the `tf.data` pipeline decides per record whether
it is valid, skips the malformed ones and hands each of those to a `MalformedReport`, which
counts them and logs the first few with file, line and reason (the host-side check below
explains a record the pipeline refused), then the running total at 10, 100, 1000, ...
malformed records. Each reader adds its reports to the list its caller passes (a task's
`malformed_reports`), and `log_totals` gives their totals when training ends. Before the pipeline
starts, only a bounded sample (`SAMPLE_RECORDS` records from the start of the first files)
is read, for the "no valid record at all" error, so start-up does not grow with the corpus.

One rule for both sides: a record needs its fields (TSV lines exactly as many columns as
configured: a further column usually means a tab inside a text, which would shift the
fields), and each text field must be valid UTF-8 and not empty after trimming ASCII
whitespace.
"""

import dataclasses
import threading
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging

from cmlm_tf.text import tokenization

ASCII_WHITESPACE = " \t\n\r\f\v"
# Records read up front, from the start of the first files, to refuse a corpus that holds no
# valid record before training starts.
SAMPLE_RECORDS = 10_000


@dataclasses.dataclass(kw_only=True)
class ScanStats:
    """What a reader's scan of its files found before the pipeline starts: the `files`, the
    `records` read and the `malformed` ones among them; `complete`: whether the counts cover
    every record (else the first ones, `SAMPLE_RECORDS` at most). Readers add their own
    counts in a subclass."""

    files: List[str]
    records: int = 0
    malformed: int = 0
    complete: bool = True


def check_text_fields(fields: Sequence[bytes], needed: int,
                      text_fields: Optional[int] = None,
                      most: Optional[int] = None) -> Optional[str]:
    """Why a record is malformed, or None (the host-side check).

    Args:
        fields: the record's fields, as bytes.
        needed: how many fields the record must have at least.
        text_fields: how many leading fields are texts to check (default: `needed`).
        most: how many fields it may have at most (default: no limit).
    """
    expected = f"exactly {needed}" if most == needed else f"at least {needed}"
    if len(fields) < needed:
        return f"{len(fields)} field(s), expected {expected}"
    if most is not None and len(fields) > most:
        expected = expected if most == needed else f"at most {most}"
        return f"{len(fields)} fields, expected {expected} (more columns than configured)"
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


def no_valid_records(files: Sequence[str], field: str, what: str, records: int,
                     *, malformed: int, unit: str, complete: bool = True,
                     first_problem: Optional[str] = None) -> ValueError:
    """The error for files that hold no valid record, naming the config field; `complete`
    is False when only the first `records` were read."""
    seen = f"{records} {unit}" if complete else f"the first {records} {unit} read"
    why = f"; first: {first_problem}" if first_problem else ""
    return ValueError(f"{field}: {describe_files(files)} holds no valid {what} ({seen}, "
                      f"{malformed} malformed{why})")


class MalformedReport:
    """Counts and logs the records an input pipeline skips, from inside `tf.data`.

    `skip(valid, path, number, raw)` is the pipeline's filter predicate: it returns `valid`,
    and for an invalid record calls back into Python (only then) to count it and, for the
    first `max_examples`, log `explain(raw)` with the file and line or record number. The
    report adds itself to `reports` (when given), for `log_totals`.

    Args:
        kind: what a record is, for the log ("bitext record").
        field: the config field of the files ("task.train_data.input_path").
        explain: raw record bytes -> why it is malformed (the host-side check).
        where: "line" (text files) or "record" (TFRecord files).
        reports: the list of the caller's reports, or None.
    """

    def __init__(self, kind: str, field: str, explain: Callable[[bytes], str],
                 *, where: str = "line", max_examples: int = 5,
                 reports: Optional[List["MalformedReport"]] = None):
        self.kind, self.field, self.explain, self.where = kind, field, explain, where
        self.max_examples = max_examples
        self.count = 0
        self.examples: List[str] = []
        self._lock = threading.Lock()
        if reports is not None:
            reports.append(self)

    def note(self, path: bytes, number: int, raw: bytes, *, count: int = 1,
             reason: Optional[str] = None) -> None:
        """Counts `count` malformed records starting at `number` of `path` (host side)."""
        with self._lock:
            before, self.count = self.count, self.count + count
            if len(self.examples) < self.max_examples:
                where = f"{path.decode('utf-8', 'replace')} {self.where} {number}"
                if count > 1:
                    where += f"-{number + count - 1}"
                example = f"{where}: {reason or self.explain(raw)}"
                self.examples.append(example)
                logging.warning("Skipping malformed %s: %s", self.kind, example)
            for power in _powers_of_ten(before, self.count):
                logging.warning("%d malformed %ss skipped so far (%s)", power, self.kind,
                                self.field)

    def skip(self, valid: tf.Tensor, path: tf.Tensor, number: tf.Tensor,
             raw: tf.Tensor) -> tf.Tensor:
        """`valid`, reporting the record when it is False (graph side)."""
        def report():
            def host(p, n, r):
                self.note(p.numpy(), int(n.numpy()), r.numpy())
                return False
            flag = tf.py_function(host, [path, number, raw], tf.bool)
            return tf.reshape(flag, [])
        return tf.cond(valid, lambda: tf.constant(True), report)

    def skip_gap(self, path: tf.Tensor, first: tf.Tensor, count: tf.Tensor,
                 explanation: str) -> tf.Tensor:
        """Reports `count` (> 0) undecodable records from `first` on; returns True."""
        def report():
            def host(p, n, c):
                self.note(p.numpy(), int(n.numpy()), b"", count=int(c.numpy()), reason=explanation)
                return True
            return tf.reshape(tf.py_function(host, [path, first, count], tf.bool), [])
        return tf.cond(count > 0, report, lambda: tf.constant(True))


def _powers_of_ten(before: int, after: int) -> Iterable[int]:
    power = 10
    while power <= after:
        if power > before:
            yield power
        power *= 10


def log_totals(reports: List[MalformedReport]) -> List[Tuple[str, str, int]]:
    """Logs and returns (kind, field, count) for every report of `reports` with malformed
    records, and empties `reports`."""
    totals = [(r.kind, r.field, r.count) for r in reports if r.count]
    for kind, field, count in totals:
        logging.warning("%d malformed %ss skipped in all (%s)", count, kind, field)
    reports.clear()
    return totals


def file_lines(path: str) -> Iterable[bytes]:
    """The raw lines of a text file (local or remote), newline included."""
    with tf.io.gfile.GFile(path, "rb") as f:
        yield from f


def sample_records(files: Sequence[str], read: Callable[[str], Iterable], field: str,
                   limit: int = SAMPLE_RECORDS) -> Tuple[list, bool]:
    """Up to `limit` items of `read(path)` over `files` in order, and whether that was all
    of them; an unreadable file is an OSError naming it and the config field."""
    items = []
    for path in files:
        try:
            for item in read(path):
                if len(items) == limit:
                    return items, False
                items.append(item)
        except (OSError, tf.errors.OpError) as e:
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise OSError(f"{path}: cannot read ({field}): {message}") from None
    return items, True
