"""Readers for the evaluation file layouts.

Every reader takes UTF-8 text with one record per line, splits lines on `\\n` only (so a
U+2028 or a stray `\\r` inside a sentence never shifts an alignment), splits fields on tabs
without any quoting (STS-B sentences contain unbalanced `"`), and raises `DataError` with a
one-line message `PATH:LINE: problem` for malformed input.
"""

import os
from typing import Dict, Iterator, List, Sequence, Tuple

import numpy as np


class DataError(ValueError):
    """A malformed or missing evaluation file; the message names the file (and line)."""


def iter_lines(path: str) -> Iterator[Tuple[int, str]]:
    """Yields (1-based line number, text without the line ending) for each line of `path`."""
    if os.path.isdir(path):
        raise DataError(f"{path}: is a directory, expected a file")
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise DataError(f"{path}:{number}: not valid UTF-8") from None
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            yield number, text.rstrip("\n").rstrip("\r")


def read_sentences(path: str, *, skip_empty: bool = False) -> List[str]:
    """One sentence per line (the Tatoeba layout). Empty lines are kept unless `skip_empty`."""
    sentences = [text for _, text in iter_lines(path) if text.strip() or not skip_empty]
    if not sentences:
        raise DataError(f"{path}: no sentences")
    return sentences


def read_aligned(src_path: str, tgt_path: str) -> Tuple[List[str], List[str]]:
    """Two line-aligned files: line i of one translates line i of the other."""
    src, tgt = read_sentences(src_path), read_sentences(tgt_path)
    if len(src) != len(tgt):
        raise DataError(f"{tgt_path}: has {len(tgt)} lines but {src_path} has {len(src)}; "
                        "aligned files need the same number of lines")
    return src, tgt


def _fields(path: str, number: int, text: str, count: int, *, layout: str) -> List[str]:
    fields = text.split("\t")
    if len(fields) != count:
        raise DataError(f"{path}:{number}: expected {count} tab-separated fields ({layout}), "
                        f"got {len(fields)}")
    return fields


def tsv_line(*fields: str) -> str:
    """A TSV line of `fields` (a tab inside a field becomes a space, so the columns stay)."""
    return "\t".join(field.replace("\t", " ") for field in fields) + "\n"


def read_bitext_tsv(path: str) -> Tuple[List[str], List[str]]:
    """`source<TAB>target` per line (e.g. `../shared/data/install_guide/<lang>.tsv`)."""
    src, tgt = [], []
    for number, text in iter_lines(path):
        source, target = _fields(path, number, text, 2, layout="source, target")
        src.append(source)
        tgt.append(target)
    if not src:
        raise DataError(f"{path}: no sentence pairs")
    return src, tgt


STS_FORMATS = ("auto", "stsb", "tsv")


def _float(path: str, number: int, value: str, name: str) -> float:
    try:
        result = float(value)
    except ValueError:
        raise DataError(f"{path}:{number}: {name} {value!r} is not a number") from None
    if not np.isfinite(result):
        raise DataError(f"{path}:{number}: {name} {value!r} is not finite")
    return result


def read_sts(path: str, file_format: str = "auto") -> Tuple[List[str], List[str], np.ndarray]:
    """Sentence pairs with gold similarity scores.

    `stsb`: the STS Benchmark layout, genre, file, year, id, score, sentence1, sentence2
    (columns after the seventh are ignored). `tsv`: sentence1, sentence2, score.
    `auto`: `tsv` when the first line has exactly three fields, else `stsb`.

    Returns:
        (sentences1, sentences2, float64 scores [n]).
    """
    if file_format not in STS_FORMATS:
        raise DataError(f"format must be one of {STS_FORMATS}, got {file_format!r}")
    first, second, scores = [], [], []
    for number, text in iter_lines(path):
        fields = text.split("\t")
        if file_format == "auto":
            file_format = "tsv" if len(fields) == 3 else "stsb"
        if file_format == "stsb":
            if len(fields) < 7:
                raise DataError(f"{path}:{number}: expected at least 7 tab-separated fields "
                                f"(STS-B: genre, file, year, id, score, sentence1, sentence2), "
                                f"got {len(fields)}")
            score, s1, s2 = fields[4], fields[5], fields[6]
        else:
            s1, s2, score = _fields(path, number, text, 3, layout="sentence1, sentence2, score")
        scores.append(_float(path, number, score, "score"))
        first.append(s1)
        second.append(s2)
    if len(scores) < 2:
        raise DataError(f"{path}: needs at least 2 scored pairs, got {len(scores)}")
    return first, second, np.asarray(scores, np.float64)


def read_id_sentences(path: str) -> Tuple[List[str], List[str]]:
    """The BUCC layout `id<TAB>sentence`; ids must be unique. Returns (ids, sentences)."""
    ids, sentences, seen = [], [], {}
    for number, text in iter_lines(path):
        sentence_id, sentence = _fields(path, number, text, 2, layout="id, sentence")
        if sentence_id in seen:
            raise DataError(f"{path}:{number}: duplicate id {sentence_id!r} "
                            f"(first on line {seen[sentence_id]})")
        seen[sentence_id] = number
        ids.append(sentence_id)
        sentences.append(sentence)
    if not ids:
        raise DataError(f"{path}: no sentences")
    return ids, sentences


def read_gold_pairs(path: str) -> List[Tuple[str, str]]:
    """BUCC gold alignments `src_id<TAB>tgt_id`, one pair per line (duplicates collapse)."""
    pairs = []
    for number, text in iter_lines(path):
        source, target = _fields(path, number, text, 2, layout="src_id, tgt_id")
        pairs.append((source, target))
    if not pairs:
        raise DataError(f"{path}: no gold pairs")
    return list(dict.fromkeys(pairs))


def read_multiway(directory: str, languages: Sequence[str]) -> Dict[str, List[str]]:
    """`DIR/<lang>.txt` for each language, line i the same text in every file (e.g. UDHR)."""
    if not os.path.isdir(directory):
        raise DataError(f"{directory}: directory not found")
    if len(set(languages)) != len(languages):
        raise DataError(f"--langs: duplicate language in {','.join(languages)}")
    texts = {lang: read_sentences(os.path.join(directory, f"{lang}.txt"))
             for lang in languages}
    counts = {lang: len(lines) for lang, lines in texts.items()}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{lang}.txt {n}" for lang, n in counts.items())
        raise DataError(f"{directory}: files are not line-aligned (lines: {detail})")
    return texts


def read_labelled(path: str) -> Tuple[List[str], List[str]]:
    """Classification data `text<TAB>label`. Returns (texts, labels)."""
    texts, labels = [], []
    for number, text in iter_lines(path):
        sentence, label = _fields(path, number, text, 2, layout="text, label")
        if not label.strip():
            raise DataError(f"{path}:{number}: empty label")
        texts.append(sentence)
        labels.append(label.strip())
    if not texts:
        raise DataError(f"{path}: no labelled examples")
    return texts, labels
