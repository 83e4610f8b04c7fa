r"""Converts MNLI / SNLI / XNLI TSV files into the `cmlm_tf/nli` format.

    python -m cmlm_tf.convert_nli multinli_1.0/multinli_1.0_train.txt nli/mnli_train.tsv
    python -m cmlm_tf.convert_nli XNLI-1.0/xnli.dev.tsv nli/xnli_dev --by_language \
        --languages en,es,de

Input files have a header row; columns are found by name: the premise in `sentence1` or
`premise`, the hypothesis in `sentence2`, `hypo` or `hypothesis`, the label in `gold_label`
or `label`, and optionally `language` and `pairID`. Rows whose label is not an NLI class
(MNLI's `-`) or whose text is empty are dropped and counted.

Without `--by_language` the output is one `premise<TAB>hypothesis<TAB>label` file (plus the
language columns when the input has `language`). With `--by_language` (XNLI dev/test, whose
rows are the same `pairID`s in 15 languages) it writes `OUT.<language>.tsv`, one per
language, line-aligned by `pairID` and keeping the pairs every language has: the input of
`task.train_data.cross_lingual: true`.
"""

import argparse
import csv
import os
import sys
from typing import Dict, List, Optional

from cmlm_tf.data.nli import LABEL_IDS

PREMISE_COLUMNS = ("sentence1", "premise")
HYPOTHESIS_COLUMNS = ("sentence2", "hypo", "hypothesis")
LABEL_COLUMNS = ("gold_label", "label")
CLASS_NAMES = ("entailment", "neutral", "contradiction")


def _column(header: List[str], names, path: str, *, required: bool = True) -> Optional[int]:
    lowered = [name.strip().lower() for name in header]
    for name in names:
        if name.lower() in lowered:
            return lowered.index(name.lower())
    if required:
        raise ValueError(f"{path}: no {'/'.join(names)} column in the header "
                         f"({', '.join(header[:12])})")
    return None


def _clean(text: str) -> str:
    return " ".join(text.split())


def read_rows(path: str) -> Dict:
    """Reads one header-led TSV file; returns the kept rows and the count of dropped ones."""
    csv.field_size_limit(sys.maxsize)
    rows, dropped = [], 0
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: empty file")
        premise = _column(header, PREMISE_COLUMNS, path)
        hypothesis = _column(header, HYPOTHESIS_COLUMNS, path)
        label = _column(header, LABEL_COLUMNS, path)
        language = _column(header, ("language",), path, required=False)
        pair_id = _column(header, ("pairid",), path, required=False)
        needed = max(premise, hypothesis, label)
        for number, fields in enumerate(reader, start=2):
            if len(fields) <= needed:
                dropped += 1
                continue
            label_id = LABEL_IDS.get(fields[label].strip().lower())
            texts = _clean(fields[premise]), _clean(fields[hypothesis])
            if label_id is None or not all(texts):
                dropped += 1
                continue
            row = {"premise": texts[0], "hypothesis": texts[1], "label": label_id,
                   "language": fields[language].strip() if language is not None and
                   len(fields) > language else "",
                   "pair_id": fields[pair_id].strip() if pair_id is not None and
                   len(fields) > pair_id else str(number)}
            rows.append(row)
    return {"rows": rows, "dropped": dropped}


def _line(row: Dict, *, with_language: bool) -> str:
    fields = [row["premise"], row["hypothesis"], CLASS_NAMES[row["label"]]]
    if with_language:
        fields += [row["language"], row["language"]]
    return "\t".join(fields) + "\n"


def convert(input_path: str, output: str, *, by_language: bool = False,
            languages: Optional[List[str]] = None) -> Dict[str, int]:
    """Writes the converted file(s); returns counts (`written`, `dropped`, `files`)."""
    result = read_rows(input_path)
    rows, dropped = result["rows"], result["dropped"]
    if languages:
        rows = [row for row in rows if row["language"] in languages]
    directory = os.path.dirname(output)
    if directory:
        os.makedirs(directory, exist_ok=True)
    if not by_language:
        with_language = any(row["language"] for row in rows)
        with open(output, "w", encoding="utf-8") as f:
            f.writelines(_line(row, with_language=with_language) for row in rows)
        return {"written": len(rows), "dropped": dropped, "files": 1}
    by_pair: Dict[str, Dict[str, Dict]] = {}
    for row in rows:
        if not row["language"]:
            raise ValueError(f"{input_path}: --by_language needs a language column")
        by_pair.setdefault(row["pair_id"], {})[row["language"]] = row
    names = sorted(languages or {row["language"] for row in rows})
    if len(names) < 2:
        raise ValueError(f"{input_path}: --by_language needs two or more languages, found "
                         f"{names}")
    complete = [pair for pair in by_pair.values()
                if all(name in pair for name in names)
                and len({pair[name]["label"] for name in names}) == 1]
    for name in names:
        with open(f"{output}.{name}.tsv", "w", encoding="utf-8") as f:
            f.writelines(_line(pair[name], with_language=False) for pair in complete)
    return {"written": len(complete), "dropped": dropped + len(by_pair) - len(complete),
            "files": len(names)}


def build_parser() -> argparse.ArgumentParser:
    from cmlm_tf.commands import common

    parser = common.ArgumentParser(prog="python -m cmlm_tf.convert_nli",
                                description=__doc__.split("\n\n")[0])
    parser.add_argument("input", help="MNLI/SNLI/XNLI TSV file with a header row")
    parser.add_argument("output", help="output file, or prefix with --by_language")
    parser.add_argument("--by_language", action="store_true",
                        help="write OUTPUT.<language>.tsv, line-aligned by pairID")
    parser.add_argument("--languages", default="",
                        help="comma-separated languages to keep (default: all)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    languages = [name.strip() for name in args.languages.split(",") if name.strip()]

    def body():
        from cmlm_tf.files import output_folders

        output_folders.check_apart(args.output, "output", {"input": args.input})
        counts = convert(args.input, args.output, by_language=args.by_language,
                         languages=languages or None)
        print(f"{counts['written']} examples written to {counts['files']} file(s); "
              f"{counts['dropped']} rows dropped")

    from cmlm_tf.commands import common

    return common.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
