r"""Fast WordPiece against the classic BertTokenizer: differing lines and throughput.

    python benchmarks/tokenizer_parity.py --data ../shared/data \
        --vocab uncased:PATH/vocab.txt [--vocab cased:runs/cased_vocab/vocab.txt ...] \
        [--batch_size 512] [--repeats 3]

Reads every line of the shared multilingual data (UDHR in all its languages, both sides of
the installation-guide pairs, the English and Spanish Bible, both sentences of STS-B train
and dev), tokenizes all of it with TF-Text's classic `BertTokenizer` (what cmlm_tf used
before) and with `cmlm_tf.text.tokenization.FastWordpieceTokenizer` (`FastBertTokenizer`), for
each `--vocab` (`cased:` or `uncased:` then the file), and prints the number of lines whose
ids differ (with the first few) and the lines/s of each inside a `tf.function` (as the
exports run them), best of `--repeats` passes.

A cased multilingual vocabulary can be learnt from the same data with
`python -m cmlm_tf.build_vocab` (no `--lower_case`), e.g.
`bash configs/build_multilingual_vocab.sh runs/vocab_udhr`.
"""

import argparse
import glob
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def read_lines(data: str):
    lines = []
    for path in sorted(glob.glob(os.path.join(data, "udhr", "*.txt"))):
        if os.path.basename(path).startswith("LICENSE"):
            continue
        with open(path, encoding="utf-8") as f:
            lines += f.read().splitlines()
    for path in sorted(glob.glob(os.path.join(data, "install_guide", "*.tsv"))):
        with open(path, encoding="utf-8") as f:
            for line in f.read().splitlines():
                lines += line.split("\t")
    for name in ("eng_kjv.txt", "spa_rv1909.txt"):
        with open(os.path.join(data, "bible", name), encoding="utf-8") as f:
            lines += f.read().splitlines()
    for name in ("sts-train.csv", "sts-dev.csv"):
        with open(os.path.join(data, "stsb", name), encoding="utf-8") as f:
            for line in f.read().splitlines():
                lines += line.split("\t")[5:7]
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the shared data folder")
    parser.add_argument("--vocab", action="append", required=True,
                        help="cased:FILE or uncased:FILE; repeat for several")
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import tensorflow as tf
    import tensorflow_text as tf_text

    from cmlm_tf import configs
    from cmlm_tf.text import tokenization

    lines = read_lines(args.data)
    batches = [tf.constant(lines[i:i + args.batch_size])
               for i in range(0, len(lines), args.batch_size)]
    print(f"{len(lines)} lines from {args.data}; load average {os.getloadavg()[0]:.2f}")
    for spec in args.vocab:
        casing, _, vocab_file = spec.partition(":")
        if casing not in ("cased", "uncased") or not vocab_file:
            parser.error(f"--vocab {spec!r}: expected cased:FILE or uncased:FILE")
        lower_case = casing == "uncased"
        table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
            vocab_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
            tf.lookup.TextFileIndex.LINE_NUMBER), -1)
        classic = tf_text.BertTokenizer(table, lower_case=lower_case)
        fast = tokenization.build_tokenizer(configs.TokenizerConfig(
            vocab_file=vocab_file, lower_case=lower_case))
        assert isinstance(fast, tokenization.FastWordpieceTokenizer)
        # Timed as the exports run them: inside a graph (tf.function), not op by op.
        spec = [tf.TensorSpec([None], tf.string)]
        runs = {
            "classic BertTokenizer": tf.function(
                lambda batch, classic=classic: classic.tokenize(batch).merge_dims(1, -1),
                input_signature=spec, autograph=False),
            "fast WordPiece": tf.function(lambda batch, fast=fast: fast(batch),
                                          input_signature=spec, autograph=False),
        }
        ids, best = {}, {}
        for name, tokenize in runs.items():
            ids[name] = [row for batch in batches for row in tokenize(batch).to_list()]
            best[name] = float("inf")
            for _ in range(args.repeats):
                start = time.perf_counter()
                for batch in batches:
                    tokenize(batch)
                best[name] = min(best[name], time.perf_counter() - start)
        differing = [i for i, (a, b) in enumerate(zip(*ids.values())) if a != b]
        with open(vocab_file, encoding="utf-8") as f:
            vocab_size = sum(1 for _ in f)
        print(f"\n{casing} vocabulary {vocab_file} ({vocab_size} tokens): "
              f"{len(differing)} of {len(lines)} lines differ")
        for index in differing[:5]:
            print(f"  line {index}: {lines[index][:100]!r}")
        for name in runs:
            print(f"  {name:24s} {len(lines) / best[name]:10.0f} lines/s "
                  f"({best[name]:.2f} s)")
        print(f"  speed-up: {best['classic BertTokenizer'] / best['fast WordPiece']:.1f}x")


if __name__ == "__main__":
    main()
