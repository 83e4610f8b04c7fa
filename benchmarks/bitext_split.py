r"""Builds a bitext training file and held-out retrieval sets, split by English text.

    python benchmarks/bitext_split.py --shared_data ../shared/data --output runs/bitext_split \
        [--heldout_share 0.1] [--langs es,de,fr,ja,ru,zh_CN] [--max_heldout 1000]

Sources: the English–Spanish Bible (`bible/eng_kjv.txt`, `bible/spa_rv1909.txt`) and the
Debian Installation Guide paragraph pairs (`install_guide/<lang>.tsv`, English first). Where
`--shared_data` has no `bible/` (a clone on its own, offline), or with `--bundled`, the
4,783 English-Spanish verse pairs bundled in `cmlm_tf/data/corpus/` (Matthew to Acts) are
used instead, without the Installation Guide, with a warning.

The Installation Guide's English paragraphs recur across its 18 languages, and the Bible
repeats verses, so a split by line would leak held-out sentences into training. Here every
distinct English text goes to the held-out side or the training side by a hash of the text,
across all sources at once: no English sentence of a held-out pair occurs in training, in any
language.

Writes:
- `train.tsv`: `english<TAB>translation` for every training pair (all languages, shuffled).
- `heldout/<source>.en` and `heldout/<source>.xx`: line-aligned held-out pairs per source
  (`bible_es`, `guide_de`, …), English de-duplicated, at most `--max_heldout` lines.
- `split.json`: the counts.
"""

import argparse
import hashlib
import json
import os
import random
import sys


def _is_heldout(english: str, share: float) -> bool:
    digest = hashlib.sha256(english.strip().encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64 < share


def bible_pairs(folder: str):
    """(English, Spanish) per line of the verse-aligned `folder`/eng_kjv.txt and spa_rv1909.txt,
    stripped (empty where a side has no verse)."""
    with open(os.path.join(folder, "eng_kjv.txt"), encoding="utf-8") as en, \
            open(os.path.join(folder, "spa_rv1909.txt"), encoding="utf-8") as es:
        for english, spanish in zip(en, es):
            yield english.strip(), spanish.strip()


# The bundled verses: Matthew 1:1 to Acts 28:31 of the same alignment (docs/data.md).
BUNDLED = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "cmlm_tf", "data", "corpus", name)
           for name in ("bible_en_es.tsv", "bible_en_es_heldout.tsv")]
BUNDLED_PAIRS = 4115 + 668


def bundled_bible_pairs():
    """(English, Spanish) of the verse pairs bundled with cmlm_tf."""
    for path in BUNDLED:
        with open(path, encoding="utf-8") as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if len(fields) == 2:
                    yield fields[0].strip(), fields[1].strip()


def _guide(shared: str, lang: str):
    with open(os.path.join(shared, "install_guide", f"{lang}.tsv"), encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 2 and fields[0].strip() and fields[1].strip():
                yield fields[0].strip(), fields[1].strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared_data", default="../shared/data")
    parser.add_argument("--output", required=True)
    parser.add_argument("--heldout_share", type=float, default=0.1)
    parser.add_argument("--langs", default="es,de,fr,ja,ru,zh_CN",
                        help="Installation Guide languages to include")
    parser.add_argument("--max_heldout", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bundled", action="store_true",
                        help="use only the Bible verses bundled with cmlm_tf (works offline; "
                             "taken by itself when --shared_data has no bible/)")
    args = parser.parse_args(argv)
    bible = os.path.join(args.shared_data, "bible")
    if args.bundled or not os.path.isdir(bible):
        if not args.bundled:
            print(f"warning: {bible}: not found (--shared_data); using the {BUNDLED_PAIRS:,} "
                  "English-Spanish verse pairs bundled with cmlm_tf instead, without the "
                  "Installation Guide (docs/data.md#public-data-sets says how to get the "
                  "full sets)", file=sys.stderr)
        sources = {"bible_es": ("es", bundled_bible_pairs())}
    else:
        sources = {"bible_es": ("es", bible_pairs(bible))}
        for lang in [x for x in args.langs.split(",") if x]:
            path = os.path.join(args.shared_data, "install_guide", f"{lang}.tsv")
            if not os.path.exists(path):
                print(f"error: {path}: not found (--langs)", file=sys.stderr)
                return 2
            sources[f"guide_{lang}"] = (lang, _guide(args.shared_data, lang))

    os.makedirs(os.path.join(args.output, "heldout"), exist_ok=True)
    train, counts = [], {}
    for name, (lang, pairs) in sources.items():
        heldout, seen = [], set()
        kept = 0
        for english, other in pairs:
            if _is_heldout(english, args.heldout_share):
                if english not in seen and len(heldout) < args.max_heldout:
                    seen.add(english)
                    heldout.append((english, other))
            else:
                train.append((english, other))
                kept += 1
        base = os.path.join(args.output, "heldout", name)
        with open(base + ".en", "w", encoding="utf-8") as en, \
                open(f"{base}.{lang}", "w", encoding="utf-8") as xx:
            for english, other in heldout:
                en.write(english + "\n")
                xx.write(other + "\n")
        counts[name] = {"train": kept, "heldout": len(heldout)}
    random.Random(args.seed).shuffle(train)
    with open(os.path.join(args.output, "train.tsv"), "w", encoding="utf-8") as f:
        for english, other in train:
            f.write(f"{english}\t{other}\n")
    heldout_english = set()
    for name in sources:
        with open(os.path.join(args.output, "heldout", name + ".en"), encoding="utf-8") as f:
            heldout_english.update(line.rstrip("\n") for line in f)
    leaked = sum(english in heldout_english for english, _ in train)
    summary = {"train_pairs": len(train), "sources": counts, "leaked_english": leaked}
    with open(os.path.join(args.output, "split.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))
    return 0 if leaked == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
