"""Which lines of a corpus file are embedded: the line policy of corpus-scale jobs.

A corpus file is UTF-8 text, one sentence (or, with `text_column=N`, one tab-separated
record whose N-th field is the sentence) per line. Lines are split as
`cmlm_tf.evaluation.readers.iter_lines` splits them: on `\\n` only (a U+2028 or a stray `\\r`
inside a sentence never shifts a line number), a trailing `\\r` removed, a UTF-8 byte-order
mark removed from line 1. Line numbers are 1-based and count every line, skipped or not, so
`(file, line)` names a sentence in the original file.

- empty or whitespace-only lines are skipped and counted `empty`, as `python -m cmlm_tf.mine`
  skips them;
- a line that is not valid UTF-8 is skipped and counted `invalid_utf8` (`mine` refuses such a
  file; a corpus job does not fail hours into a run for one line, and says how many it
  skipped);
- with `text_column=N`, a line of fewer than N tab-separated fields is skipped and counted
  `missing_column`; a blank line is `empty` (not `missing_column`), and so is a record whose
  N-th field is blank;
- a text longer than `max_chars` characters (100,000 by default) is cut to that many before
  encoding, counted `over_long`, and embedded.

Cutting over-long lines bounds what one line costs to tokenise; in practice the vector does not
change, since `encode()` keeps only the first seq_length tokens (at most 512 for BERT models,
spread over far fewer than 100,000 characters unless the line is mostly whitespace).

Nothing here imports Beam or TensorFlow.
"""

from typing import BinaryIO, Iterator, NamedTuple, Optional

MAX_CHARS = 100_000

# Why a line is not embedded.
EMPTY = "empty"
INVALID_UTF8 = "invalid_utf8"
MISSING_COLUMN = "missing_column"
SKIP_REASONS = (EMPTY, INVALID_UTF8, MISSING_COLUMN)
# An embedded line that was cut to `max_chars` characters.
OVER_LONG = "over_long"
LINES_READ = "lines_read"
EMBEDDED = "embedded"
# Every count a corpus job reports, in the order it reports them.
COUNTS = (LINES_READ, EMBEDDED) + SKIP_REASONS + (OVER_LONG,)

_BOM = "\ufeff"


class Record(NamedTuple):
    """One line of a corpus file.

    Attributes:
        line: 1-based line number in the file.
        text: the text to embed, or None when the line is skipped.
        skipped: why the line is skipped (one of `SKIP_REASONS`), or None when it is embedded.
        over_long: the text was cut to `max_chars` characters.
    """

    line: int
    text: Optional[str]
    skipped: Optional[str] = None
    over_long: bool = False


def iter_records(stream: BinaryIO, source: str, text_column: Optional[int] = None,
                 max_chars: int = MAX_CHARS) -> Iterator[Record]:
    """Yields a `Record` for each line of `stream`, by the module's policy.

    Args:
        stream: the file, opened in binary mode (anything with `readline()` returning bytes).
        source: the file's name, for error messages.
        text_column: embed the N-th tab-separated field (1-based) instead of the whole line.
        max_chars: longer texts are cut to this many characters (and flagged `over_long`).
    """
    if text_column is not None and text_column < 1:
        raise ValueError(f"text_column must be 1 or more (1-based), got {text_column}")
    if max_chars < 1:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    number = 0
    while True:
        try:
            raw = stream.readline()
        except OSError as error:
            raise OSError(f"{source}: cannot read line {number + 1} ({error})") from error
        if not raw:
            return
        number += 1
        yield _record(number, raw, text_column, max_chars)


def _record(number: int, raw: bytes, text_column: Optional[int], max_chars: int) -> Record:
    """The record of line `number`, whose bytes are `raw` (line ending included)."""
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Record(number, None, INVALID_UTF8)
    if number == 1 and text.startswith(_BOM):
        text = text[1:]
    if not text.strip():
        return Record(number, None, EMPTY)
    if text_column is not None:
        fields = text.split("\t")
        if len(fields) < text_column:
            return Record(number, None, MISSING_COLUMN)
        text = fields[text_column - 1]
        if not text.strip():
            return Record(number, None, EMPTY)
    if len(text) > max_chars:
        return Record(number, text[:max_chars], over_long=True)
    return Record(number, text)
