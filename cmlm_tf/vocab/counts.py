"""Word counts of text corpora, one language group at a time, and the language smoothing
that re-weights them (CMLM, LaBSE).

Words are counted after BERT's basic pre-tokenisation, with the very `BasicTokenizer` that
`tensorflow_text.BertTokenizer` runs before WordPiece. Group l, holding a share
p_l = n_l / sum_k n_k of all word tokens, is re-weighted to q_l = p_l^a / sum_k p_k^a
(`language_weights`).
"""

import collections
import functools
import glob
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from tqdm import tqdm

# Lines handed to the tokenizer at once: large enough to amortise the TensorFlow call.
BATCH_LINES = 4096


class VocabError(ValueError):
    """A bad argument or input file; the command line prints it as a one-line error."""


@dataclass
class GroupCounts:
    """Word counts of one language group (one `--input`), before smoothing."""

    spec: str
    files: list[str]
    lines: int = 0
    words: collections.Counter = field(default_factory=collections.Counter)

    @property
    def tokens(self) -> int:
        """Number of word tokens (running words) in the group."""
        return sum(self.words.values())


def language_weights(token_counts: Sequence[float], exponent: float) -> list[float]:
    """Returns the multiplier of each language group's word counts for smoothing.

    With n_l the word tokens of group l, its share is p_l = n_l / sum_k n_k, and the smoothed
    share is q_l = p_l^a / sum_k p_k^a with a = `exponent` (0.3 in CMLM and LaBSE). Every
    count of group l is multiplied by q_l / p_l, so that group l makes up q_l of the merged
    counts while their total stays sum_k n_k. a < 1 moves shares towards uniform, raising
    low-resource languages; a = 1 returns all ones (no re-weighting).

    Raises:
        VocabError: for no groups, a group with no tokens, or an exponent that is not a
            finite number > 0.
    """
    if not (math.isfinite(exponent) and exponent > 0):
        raise VocabError(f"smoothing_exponent must be a number > 0, got {exponent}")
    if not token_counts:
        raise VocabError("no language groups")
    if any(not n > 0 for n in token_counts):
        raise VocabError(f"every language group needs word tokens, got counts {token_counts}")
    if exponent == 1.0:
        return [1.0] * len(token_counts)
    total = float(sum(token_counts))
    shares = [n / total for n in token_counts]
    powered = [p**exponent for p in shares]
    norm = sum(powered)
    return [(q / norm) / p for p, q in zip(shares, powered)]


def expand_input(spec: str) -> list[str]:
    """Returns the sorted files that one path or glob names.

    Folders a glob matches are skipped; `**` matches folders recursively.

    Raises:
        VocabError: when `spec` names no file.
    """
    if glob.has_magic(spec):
        files = sorted(p for p in glob.glob(spec, recursive=True) if os.path.isfile(p))
        if not files:
            raise VocabError(f"input {spec!r} matches no files")
        return files
    if os.path.isdir(spec):
        raise VocabError(f"input {spec!r} is a folder; give a file or a glob like 'dir/*.txt'")
    if not os.path.exists(spec):
        raise VocabError(f"input {spec!r}: no such file")
    return [spec]


def read_lines(path: str) -> Iterator[tuple[str, int]]:
    """Yields (non-blank line, its size in bytes) of a UTF-8 file; blank lines give ("", n)."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise VocabError(f"input file {path!r} cannot be read: {e.strerror}") from e
    with f:
        lineno = 0
        try:
            for lineno, raw in enumerate(f, 1):
                text = raw.decode("utf-8")
                if lineno == 1:
                    text = text.removeprefix("\ufeff")  # byte-order mark
                yield text.strip(), len(raw)
        except UnicodeDecodeError as e:
            raise VocabError(f"input file {path!r}, line {lineno}: not UTF-8 ({e.reason})") from e
        except OSError as e:
            raise VocabError(f"input file {path!r} cannot be read: {e.strerror}") from e


def group_specs(spec: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """The paths/globs of one input group, which may be given as one or as a list."""
    if isinstance(spec, (str, os.PathLike)):
        return [os.fspath(spec)]
    return [os.fspath(s) for s in spec]


@functools.lru_cache(maxsize=2)
def make_pretokenizer(*, lower_case: bool) -> Callable:
    """Returns a function: list of lines -> flat numpy array of UTF-8 words (bytes).

    It runs `BertTokenizer`'s own basic tokenizer (same class and options), so the words
    counted here are exactly the words `BertTokenizer(vocab, lower_case=...)` hands to
    WordPiece. Cached, so that repeated calls reuse one traced `tf.function`.
    """
    import tensorflow as tf
    from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer

    basic = BasicTokenizer(lower_case=lower_case)
    tokenize = tf.function(basic.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])

    def words(lines: list[str]):
        return tokenize(tf.constant(lines, dtype=tf.string)).flat_values.numpy()

    return words


def count_group(spec: str | Sequence[str], *, lower_case: bool, progress: bool = False,
                pretokenize: Callable | None = None) -> GroupCounts:
    """Counts the words of one language group (a path/glob, or a list of them).

    Raises:
        VocabError: for a pattern matching nothing, an unreadable or non-UTF-8 file, or a
            group without any word.
    """
    specs = group_specs(spec)
    if not specs:
        raise VocabError("an input group lists no files")
    files: list[str] = []
    for s in specs:
        files.extend(expand_input(s))
    files = list(dict.fromkeys(files))  # a file named twice counts once
    name = specs[0] if len(specs) == 1 else " ".join(specs)
    group = GroupCounts(spec=name, files=files)
    pretokenize = pretokenize or make_pretokenizer(lower_case=lower_case)


    total_bytes = sum(os.path.getsize(f) for f in files)
    byte_counts: collections.Counter = collections.Counter()
    with tqdm(total=total_bytes, unit="B", unit_scale=True, desc=f"reading {name}",
              disable=not progress, file=sys.stderr, mininterval=1.0, leave=False) as bar:
        for path in files:
            batch: list[str] = []
            batch_bytes = 0
            for text, size in read_lines(path):
                batch_bytes += size
                if text:
                    batch.append(text)
                if len(batch) >= BATCH_LINES:
                    byte_counts.update(pretokenize(batch))
                    group.lines += len(batch)
                    bar.update(batch_bytes)
                    batch, batch_bytes = [], 0
            if batch:
                byte_counts.update(pretokenize(batch))
                group.lines += len(batch)
            bar.update(batch_bytes)
    group.words = collections.Counter(
        {w.decode("utf-8"): n for w, n in byte_counts.items()})
    if not group.words:
        raise VocabError(
            f"input {name!r} has no words ({len(files)} file(s), {group.lines} non-blank lines)")
    return group


def merge_counts(groups: Sequence[GroupCounts], weights: Sequence[float]) -> dict[str, float]:
    """Sums the groups' word counts, each group's counts multiplied by its weight."""
    merged: dict[str, float] = collections.defaultdict(float)
    for group, weight in zip(groups, weights):
        for word, n in group.words.items():
            merged[word] += n * weight
    if all(w == 1.0 for w in weights):  # keep integer counts when nothing is re-weighted
        return {w: int(n) for w, n in merged.items()}
    return dict(merged)


def input_files(input_groups) -> list[str]:
    """The files of every group, each once, in order (a single string is one group)."""
    if isinstance(input_groups, (str, os.PathLike)):
        input_groups = [input_groups]
    files: list[str] = []
    for spec in input_groups:
        for s in group_specs(spec):
            files.extend(expand_input(s))
    return list(dict.fromkeys(files))
