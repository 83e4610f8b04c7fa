"""The Bible of `public_data.py bible`: the King James Version and the Reina-Valera 1909,
verse-aligned from their SWORD modules by the KJV versification of SWORD's headers, with the
verses whose two sides do not match excluded and the reason written down."""

import collections
import html
import math
import os
import re
import statistics
import struct
import zlib
from typing import Dict, List, Tuple

from public_packages import deb_data, staged

# The Bible: two SWORD modules and the versification of SWORD's headers (Debian 12).
BIBLE_URLS = (
    "https://deb.debian.org/debian/pool/main/s/sword-text-kjv/sword-text-kjv_14.3-1_all.deb",
    "https://deb.debian.org/debian/pool/main/s/sword-text-sparv/"
    "sword-text-sparv_2.60-1_all.deb",
    "https://deb.debian.org/debian/pool/main/s/sword/libsword-dev_1.9.0+dfsg-4+b4_amd64.deb")
_MODULES = {"english": "engKJV2006eb", "spanish": "spaRV1909eb"}
_ENCLITIC = re.compile(r"(?:lo|le|la|los|las|les|me|te|se|nos|os)\b")
_WORD_END = re.compile(r"(</(?:w|transChange)>)(?=<(?:w|transChange)\b[^>]*>)")


def versification(canon_h: str) -> List[Tuple[str, str, str, List[int]]]:
    """(testament, OSIS id, name, verses per chapter) of each book, from SWORD's `canon.h`
    (the KJV versification: `otbooks`, `ntbooks` and the verse counts `vm`)."""
    def books(array):
        body = canon_h[canon_h.index(f"struct sbook {array}[]"):]
        body = body[:body.index("};")]
        return [(m.group(2), m.group(1), int(m.group(3))) for m in re.finditer(
            r'\{"([^"]+)", "[^"]*", "([^"]+)", (\d+)\}', body)]

    counts = canon_h[canon_h.index("int vm[]"):]
    counts = [int(n) for n in re.findall(r"\d+", re.sub(r"//[^\n]*", "", counts[
        counts.index("{") + 1:counts.index("};")]))]
    result, position = [], 0
    for testament, array in (("OT", "otbooks"), ("NT", "ntbooks")):
        for osis, name, chapters in books(array):
            result.append((testament, osis, name, counts[position:position + chapters]))
            position += chapters
    if position != len(counts):
        raise ValueError(f"canon.h: {len(counts)} chapter verse counts, {position} chapters")
    return result


def ztext_entries(files: Dict[str, bytes], testament: str) -> List[str]:
    """The entries of one testament of a SWORD zText module (`ot`/`nt` .bzv: block, offset,
    size per entry; .bzs: offset, size, unpacked size per zlib block of .bzz)."""
    index, blocks, data = (files[f"{testament}.{kind}"] for kind in ("bzv", "bzs", "bzz"))
    unpacked: Dict[int, bytes] = {}
    entries = []
    for entry in range(len(index) // 10):
        block, offset, size = struct.unpack_from("<IIH", index, entry * 10)
        if not size:
            entries.append("")
            continue
        if block not in unpacked:
            start, length, _ = struct.unpack_from("<III", blocks, block * 12)
            unpacked[block] = zlib.decompress(data[start:start + length])
        entries.append(unpacked[block][offset:offset + size].decode("utf-8"))
    return entries


def osis_text(osis: str) -> str:
    """A verse's text from its OSIS markup: notes dropped with their content, a space
    between word elements that touch (but an enclitic pronoun stays attached: the Spanish
    module's `presentáron<w>le</w>`), tags removed, entities unescaped, the paragraph sign
    and stray USFM `\nd` markers removed, whitespace collapsed."""
    text = re.sub(r"<note\b.*?</note>", "", osis, flags=re.S)
    parts = _WORD_END.split(text)
    joined = []
    for number, part in enumerate(parts):
        joined.append(part)
        if number % 2 and number + 1 < len(parts):  # a word element's end before another
            following = re.sub(r"<[^>]+>", "", parts[number + 1])
            if not _ENCLITIC.match(following):
                joined.append(" ")
    text = html.unescape(re.sub(r"<[^>]+>", "", "".join(joined)))
    text = re.sub(r"\\nd\*?", "", text.replace("\u00b6", ""))
    return " ".join(text.split())


def strongs(osis: str) -> set:
    return {int(number) for number in re.findall(r"strong:[HG](\d+)", osis)}


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def excluded_verses(english: List[str], spanish: List[str], english_strongs: List[set],
                    spanish_strongs: List[set]) -> Dict[int, str]:
    """Index -> reason, for the verses whose Spanish text does not translate the English
    verse of the same number (docs/data.md, "The English–Spanish Bible")."""
    count = len(english)
    same = [_jaccard(english_strongs[i], spanish_strongs[i]) for i in range(count)]
    before = [_jaccard(english_strongs[i], spanish_strongs[i - 1]) if i else 0.0
              for i in range(count)]
    after = [_jaccard(english_strongs[i], spanish_strongs[i + 1]) if i + 1 < count else 0.0
             for i in range(count)]

    def window(values, i):
        low, high = max(0, i - 2), min(count, i + 3)
        return sum(values[low:high]) / (high - low)

    reasons = {i: "empty_spa" for i in range(count) if not spanish[i]}
    for i in range(count):
        if i not in reasons and (window(same, i) < 0.3 or window(same, i) < window(before, i)
                                 or window(same, i) < window(after, i)):
            reasons[i] = "versification_shift"
    for i in range(count - 1):
        if i not in reasons and not spanish[i + 1] and _jaccard(
                english_strongs[i] | english_strongs[i + 1], spanish_strongs[i]) > same[i]:
            reasons[i] = "merged_with_next_verse"
    kept = [i for i in range(count) if i not in reasons]
    ratios = {i: math.log(len(spanish[i]) / len(english[i])) for i in kept}
    mean = statistics.mean(ratios.values())
    deviation = statistics.pstdev(ratios.values())
    for i in kept:
        common = english_strongs[i] & spanish_strongs[i]
        if abs(ratios[i] - mean) > 3 * deviation and (
                len(common) < 0.5 * len(english_strongs[i])
                or len(common) < 0.5 * len(spanish_strongs[i])):
            reasons[i] = "length_and_strongs_mismatch"
    return reasons


def build_bible(packages: List[bytes], output: str) -> Dict[str, int]:
    """`eng_kjv.txt`, `spa_rv1909.txt`, `refs.txt`, `books.tsv`, `excluded.tsv` and the
    modules' copyright files, from the two modules' packages and libsword-dev's."""
    modules: Dict[str, Dict[str, bytes]] = {}
    copyrights: Dict[str, bytes] = {}
    canon_h = None
    for package in packages:
        data = deb_data(package)
        for member in data.getmembers():
            name = member.name.lstrip("./")
            if not member.isfile():
                continue
            match = re.search(r"modules/texts/ztext/(\w+)/([on]t\.bz[vsz])$", name)
            if match:
                modules.setdefault(match.group(1), {})[match.group(2)] = \
                    data.extractfile(member).read()
            elif re.fullmatch(r"usr/share/doc/(sword-text-\w+)/copyright", name):
                copyrights[name.split("/")[3]] = data.extractfile(member).read()
            elif name.endswith("include/sword/canon.h"):
                canon_h = data.extractfile(member).read().decode("utf-8")
    missing = [m for m in _MODULES.values() if m not in modules] + (
        [] if canon_h else ["canon.h"])
    if missing:
        raise ValueError(f"the packages lack {', '.join(missing)} (give the three of "
                         "docs/data.md)")
    refs, english_osis, spanish_osis = [], [], []
    entries = {(side, t): ztext_entries(modules[module], t)
               for side, module in _MODULES.items() for t in ("ot", "nt")}
    entry = {"ot": 2, "nt": 2}  # 0: the module's heading, 1: the testament's
    for testament, osis, _, chapters in versification(canon_h):
        t = testament.lower()
        entry[t] += 1  # the book's heading
        for chapter, verses in enumerate(chapters, 1):
            entry[t] += 1  # the chapter's heading
            for verse in range(1, verses + 1):
                refs.append((testament, f"{osis}.{chapter}.{verse}"))
                english_osis.append(entries["english", t][entry[t]])
                spanish_osis.append(entries["spanish", t][entry[t]])
                entry[t] += 1
    english = [osis_text(v) for v in english_osis]
    spanish = [osis_text(v) for v in spanish_osis]
    reasons = excluded_verses(english, spanish, [strongs(v) for v in english_osis],
                              [strongs(v) for v in spanish_osis])
    kept = [i for i in range(len(refs)) if english[i] and i not in reasons]
    with staged(output) as folder:
        def write(name, lines):
            with open(os.path.join(folder, name), "w", encoding="utf-8", newline="\n") as f:
                f.writelines(line + "\n" for line in lines)

        write("eng_kjv.txt", [english[i] for i in kept])
        write("spa_rv1909.txt", [spanish[i] for i in kept])
        write("refs.txt", [f"{refs[i][0]}\t{refs[i][1]}" for i in kept])
        write("excluded.tsv", ["ref\treason"] + [f"{refs[i][1]}\t{reasons[i]}"
                                                 for i in sorted(reasons)])
        books = ["book\tname\ttestament\tfirst_line\tlast_line\tn_lines\tn_chapters"]
        names = {osis: (testament, name) for testament, osis, name, _ in versification(canon_h)}
        lines_of = collections.defaultdict(list)
        for line, i in enumerate(kept, 1):
            lines_of[refs[i][1].split(".")[0]].append((line, refs[i][1].split(".")[1]))
        for osis, (testament, name) in names.items():
            lines = lines_of[osis]
            books.append(f"{osis}\t{name}\t{testament}\t{lines[0][0]}\t{lines[-1][0]}\t"
                         f"{len(lines)}\t{len({chapter for _, chapter in lines})}")
        write("books.tsv", books)
        for package_name, text in copyrights.items():
            with open(os.path.join(folder, f"copyright-{package_name}.txt"), "wb") as f:
                f.write(text)
    return {"verses": len(kept), "excluded": len(reasons)}
