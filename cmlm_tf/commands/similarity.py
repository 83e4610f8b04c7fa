r"""Prints the cosine similarities between sentences under an exported encoder.

    python -m cmlm_tf.similarity --model EXPORT_DIR "first sentence" "second sentence" ...
"""

import sys

from cmlm_tf.commands import common


def build_parser():
    parser = common.ArgumentParser(
        prog="python -m cmlm_tf.similarity",
        description="Encode sentences with an exported cmlm_tf model and print their "
                    "cosine similarity matrix.")
    parser.add_argument("--model", required=True, help="folder written by cmlm_tf.export")
    parser.add_argument("sentences", nargs="+")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    common.check_input_paths(parser, {"--model": args.model})
    return common.run_main(lambda: _print_similarities(args))


def _print_similarities(args) -> None:
    import cmlm_tf

    model = cmlm_tf.load(args.model)
    vectors = model.encode(args.sentences)
    similarity = vectors @ vectors.T
    width = max(len(s) for s in args.sentences[:9]) if len(args.sentences) < 10 else 40
    print(f"{model!r}")
    for i, sentence in enumerate(args.sentences):
        label = (sentence[: width - 1] + "…") if len(sentence) > width else sentence
        cells = " ".join(f"{similarity[i, j]:6.3f}" for j in range(len(args.sentences)))
        print(f"[{i}] {label:<{width}}  {cells}")
    for i in range(len(args.sentences)):
        ranked = [j for j in similarity[i].argsort()[::-1] if j != i]
        if ranked:
            print(f"nearest to [{i}]: [{ranked[0]}] {args.sentences[ranked[0]]!r} "
                  f"(cosine {similarity[i, ranked[0]]:.3f})")


if __name__ == "__main__":
    sys.exit(main())
