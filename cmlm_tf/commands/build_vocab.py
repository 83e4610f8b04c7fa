r"""Learns a vocabulary from plain-text corpora: WordPiece (BERT format) or SentencePiece.

    python -m cmlm_tf.build_vocab --input 'data/en/*.txt' --input 'data/es/*.txt' \
        --vocab_size 32000 [--lower_case] [--smoothing_exponent 0.3] --output vocab.txt
    python -m cmlm_tf.build_vocab --type sentencepiece --input 'data/*.txt' \
        --vocab_size 20000 [--lower_case] --output sp.model

Each `--input` is one language group: a file path or a glob matching several UTF-8 text
files with one sentence (or segment) per line; blank lines are ignored. The steps are:

1. Words are counted per group after BERT's basic pre-tokenisation, using the very
   `BasicTokenizer` that `tensorflow_text.BertTokenizer` runs before WordPiece: split on
   whitespace and punctuation, every CJK character a word of its own, control characters
   dropped; with `--lower_case` also case-folded and stripped of accents (NFD, drop Mn), as
   BERT uncased does. A vocabulary is only good for a tokenizer that splits words the same
   way, so build the model's `BertTokenizer` with the same `lower_case`.
2. Language smoothing, as in the CMLM and LaBSE papers: group l holds a share
   p_l = n_l / sum_k n_k of all word tokens and is re-weighted to q_l = p_l^a / sum_k p_k^a
   (a = `--smoothing_exponent`, default 0.3), so that low-resource languages get more
   vocabulary entries than their raw share; see `cmlm_tf.vocab.counts.language_weights`.
   `1.0` turns it off.
3. The merged, weighted counts go to TF-Text's WordPiece learner
   (`tensorflow_text.tools.wordpiece_vocab.wordpiece_tokenizer_learner_lib.learn`, the
   algorithm behind `bert_vocab_from_dataset`), with suffix pieces marked `##`.

The output starts with the reserved tokens `[PAD] [UNK] [CLS] [SEP] [MASK]` (ids 0-4, so
the padding id is 0 as in BERT), followed by every single character kept by the learner and
then the learned pieces, most frequent first: one token per line, UTF-8. The learner
binary-searches a frequency threshold and only approximately hits its target; the file never
has more than `--vocab_size` lines (see
`cmlm_tf.vocab.wordpiece.fit_to_size`), and may have fewer when the corpus
is small: the learner never keeps a piece seen fewer than 10 times (after weighting).

`--type sentencepiece` learns a joint unigram SentencePiece model over the lines of every
`--input` instead (`cmlm_tf.vocab.sentencepiece.train_sentencepiece`; no language
smoothing), with the pieces the TF Hub contract needs: `<pad>` 0, `<unk>` 1, `[CLS]` 2,
`[SEP]` 3, `[MASK]` 4. `--vocab_size` is an upper bound: a corpus too small for it yields
fewer pieces. Use it with
`task.model.tokenizer.type: sentencepiece`, `sp_model_file` the written model, the same
`lower_case`, and `task.model.encoder.vocab_size` the printed piece count. A training run whose
tokenizer is sentencepiece with an empty `sp_model_file` learns its own model this way before
it starts (`cmlm_tf.driver.train_lib.prepare_vocabulary`, on the text the task names, e.g.
BGT's pairs).
"""

import argparse
import glob
import os
import sys
from collections.abc import Sequence

VOCAB_TYPES = ("wordpiece", "sentencepiece")


def build_parser() -> argparse.ArgumentParser:
    from cmlm_tf.commands import common
    from cmlm_tf.vocab import wordpiece

    parser = common.ArgumentParser(
        prog="python -m cmlm_tf.build_vocab",
        description="Learn a vocabulary from text files: a multilingual WordPiece vocabulary "
                    "(BERT vocab.txt, one language group per --input, with language "
                    "smoothing), or a joint SentencePiece model (--type sentencepiece).")
    parser.add_argument("--type", choices=VOCAB_TYPES, default="wordpiece",
                        help="wordpiece (default): vocab.txt; sentencepiece: a unigram model "
                             "file with <pad>, <unk>, [CLS], [SEP], [MASK] first")
    parser.add_argument("--input", action="append", required=True, metavar="FILE_OR_GLOB",
                        help="one language group: a UTF-8 text file or a glob of them, one "
                             "sentence per line (quote globs); repeat for each language")
    parser.add_argument("--vocab_size", type=int, required=True,
                        help="most tokens in the output, the 5 reserved tokens included")
    parser.add_argument("--lower_case", action="store_true",
                        help="case-fold (and for WordPiece strip accents, as BERT uncased); "
                             "build the model's tokenizer with the same setting")
    parser.add_argument("--smoothing_exponent", type=float,
                        help="WordPiece only: language smoothing exponent a: shares p_l become "
                             f"p_l^a / sum p_k^a (default {wordpiece.DEFAULT_SMOOTHING_EXPONENT}; "
                             "1.0 = "
                             "no re-weighting)")
    parser.add_argument("--output", required=True,
                        help="vocabulary file (or SentencePiece model) to write")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns 0, or 2 after printing `error: ...` to stderr."""
    args = build_parser().parse_args(argv)
    from cmlm_tf.files import output_folders
    from cmlm_tf.vocab import sentencepiece, wordpiece
    from cmlm_tf.vocab.counts import VocabError

    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        print(f"error: --output {args.output!r}: folder {out_dir!r} does not exist",
              file=sys.stderr)
        return 2
    try:
        output_folders.check_apart(args.output, "--output", {"--input": [
            path for pattern in args.input for path in glob.glob(pattern) or [pattern]]})
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.type == "sentencepiece":
        if args.smoothing_exponent is not None:
            print("error: --smoothing_exponent applies to --type wordpiece only",
                  file=sys.stderr)
            return 2
        try:
            pieces = sentencepiece.build_sentencepiece(args.input, args.vocab_size, args.output,
                                         lower_case=args.lower_case, log=print)
        except VocabError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except OSError as e:
            print(f"error: --output {args.output!r} cannot be written: {e}", file=sys.stderr)
            return 2
        print(f"wrote a SentencePiece model of {pieces:,} pieces to {args.output}")
        return 0
    if args.smoothing_exponent is None:
        args.smoothing_exponent = wordpiece.DEFAULT_SMOOTHING_EXPONENT
    try:
        vocab = wordpiece.build_vocab(args.input, args.vocab_size, lower_case=args.lower_case,
                            smoothing_exponent=args.smoothing_exponent,
                            progress=not args.quiet, log=print)
    except VocabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        wordpiece.write_vocab(vocab, args.output)
    except OSError as e:
        print(f"error: --output {args.output!r} cannot be written: {e.strerror}",
              file=sys.stderr)
        return 2
    print(f"wrote {len(vocab):,} tokens to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
