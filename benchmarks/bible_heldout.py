r"""Held-out English–Spanish Bible verses for models trained on the bundled Bible sample.

    python benchmarks/bible_heldout.py --bible_dir ../shared/data/bible \
        --output runs/bible_heldout/heldout [--start_line 27716] [--count 1000]

The bundled `cmlm_tf/data/corpus/bible_en_es.tsv` and `bible_en_es_heldout.tsv` hold
Matthew–Acts (lines 22,933–27,715 of
`eng_kjv.txt` / `spa_rv1909.txt`). This writes `OUTPUT.en` and `OUTPUT.es`, line-aligned: the
first `--count` verses from `--start_line` (1-based; 27,716 is Romans 1:1) with both sides
non-empty, whose English text occurs neither in the bundled files nor earlier in the output.
Score with `python -m cmlm_tf.evaluate retrieval --model EXPORT --src OUTPUT.en
--tgt OUTPUT.es`.
"""

import argparse
import os
import sys

from bitext_split import bible_pairs

BUNDLED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "cmlm_tf", "data", "corpus", "bible_en_es.tsv")


def heldout_pairs(bible_dir: str, start_line: int, count: int, bundled: str = BUNDLED):
    seen = set()
    for path in (bundled, bundled.replace(".tsv", "_heldout.tsv")):
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                seen.update(line.split("\t", 1)[0].strip() for line in f)
    pairs = []
    for number, (english, spanish) in enumerate(bible_pairs(bible_dir), start=1):
        if number < start_line or not english or not spanish or english in seen:
            continue
        seen.add(english)
        pairs.append((english, spanish))
        if len(pairs) == count:
            break
    return pairs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bible_dir", default="../shared/data/bible")
    parser.add_argument("--output", required=True, help="prefix of OUTPUT.en / OUTPUT.es")
    parser.add_argument("--start_line", type=int, default=27716)
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args(argv)
    if not os.path.exists(os.path.join(args.bible_dir, "eng_kjv.txt")):
        print(f"error: {args.bible_dir}/eng_kjv.txt not found", file=sys.stderr)
        return 1
    pairs = heldout_pairs(args.bible_dir, args.start_line, args.count)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    for index, suffix in enumerate(("en", "es")):
        with open(f"{args.output}.{suffix}", "w", encoding="utf-8") as f:
            f.writelines(pair[index] + "\n" for pair in pairs)
    print(f"{len(pairs)} held-out pairs written to {args.output}.en / .es")
    return 0


if __name__ == "__main__":
    sys.exit(main())
