r"""Translation retrieval of exported models on the held-out sets of `bitext_split.py`.

    python benchmarks/heldout_retrieval.py --heldout runs/bitext_split/heldout \
        --model exports/all-MiniLM-L6-v2 --model exports/bitext_minilm [--output report.json] \
        [--hub] [--sets bible_es]

For every `heldout/<name>.en` with its line-aligned `heldout/<name>.<lang>`, prints the top-1
cosine accuracy in both directions (`cmlm_tf.evaluation.retrieval`, the Tatoeba protocol) for
each model, and the pair-weighted mean over the sets. Models load with `cmlm_tf.load`, or with
`--hub` as `hub.KerasLayer`s (`preprocessor/` then `encoder/`, its `default` output).
"""

import argparse
import glob
import json
import os
import sys

import numpy as np
import tensorflow as tf
import tensorflow_hub as hub
import tensorflow_text  # noqa: F401  (the preprocessor's ops)

import cmlm_tf
from cmlm_tf.evaluation import readers, retrieval


def heldout_sets(folder: str):
    """(name, english file, other file) for every held-out set in `folder`."""
    sets = []
    for english in sorted(glob.glob(os.path.join(folder, "*.en"))):
        base = english[:-3]
        others = [p for p in glob.glob(base + ".*") if p != english]
        if len(others) != 1:
            raise ValueError(f"{base}.*: expected one translation file beside {english}")
        sets.append((os.path.basename(base), english, others[0]))
    if not sets:
        raise ValueError(f"{folder}: no held-out *.en files (--heldout)")
    return sets


class HubModel:
    """`encode` through `hub.KerasLayer(preprocessor)` and `hub.KerasLayer(encoder)`."""

    def __init__(self, export_dir: str, batch_size: int = 64):
        self.preprocessor = hub.KerasLayer(os.path.join(export_dir, "preprocessor"))
        self.encoder = hub.KerasLayer(os.path.join(export_dir, "encoder"))
        self.batch_size = batch_size

    def encode(self, texts):
        vectors = [self.encoder(self.preprocessor(tf.constant(texts[i:i + self.batch_size])))
                   ["default"].numpy() for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(vectors, axis=0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heldout", required=True)
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--output")
    parser.add_argument("--hub", action="store_true",
                        help="load preprocessor/ and encoder/ with hub.KerasLayer")
    parser.add_argument("--sets", help="comma-separated set names (default: all)")
    args = parser.parse_args(argv)


    sets = heldout_sets(args.heldout)
    if args.sets:
        wanted = args.sets.split(",")
        unknown = sorted(set(wanted) - {s[0] for s in sets})
        if unknown:
            print(f"error: --sets {','.join(unknown)}: no such set in {args.heldout} "
                  f"(have {', '.join(s[0] for s in sets)})", file=sys.stderr)
            return 2
        sets = [s for s in sets if s[0] in wanted]
    report = {}
    for model_dir in args.model:
        model = HubModel(model_dir) if args.hub else cmlm_tf.load(model_dir)
        rows, total = {}, 0
        sums = {"src2tgt_accuracy": 0.0, "tgt2src_accuracy": 0.0}
        for name, english_path, other_path in sets:
            english, other = readers.read_aligned(english_path, other_path)
            scores = retrieval.retrieval_accuracy(model.encode(english), model.encode(other))
            rows[name] = scores
            total += scores["num_pairs"]
            for key in sums:
                sums[key] += scores[key] * scores["num_pairs"]
        rows["mean"] = {key: value / total for key, value in sums.items()}
        rows["mean"]["num_pairs"] = total
        report[model_dir] = rows
    names = [name for name, _, _ in sets] + ["mean"]
    print(f"{'set':<14}" + "".join(f"{os.path.basename(m.rstrip('/')):>34}" for m in args.model))
    for name in names:
        cells = "".join(
            f"{report[m][name]['src2tgt_accuracy']:>16.4f} /"
            f"{report[m][name]['tgt2src_accuracy']:>7.4f}{'':>9}" for m in args.model)
        print(f"{name:<14}{cells}   (n={report[args.model[0]][name]['num_pairs']})")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
