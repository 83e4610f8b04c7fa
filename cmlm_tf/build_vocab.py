r"""Learns a vocabulary from plain-text corpora: WordPiece (BERT format) or SentencePiece.

    python -m cmlm_tf.build_vocab --input 'data/en/*.txt' --input 'data/es/*.txt' \
        --vocab_size 32000 [--lower_case] [--smoothing_exponent 0.3] --output vocab.txt
    python -m cmlm_tf.build_vocab --type sentencepiece --input 'data/*.txt' \
        --vocab_size 20000 [--lower_case] --output sp.model

Each `--input` is one language group: a file path or a glob matching several UTF-8 text
files with one sentence (or segment) per line; blank lines are ignored. The steps are:

1. Words are counted per group after BERT's basic pre-tokenisation, using the very
   `BasicTokenizer` that `tensorflow_text.BertTokenizer` runs before WordPiece: split on
   whitespace and punctuation, every CJK character a word of its own, control characters
   dropped; with `--lower_case` also case-folded and stripped of accents (NFD, drop Mn), as
   BERT uncased does. A vocabulary is only good for a tokenizer that splits words the same
   way, so build the model's `BertTokenizer` with the same `lower_case`.
2. Language smoothing, as in the CMLM and LaBSE papers: group l holds a share
   p_l = n_l / sum_k n_k of all word tokens and is re-weighted to q_l = p_l^a / sum_k p_k^a
   (a = `--smoothing_exponent`, default 0.3), so that low-resource languages get more
   vocabulary entries than their raw share; see `language_weights`. `1.0` turns it off.
3. The merged, weighted counts go to TF-Text's WordPiece learner
   (`tensorflow_text.tools.wordpiece_vocab.wordpiece_tokenizer_learner_lib.learn`, the
   algorithm behind `bert_vocab_from_dataset`), with suffix pieces marked `##`.

The output starts with the reserved tokens `[PAD] [UNK] [CLS] [SEP] [MASK]` (ids 0-4, so
the padding id is 0 as in BERT), followed by every single character kept by the learner and
then the learned pieces, most frequent first: one token per line, UTF-8. The learner
binary-searches a frequency threshold and only approximately hits its target; the file never
has more than `--vocab_size` lines (see `fit_to_size`), and may have fewer when the corpus
is small: the learner never keeps a piece seen fewer than 10 times (after weighting).

`--type sentencepiece` learns a joint unigram SentencePiece model over the lines of every
`--input` instead (`train_sentencepiece`; no language smoothing), with the pieces the TF Hub
contract needs: `<pad>` 0, `<unk>` 1, `[CLS]` 2, `[SEP]` 3, `[MASK]` 4. `--vocab_size` is an
upper bound: a corpus too small for it yields fewer pieces. Use it with
`task.model.tokenizer.type: sentencepiece`, `sp_model_file` the written model, the same
`lower_case`, and `task.model.encoder.vocab_size` the printed piece count. A training run whose
tokenizer is sentencepiece with an empty `sp_model_file` learns its own model this way before
it starts (`cmlm_tf.train.prepare_vocabulary`, on the text the task names, e.g. BGT's pairs).
"""

import argparse
import collections
import functools
import glob
import itertools
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

VOCAB_TYPES = ("wordpiece", "sentencepiece")
RESERVED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
DEFAULT_SMOOTHING_EXPONENT = 0.3
JOINER = "##"
# The smallest SentencePiece model: its 5 reserved pieces and a few learned ones.
MIN_SENTENCEPIECE_SIZE = 8

# Lines handed to the tokenizer at once: large enough to amortise the TensorFlow call.
_BATCH_LINES = 4096


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


def _read_lines(path: str) -> Iterator[tuple[str, int]]:
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


def _group_specs(spec: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """The paths/globs of one input group, which may be given as one or as a list."""
    if isinstance(spec, (str, os.PathLike)):
        return [os.fspath(spec)]
    return [os.fspath(s) for s in spec]


@functools.lru_cache(maxsize=2)
def _make_pretokenizer(lower_case: bool) -> Callable:
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


def count_group(spec: str | Sequence[str], lower_case: bool, *, progress: bool = False,
                pretokenize: Callable | None = None) -> GroupCounts:
    """Counts the words of one language group (a path/glob, or a list of them).

    Raises:
        VocabError: for a pattern matching nothing, an unreadable or non-UTF-8 file, or a
            group without any word.
    """
    specs = _group_specs(spec)
    if not specs:
        raise VocabError("an input group lists no files")
    files: list[str] = []
    for s in specs:
        files.extend(expand_input(s))
    files = list(dict.fromkeys(files))  # a file named twice counts once
    name = specs[0] if len(specs) == 1 else " ".join(specs)
    group = GroupCounts(spec=name, files=files)
    pretokenize = pretokenize or _make_pretokenizer(lower_case)

    from tqdm import tqdm

    total_bytes = sum(os.path.getsize(f) for f in files)
    byte_counts: collections.Counter = collections.Counter()
    with tqdm(total=total_bytes, unit="B", unit_scale=True, desc=f"reading {name}",
              disable=not progress, file=sys.stderr, mininterval=1.0, leave=False) as bar:
        for path in files:
            batch: list[str] = []
            batch_bytes = 0
            for text, size in _read_lines(path):
                batch_bytes += size
                if text:
                    batch.append(text)
                if len(batch) >= _BATCH_LINES:
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


def fit_to_size(vocab: Sequence[str], vocab_size: int, num_reserved: int) -> list[str]:
    """Shortens a learned vocabulary to at most `vocab_size` entries.

    The learner's binary search can end above its target. Multi-character pieces are
    dropped from the end (the learner lists them most frequent first) before any single
    character (`x` or `##x`), since characters let WordPiece spell out any word instead of
    emitting [UNK]. The reserved tokens at the start are always kept.
    """
    vocab = list(vocab)
    excess = len(vocab) - vocab_size
    if excess <= 0:
        return vocab
    drop = set()
    for i in range(len(vocab) - 1, num_reserved - 1, -1):
        if len(drop) == excess:
            break
        if len(vocab[i].removeprefix(JOINER)) > 1:
            drop.add(i)
    kept = [t for i, t in enumerate(vocab) if i not in drop]
    return kept[:vocab_size]


def learn_wordpiece(word_counts: dict[str, float], vocab_size: int,
                    reserved_tokens: Sequence[str] = RESERVED_TOKENS) -> list[str]:
    """Runs TF-Text's WordPiece learner and returns at most `vocab_size` tokens.

    The result is `reserved_tokens`, then the single characters, then the learned pieces
    (suffixes marked `##`). Tokens that would not survive a line-per-token file (containing
    a line break such as U+2028) are left out.
    """
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

    reserved = list(reserved_tokens)
    vocab = learner.learn(word_counts, vocab_size, reserved, joiner=JOINER)
    seen = set()
    clean = []
    for token in vocab:
        if token in seen or token.splitlines() != [token]:
            continue
        seen.add(token)
        clean.append(token)
    if clean[:len(reserved)] != reserved:  # the learner puts them first; make sure of it
        clean = reserved + [t for t in clean if t not in set(reserved)]
    return fit_to_size(clean, vocab_size, len(reserved))


def build_vocab(input_groups: Sequence[Sequence[str] | str], vocab_size: int,
                lower_case: bool = False,
                smoothing_exponent: float = DEFAULT_SMOOTHING_EXPONENT, *,
                progress: bool = False,
                log: Callable[[str], None] | None = None) -> list[str]:
    """Learns a WordPiece vocabulary from language groups of text files.

    Args:
        input_groups: one entry per language group: a file path or glob, or a list of them.
            A single string is taken as one group.
        vocab_size: most tokens in the result, the reserved ones included.
        lower_case: case-fold and strip accents first, as BERT uncased (and
            `BertTokenizer(lower_case=True)`) does.
        smoothing_exponent: the exponent a of `language_weights`; 1.0 = no re-weighting.
        progress: show a progress bar per group on stderr.
        log: called with each line of a short summary (per group: files, lines, word
            tokens, weight; then the vocabulary size).

    Returns:
        The tokens in id order, starting with `RESERVED_TOKENS`.

    Raises:
        VocabError: for a bad argument or input (see `count_group`).
    """
    if isinstance(input_groups, (str, os.PathLike)):
        input_groups = [input_groups]
    if vocab_size < len(RESERVED_TOKENS) + 1:
        raise VocabError(f"vocab_size must be at least {len(RESERVED_TOKENS) + 1} "
                         f"({len(RESERVED_TOKENS)} reserved tokens + 1), got {vocab_size}")
    if not (math.isfinite(smoothing_exponent) and smoothing_exponent > 0):
        raise VocabError(f"smoothing_exponent must be a number > 0, got {smoothing_exponent}")
    if not input_groups:
        raise VocabError("no input groups")
    # Check every pattern before the (possibly long) counting starts.
    for spec in input_groups:
        for s in _group_specs(spec):
            expand_input(s)

    pretokenize = _make_pretokenizer(lower_case)
    groups = [count_group(spec, lower_case, progress=progress, pretokenize=pretokenize)
              for spec in input_groups]
    token_counts = [g.tokens for g in groups]
    weights = language_weights(token_counts, smoothing_exponent)
    total = sum(token_counts)
    for i, (g, w) in enumerate(zip(groups, weights), 1):
        if log:
            log(f"group {i} {g.spec!r}: {len(g.files)} file(s), {g.lines:,} lines, "
                f"{g.tokens:,} word tokens ({len(g.words):,} distinct), "
                f"share {g.tokens / total:.4f} -> {g.tokens * w / total:.4f}, weight {w:.4f}")

    merged = merge_counts(groups, weights)
    if log:
        log(f"learning WordPiece from {len(merged):,} distinct words "
            f"(target {vocab_size:,} tokens)")
    vocab = learn_wordpiece(merged, vocab_size)
    if log:
        log(f"vocabulary: {len(vocab):,} tokens ({len(RESERVED_TOKENS)} reserved)")
    return vocab


def train_sentencepiece(sentences: Iterable[str], model_file: str, vocab_size: int,
                        lower_case: bool = True, max_sentences: int = 1_000_000) -> int:
    """Trains a joint unigram SentencePiece model on `sentences` and writes it to `model_file`.

    Ids: `<pad>` 0, `<unk>` 1, `[CLS]` 2, `[SEP]` 3, `[MASK]` 4, then the learned pieces.
    `vocab_size` is an upper bound: a corpus too small for it yields fewer pieces. With
    `lower_case`, sentences are case-folded as the tokenizer layer will fold them.

    Returns:
        The number of pieces of the written model.
    """
    import sentencepiece as spm
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as work:
        corpus = os.path.join(work, "corpus.txt")
        count = 0
        with open(corpus, "w", encoding="utf-8") as f:
            batch = []
            for sentence in itertools.islice(sentences, max_sentences):
                batch.append(sentence)
                if len(batch) == 4096:
                    count += _write_sentencepiece_lines(f, batch, lower_case)
                    batch = []
            count += _write_sentencepiece_lines(f, batch, lower_case)
        if not count:
            raise ValueError(f"{model_file}: no text to train a SentencePiece model on")
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=os.path.join(work, "sp"), vocab_size=vocab_size,
            model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
            pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
            user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
            input_sentence_size=max_sentences, shuffle_input_sentence=True,
            minloglevel=2)
        tf.io.gfile.makedirs(os.path.dirname(model_file) or ".")
        tf.io.gfile.copy(os.path.join(work, "sp.model"), model_file, overwrite=True)
    return spm.SentencePieceProcessor(model_file=model_file).get_piece_size()


def _write_sentencepiece_lines(f, batch: list[str], lower_case: bool) -> int:
    """Writes the non-blank sentences of `batch` (whitespace folded; case-folded with
    `lower_case`, as `tensorflow_text.case_fold_utf8` does); returns how many."""
    lines = [" ".join(s.split()) for s in batch]
    lines = [s for s in lines if s]
    if not lines:
        return 0
    if lower_case:
        import tensorflow as tf
        import tensorflow_text as tf_text

        from cmlm_tf import tokenization

        folded = tf_text.case_fold_utf8(tokenization.valid_utf8(tf.constant(lines))).numpy()
        lines = [s.decode("utf-8") for s in folded]
    f.write("\n".join(lines) + "\n")
    return len(lines)


def build_sentencepiece(input_groups: Sequence[Sequence[str] | str], vocab_size: int,
                        model_file: str, lower_case: bool = False,
                        log: Callable[[str], None] | None = None) -> int:
    """Learns a SentencePiece model from the lines of text files; returns its piece count.

    Args:
        input_groups: file paths or globs (as for `build_vocab`); all their non-blank lines
            form one joint corpus.
        vocab_size: most pieces in the model (at least `MIN_SENTENCEPIECE_SIZE`).
        model_file: where to write the model.
        lower_case: case-fold the text first; the tokenizer must use the same setting.
        log: called with a line of summary.

    Raises:
        VocabError: for a bad argument or input (a pattern matching nothing, an unreadable
            or non-UTF-8 file, no text).
    """
    if isinstance(input_groups, (str, os.PathLike)):
        input_groups = [input_groups]
    if vocab_size < MIN_SENTENCEPIECE_SIZE:
        raise VocabError(f"vocab_size must be at least {MIN_SENTENCEPIECE_SIZE} for "
                         f"SentencePiece, got {vocab_size}")
    if not input_groups:
        raise VocabError("no input groups")
    files: list[str] = []
    for spec in input_groups:
        for s in _group_specs(spec):
            files.extend(expand_input(s))
    files = list(dict.fromkeys(files))
    sentences = (text for path in files for text, _ in _read_lines(path) if text)
    try:
        pieces = train_sentencepiece(sentences, model_file, vocab_size, lower_case=lower_case)
    except VocabError:
        raise
    except ValueError as e:  # no text at all
        raise VocabError(str(e)) from None
    if log:
        log(f"SentencePiece model: {pieces:,} pieces (asked for at most {vocab_size:,}) from "
            f"{len(files)} file(s)")
    return pieces


def write_vocab(vocab: Sequence[str], path: str) -> None:
    """Writes one token per line, UTF-8, with a trailing newline (BERT's vocab.txt)."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(vocab) + "\n")


def build_parser() -> argparse.ArgumentParser:
    from cmlm_tf import cli

    parser = cli.ArgumentParser(
        prog="python -m cmlm_tf.build_vocab",
        description="Learn a vocabulary from text files: a multilingual WordPiece vocabulary "
                    "(BERT vocab.txt, one language group per --input, with language "
                    "smoothing), or a joint SentencePiece model (--type sentencepiece).")
    parser.add_argument("--type", choices=VOCAB_TYPES, default="wordpiece",
                        help="wordpiece (default): vocab.txt; sentencepiece: a unigram model "
                             "file with <pad>, <unk>, [CLS], [SEP], [MASK] first")
    parser.add_argument("--input", action="append", required=True, metavar="FILE_OR_GLOB",
                        help="one language group: a UTF-8 text file or a glob of them, one "
                             "sentence per line (quote globs); repeat for each language")
    parser.add_argument("--vocab_size", type=int, required=True,
                        help="most tokens in the output, the 5 reserved tokens included")
    parser.add_argument("--lower_case", action="store_true",
                        help="case-fold (and for WordPiece strip accents, as BERT uncased); "
                             "build the model's tokenizer with the same setting")
    parser.add_argument("--smoothing_exponent", type=float,
                        help="WordPiece only: language smoothing exponent a: shares p_l become "
                             f"p_l^a / sum p_k^a (default {DEFAULT_SMOOTHING_EXPONENT}; 1.0 = "
                             "no re-weighting)")
    parser.add_argument("--output", required=True,
                        help="vocabulary file (or SentencePiece model) to write")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns 0, or 2 after printing `error: ...` to stderr."""
    args = build_parser().parse_args(argv)
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        print(f"error: --output {args.output!r}: folder {out_dir!r} does not exist",
              file=sys.stderr)
        return 2
    if args.type == "sentencepiece":
        if args.smoothing_exponent is not None:
            print("error: --smoothing_exponent applies to --type wordpiece only",
                  file=sys.stderr)
            return 2
        try:
            pieces = build_sentencepiece(args.input, args.vocab_size, args.output,
                                         lower_case=args.lower_case, log=print)
        except VocabError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except OSError as e:
            print(f"error: --output {args.output!r} cannot be written: {e}", file=sys.stderr)
            return 2
        print(f"wrote a SentencePiece model of {pieces:,} pieces to {args.output}")
        return 0
    if args.smoothing_exponent is None:
        args.smoothing_exponent = DEFAULT_SMOOTHING_EXPONENT
    try:
        vocab = build_vocab(args.input, args.vocab_size, lower_case=args.lower_case,
                            smoothing_exponent=args.smoothing_exponent,
                            progress=not args.quiet, log=print)
    except VocabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        write_vocab(vocab, args.output)
    except OSError as e:
        print(f"error: --output {args.output!r} cannot be written: {e.strerror}",
              file=sys.stderr)
        return 2
    print(f"wrote {len(vocab):,} tokens to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
