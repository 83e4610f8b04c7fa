"""BERT's text normalisation, as Hugging Face applies it, in TF-Text's `FastBertNormalize` op.

TF-Text's `FastBertTokenizer` normalises each character through a table (a darts-clone trie
from a character's UTF-8 bytes to its replacement) that TF-Text builds from ICU: format
characters (Unicode category Cf: U+200B zero-width space, U+200C/U+200D zero-width
(non-)joiners, U+FEFF, U+2060, ...) and control characters become a space, and uncased
vocabularies get NFKC case folding. Hugging Face's `BertTokenizer` (and BERT's original
`BasicTokenizer`, and so LaBSE's) instead *deletes* control, format and private-use characters
and U+FFFD, joining the text around them, turns every other whitespace character into a
space, and for uncased vocabularies strips accents (NFD, then drops the nonspacing marks, Mn)
and lower-cases each character. Only the table differs, and the op takes it as an argument
(`model_buffer`), so `bert_normalizer_model(lower_case)` builds Hugging Face's table and the
same op, which has a TFLite kernel, runs it in every export.

The characters' properties come from Python's `unicodedata` (Unicode 14 in Python 3.11),
corrected for the characters on which Hugging Face's tables differ (older for categories,
newer for case; the tables below; a newer Python differs only on characters assigned after
Unicode 14). With them, every one of the 1,112,064 characters alone normalises exactly as
Hugging Face's `BertNormalizer` does (compared once, in a separate environment with
`tokenizers` 0.23), but for the spaces it puts around CJK ideographs, at which the WordPiece
op splits itself. The ids on every UDHR paragraph in 441 languages equal
`transformers.BertTokenizer`'s (`tests/text/test_bert_normalizer.py`). Differences that remain, none
of them in the UDHR:

- context: Unicode's canonical reordering of several combining marks in a row, which
  matters only for the marks that are kept;
- splitting, which the WordPiece op does after the table: it splits at 396 characters that
  Hugging Face's older tables do not call punctuation (punctuation added since Unicode 9,
  CJK ideographs of U+2B820-U+2B91F);
- a word of more than 100 characters in at most `tokenization.MAX_BYTES_PER_WORD` bytes.
"""

import functools
import pathlib
import unicodedata
from typing import Dict, List, Tuple

import flatbuffers
import numpy as np

# Hugging Face's tokenizers take categories (Cf, Mn) from older Unicode tables than Python
# 3.11's `unicodedata` (14.0) and lower-case with newer ones (16.0). Characters it leaves as
# they are although Python calls them Cf or Mn (mostly marks added in Unicode 9-14; ranges,
# inclusive):
_UNCHANGED_BY_HUGGING_FACE = (
    (0x7FD, 0x7FD), (0x890, 0x891), (0x898, 0x89F), (0x8CA, 0x8E2), (0x9FE, 0x9FE),
    (0xAFA, 0xAFF), (0xB55, 0xB55), (0xC04, 0xC04), (0xC3C, 0xC3C), (0xD00, 0xD00),
    (0xD3B, 0xD3C), (0xD81, 0xD81), (0xEBA, 0xEBA), (0x180F, 0x180F), (0x1885, 0x1886),
    (0x1ABF, 0x1ACE), (0x1DF6, 0x1DFB), (0xA82C, 0xA82C), (0xA8C5, 0xA8C5), (0xA8FF, 0xA8FF),
    (0xA9BD, 0xA9BD), (0x10D24, 0x10D27), (0x10EAB, 0x10EAC), (0x10F46, 0x10F50),
    (0x10F82, 0x10F85), (0x11070, 0x11070), (0x11073, 0x11074), (0x110C2, 0x110C2),
    (0x110CD, 0x110CD), (0x111C9, 0x111C9), (0x111CF, 0x111CF), (0x1123E, 0x1123E),
    (0x1133B, 0x1133B), (0x11438, 0x1143F), (0x11442, 0x11444), (0x11446, 0x11446),
    (0x1145E, 0x1145E), (0x1182F, 0x11837), (0x11839, 0x1183A), (0x11938, 0x11938),
    (0x1193B, 0x1193C), (0x1193E, 0x1193E), (0x11943, 0x11943), (0x119D4, 0x119D7),
    (0x119DA, 0x119DB), (0x119E0, 0x119E0), (0x11A01, 0x11A0A), (0x11A33, 0x11A38),
    (0x11A3B, 0x11A3E), (0x11A47, 0x11A47), (0x11A51, 0x11A56), (0x11A59, 0x11A5B),
    (0x11A8A, 0x11A96), (0x11A98, 0x11A99), (0x11C30, 0x11C36), (0x11C38, 0x11C3D),
    (0x11C3F, 0x11C3F), (0x11C92, 0x11CA7), (0x11CAA, 0x11CB0), (0x11CB2, 0x11CB3),
    (0x11CB5, 0x11CB6), (0x11D31, 0x11D36), (0x11D3A, 0x11D3A), (0x11D3C, 0x11D3D),
    (0x11D3F, 0x11D45), (0x11D47, 0x11D47), (0x11D90, 0x11D91), (0x11D95, 0x11D95),
    (0x11D97, 0x11D97), (0x11EF3, 0x11EF4), (0x13430, 0x13438), (0x16F4F, 0x16F4F),
    (0x16FE4, 0x16FE4), (0x1CF00, 0x1CF2D), (0x1CF30, 0x1CF46), (0x1E000, 0x1E006),
    (0x1E008, 0x1E018), (0x1E01B, 0x1E021), (0x1E023, 0x1E024), (0x1E026, 0x1E02A),
    (0x1E130, 0x1E136), (0x1E2AE, 0x1E2AE), (0x1E2EC, 0x1E2EF), (0x1E944, 0x1E94A))
# Capital letters added after Unicode 14, which it lower-cases (uncased): (first, last,
# lower-case minus capital).
_NEWER_CAPITALS = (
    (0x1C89, 0x1C89, 1), (0xA7CB, 0xA7CB, -42343), (0xA7CC, 0xA7CC, 1), (0xA7CE, 0xA7CE, 1),
    (0xA7D2, 0xA7D2, 1), (0xA7D4, 0xA7D4, 1), (0xA7DA, 0xA7DA, 1), (0xA7DC, 0xA7DC, -42561),
    (0x10D50, 0x10D65, 32), (0x16EA0, 0x16EB8, 27))
# A spacing mark in Unicode 14 that it strips as a nonspacing one (uncased).
_STRIPPED_BY_HUGGING_FACE = frozenset({0x1734})

# Two characters its pre-tokenizer splits at (punctuation in its tables) where TF-Text's
# WordPiece op does not: the table puts spaces around them.
_SPLIT_BY_HUGGING_FACE = frozenset({0x166D, 0x111C9})

_UNCHANGED = frozenset(code for first, last in _UNCHANGED_BY_HUGGING_FACE
                       for code in range(first, last + 1))
_LOWER_CASE = {code: chr(code + delta) for first, last, delta in _NEWER_CAPITALS
               for code in range(first, last + 1)}

_CONTROL_CATEGORIES = ("Cc", "Cf", "Co")
_WHITESPACE = ("\t", "\n", "\r")

# darts-clone unit layout, as TF-Text's `DartsCloneTrieWrapper` reads it.
_HAS_LEAF = 0x100
_LARGE_OFFSET = 0x200
# The models built by `write_shipped_tables`, one per Unicode version of `unicodedata`.
_TABLES = pathlib.Path(__file__).parent.parent / "data" / "normalizer"
_VALUE_FLAG = 0x80000000
# FastBertNormalizer's value encoding: "differs from the input" flag, 24-bit offset into
# the string pool, 6-bit UTF-8 length.
_DIFFERENT = 0x40000000
_LENGTH_BITS = 6
_MAX_LENGTH = (1 << _LENGTH_BITS) - 1


def normalize_character(char: str, *, lower_case: bool) -> str:
    """Hugging Face's BERT normalisation of one character (the rules of this module's
    docstring). Chinese characters and punctuation are left alone: the WordPiece op splits
    at them."""
    code = ord(char)
    if code in _SPLIT_BY_HUGGING_FACE:
        return f" {char} "
    if code in _UNCHANGED:
        return char
    if lower_case and code in _LOWER_CASE:
        return _LOWER_CASE[code]
    if code in (0, 0xFFFD) or (lower_case and code in _STRIPPED_BY_HUGGING_FACE):
        return ""
    if char in _WHITESPACE:
        return " "
    category = unicodedata.category(char)
    if category in _CONTROL_CATEGORIES:
        return ""
    if category == "Zs" or code in (0x2028, 0x2029):
        return " "
    if not lower_case:
        return char
    stripped = "".join(c for c in unicodedata.normalize("NFD", char)
                       if unicodedata.category(c) != "Mn")
    return stripped.lower()


def _changed_characters(*, lower_case: bool) -> Dict[str, str]:
    """Every character that normalisation changes -> its replacement."""
    changed = {}
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF:  # surrogates: not characters, never in valid UTF-8
            continue
        char = chr(code)
        normalized = normalize_character(char, lower_case=lower_case)
        if normalized != char:
            changed[char] = normalized
    return changed


def _encode_values(changed: Dict[str, str]) -> Tuple[Dict[bytes, int], bytes, int]:
    """Keys (UTF-8) -> FastBertNormalizer data, the string pool, and the data for U+0000."""
    pool = bytearray()
    offsets: Dict[bytes, int] = {}
    values = {}
    for char, replacement in changed.items():
        target = replacement.encode("utf-8")
        if len(target) > _MAX_LENGTH:
            raise ValueError(f"U+{ord(char):04X}: normalised to {len(target)} bytes, more than "
                             f"the op's {_MAX_LENGTH}")
        data = _DIFFERENT
        if target:
            if target not in offsets:
                offsets[target] = len(pool)
                pool.extend(target)
            data |= len(target) | (offsets[target] << _LENGTH_BITS)
        values[char.encode("utf-8")] = data
    zero = values.pop(b"\x00", 0)
    return values, bytes(pool), zero


def _build_trie(values: Dict[bytes, int]) -> List[int]:
    """A darts-clone double array for `values`, with identical subtrees stored once.

    A node's children sit at `base ^ label` (its value, if any, at `base ^ 0`) within one
    256-unit region, which the array holds whole; a unit holds its label, whether it has a
    value and the XOR offset from its own position to its children's `base`. Lookups never
    check which parent led to a unit, so two nodes with identical subtrees can share one
    block of children: the tables of 138 and 154 thousand keys (cased, uncased) become 1,024
    and 31,488 units.
    """
    nodes, root_id = _canonical_nodes(_nested_trie(values))
    array = _DoubleArray(nodes)
    root_base = array.place(root_id)
    array.units[0] = _unit(0, 0, nodes[root_id], root_base)
    return _whole_regions(array.units, array.used)


def _nested_trie(values: Dict[bytes, int]) -> dict:
    """The trie of `values` as nested dicts keyed by byte; a value sits under the label None."""
    root: dict = {}
    for key, value in values.items():
        node = root
        for byte in key:
            node = node.setdefault(byte, {})
        node[None] = value
    return root


def _canonical_nodes(root: dict) -> Tuple[List[tuple], int]:
    """(nodes, the root's id): canonical ids given bottom-up, so that nodes with the same
    value and children get the same id; `nodes[id]` is (value or None, ((label, child id),
    ...))."""
    signatures: Dict[tuple, int] = {}
    nodes: List[tuple] = []

    def canonical(node: dict) -> int:
        children = tuple(sorted((label, canonical(child)) for label, child in node.items()
                                if label is not None))
        signature = (node.get(None), children)
        if signature not in signatures:
            signatures[signature] = len(nodes)
            nodes.append(signature)
        return signatures[signature]

    return nodes, canonical(root)


class _DoubleArray:
    """The double array being filled: `units`, which positions are `used`, and each placed
    node's base. Position 0 holds the root's unit."""

    def __init__(self, nodes: List[tuple]):
        self.nodes = nodes
        self.units: List[int] = [0]
        self.used = bytearray(1)
        self.used[0] = 1
        self.bases: Dict[int, int] = {}
        self.taken_bases = {0}
        self.first_free = 1
        self.frontier = 1  # one past the last used slot

    def _ensure(self, size: int) -> None:
        if len(self.units) < size:
            self.units.extend([0] * (size - len(self.units)))
            self.used.extend(bytes(size - len(self.used)))

    def find_base(self, labels: List[int]) -> int:
        """The first free position that can hold the smallest label, such that all other
        labels fit too and no other node has this base (lookups check labels only, so two
        nodes with one base would see each other's children)."""
        used = self.used
        while self.first_free < len(used) and used[self.first_free]:
            self.first_free += 1
        position = self.first_free
        if len(labels) > 1:  # rarely fits a small hole: search near the end
            position = max(self.first_free, self.frontier - 1024)
        while True:
            if position + 512 > len(used):
                self._ensure(position + 4096)
            if not used[position]:
                base = position ^ labels[0]
                if base not in self.taken_bases and not used[base] and all(
                        not used[base ^ label] for label in labels[1:]):
                    return base
            position += 1

    def place(self, node_id: int) -> int:
        """Places the node `node_id` and its subtree (children first, so their bases are
        known when their units are written); returns its base."""
        if node_id in self.bases:
            return self.bases[node_id]
        value, children = self.nodes[node_id]
        for _, child in children:
            self.place(child)
        labels = sorted([label for label, _ in children] + ([0] if value is not None else []))
        base = self.find_base(labels)
        self.taken_bases.add(base)
        # The base slot is reserved even without a value, so that free slots are never
        # taken bases and the search for a free slot stays short.
        self.used[base] = 1
        for label in labels:
            self.used[base ^ label] = 1
        self.frontier = max(self.frontier, base + 1, *(base ^ label + 1 for label in labels))
        if value is not None:
            self.units[base] = value | _VALUE_FLAG
        self.bases[node_id] = base
        for label, child in children:
            self.units[base ^ label] = _unit(base ^ label, label, self.nodes[child],
                                             self.bases[child])
        return base


def _whole_regions(units: List[int], used: bytearray) -> List[int]:
    """`units` trimmed to the last used unit, then padded to whole 256-unit regions."""
    while len(units) > 1 and not used[len(units) - 1]:
        units.pop()
    # The op reads `base ^ byte` for any byte of the text without a bounds check, so every
    # base's 256-unit region must lie inside the array: whole regions, as darts-clone's own
    # builder leaves them. (Trimmed to the last used unit, a lookup of a byte sequence that
    # is not in the table read past the array's end: wrong pieces, or a crash.)
    units.extend([0] * (-len(units) % 256))
    return units


def _unit(position: int, label: int, node: tuple, base) -> int:
    value, children = node
    unit = label | (_HAS_LEAF if value is not None else 0)
    if base is None:  # a leaf without children or value cannot occur
        return unit
    offset = position ^ base
    if offset < (1 << 21):
        return unit | (offset << 10)
    if offset % 256 or offset >> 8 >= (1 << 21):
        raise ValueError("normaliser table too large for a darts-clone offset")
    return unit | _LARGE_OFFSET | ((offset >> 8) << 10)


def _flatbuffer(*, lower_case: bool, trie: List[int], zero_data: int, pool: bytes) -> bytes:
    """A `FastBertNormalizerModel` flatbuffer (TF-Text's fast_bert_normalizer_model.fbs:
    lower_case_nfd_strip_accents, trie_array, data_for_codepoint_zero,
    normalized_string_pool)."""
    builder = flatbuffers.Builder(len(trie) * 4 + len(pool) + 1024)
    pool_vector = builder.CreateNumpyVector(np.frombuffer(pool or b"\x00", np.uint8))
    trie_vector = builder.CreateNumpyVector(np.asarray(trie, np.uint32))
    builder.StartObject(4)
    builder.PrependUOffsetTRelativeSlot(3, pool_vector, 0)
    builder.PrependInt32Slot(2, zero_data, 0)
    builder.PrependUOffsetTRelativeSlot(1, trie_vector, 0)
    builder.PrependBoolSlot(0, lower_case, False)
    builder.Finish(builder.EndObject())
    return bytes(builder.Output())


def build_bert_normalizer_model(*, lower_case: bool) -> bytes:
    """Builds the `FastBertNormalizer` model from this Python's `unicodedata` (about a
    second for the uncased table: every character is normalised once)."""
    values, pool, zero = _encode_values(_changed_characters(lower_case=lower_case))
    return _flatbuffer(lower_case=lower_case, trie=_build_trie(values), zero_data=zero, pool=pool)


def shipped_table(*, lower_case: bool) -> pathlib.Path:
    """Where the package keeps the model built with this Python's Unicode version."""
    case = "uncased" if lower_case else "cased"
    return _TABLES / f"bert_{case}-unicode-{unicodedata.unidata_version}.bin"


def write_shipped_tables() -> List[pathlib.Path]:
    """Builds both models and writes them where `shipped_table` looks (after a change to
    the rules above: `tests/text/test_bert_normalizer.py` fails while they differ)."""
    written = []
    for lower_case in (True, False):
        path = shipped_table(lower_case=lower_case)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(build_bert_normalizer_model(lower_case=lower_case))
        written.append(path)
    return written


@functools.lru_cache(maxsize=2)
def bert_normalizer_model(*, lower_case: bool) -> bytes:
    """The `FastBertNormalizer` model (pass as `fast_bert_normalizer_model_buffer`) that
    normalises as Hugging Face's `BertTokenizer` does, cased or uncased: the one the
    package ships for this Python's Unicode version, or else built here."""
    path = shipped_table(lower_case=lower_case)
    if path.is_file():
        return path.read_bytes()
    return build_bert_normalizer_model(lower_case=lower_case)
