"""A multilingual WordPiece vocabulary (BERT's vocab.txt) learned from language groups of
text files.

The merged, smoothed word counts (`counts.py`) go to TF-Text's WordPiece learner
(`tensorflow_text.tools.wordpiece_vocab.wordpiece_tokenizer_learner_lib.learn`, the
algorithm behind `bert_vocab_from_dataset`), with suffix pieces marked `##`. The result
starts with the reserved tokens `[PAD] [UNK] [CLS] [SEP] [MASK]` (ids 0-4), then every
single character kept by the learner, then the learned pieces, most frequent first; it
never has more than `vocab_size` tokens (`fit_to_size`).
"""

import math
import os
from collections.abc import Callable, Sequence

from cmlm_tf.vocab import counts
from cmlm_tf.vocab.counts import VocabError

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
DEFAULT_SMOOTHING_EXPONENT = 0.3
JOINER = "##"


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
                *, lower_case: bool = False,
                smoothing_exponent: float = DEFAULT_SMOOTHING_EXPONENT,
                progress: bool = False,
                log: Callable[[str], None] | None = None) -> list[str]:
    """Learns a WordPiece vocabulary from language groups of text files.

    Args:
        input_groups: one entry per language group: a file path or glob, or a list of them.
            A single string is taken as one group.
        vocab_size: most tokens in the result, the reserved ones included.
        lower_case: case-fold and strip accents first, as BERT uncased (and
            `BertTokenizer(lower_case=True)`) does.
        smoothing_exponent: the exponent a of `counts.language_weights`; 1.0 = no re-weighting.
        progress: show a progress bar per group on stderr.
        log: called with each line of a short summary (per group: files, lines, word
            tokens, weight; then the vocabulary size).

    Returns:
        The tokens in id order, starting with `RESERVED_TOKENS`.

    Raises:
        VocabError: for a bad argument or input (see `counts.count_group`).
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
        for s in counts.group_specs(spec):
            counts.expand_input(s)

    pretokenize = counts.make_pretokenizer(lower_case=lower_case)
    groups = [counts.count_group(spec, lower_case=lower_case, progress=progress,
                                 pretokenize=pretokenize)
              for spec in input_groups]
    token_counts = [g.tokens for g in groups]
    weights = counts.language_weights(token_counts, smoothing_exponent)
    total = sum(token_counts)
    for i, (g, w) in enumerate(zip(groups, weights), 1):
        if log:
            log(f"group {i} {g.spec!r}: {len(g.files)} file(s), {g.lines:,} lines, "
                f"{g.tokens:,} word tokens ({len(g.words):,} distinct), "
                f"share {g.tokens / total:.4f} -> {g.tokens * w / total:.4f}, weight {w:.4f}")

    merged = counts.merge_counts(groups, weights)
    if log:
        log(f"learning WordPiece from {len(merged):,} distinct words "
            f"(target {vocab_size:,} tokens)")
    vocab = learn_wordpiece(merged, vocab_size)
    if log:
        log(f"vocabulary: {len(vocab):,} tokens ({len(RESERVED_TOKENS)} reserved)")
    return vocab


def write_vocab(vocab: Sequence[str], path: str) -> None:
    """Writes one token per line, UTF-8, with a trailing newline (BERT's vocab.txt)."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(vocab) + "\n")
