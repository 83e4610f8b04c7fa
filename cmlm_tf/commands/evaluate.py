r"""Evaluates an exported encoder with the published protocols.

    python -m cmlm_tf.evaluate sts --model EXPORT_DIR --data sts-dev.csv [--format stsb|tsv]
    python -m cmlm_tf.evaluate retrieval --model EXPORT_DIR (--src F --tgt F | --pairs F.tsv)
    python -m cmlm_tf.evaluate mining --model EXPORT_DIR --src F --tgt F --gold F \
        [--margin ratio|distance] [--k 4] [--threshold T]
    python -m cmlm_tf.evaluate bias --model EXPORT_DIR --data DIR --langs eng,spa,deu [--k 10]
    python -m cmlm_tf.evaluate classify --model EXPORT_DIR --train F --test F [--dev F]
    python -m cmlm_tf.evaluate pcr --model EXPORT_DIR --input en=F --input es=F --save_pcr F
    python -m cmlm_tf.evaluate mteb --model EXPORT_DIR --tasks STSBenchmark [--output_folder D]

Every task prints a table and, with `--output report.json`, writes its metrics (accuracies,
precision, recall, F1 and shares as fractions). `retrieval`, `mining` and `bias` take `--pcr`
(fit per-language principal component removal on the evaluated sentences; `--save_pcr F`
keeps the components) or `--pcr_file F` (apply components saved earlier). `mteb` runs any
MTEB 2.x task (it needs `pip install 'cmlm_tf[mteb]'`) and keeps MTEB's result files in
`--output_folder`. Bad files or arguments stop with a one-line error and exit code 2.
"""

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from cmlm_tf.commands import common
from cmlm_tf.evaluation import mining, readers
from cmlm_tf.files import output_folders

TASKS = ("sts", "retrieval", "mining", "bias", "classify", "pcr", "mteb")
PCR_TASKS = ("retrieval", "mining", "bias")


def _common_parser() -> argparse.ArgumentParser:
    shared = common.ArgumentParser(add_help=False)
    shared.add_argument("--model", required=True, help="export folder (python -m cmlm_tf.export)")
    shared.add_argument("--output", help="write the report as JSON to this file")
    shared.add_argument("--batch_size", type=int, default=64, help="encode batch size")
    return shared


def build_parser() -> argparse.ArgumentParser:
    parser = common.ArgumentParser(
        prog="python -m cmlm_tf.evaluate",
        description="Evaluate an exported cmlm_tf encoder: STS, translation retrieval, "
                    "bitext mining (BUCC), same-language bias, linear-probe classification.")
    tasks = parser.add_subparsers(dest="task", required=True, metavar="TASK")
    shared = _common_parser()

    sts = tasks.add_parser("sts", parents=[shared], help="Spearman/Pearson of cosine vs gold")
    sts.add_argument("--data", required=True, help="STS file")
    sts.add_argument("--format", choices=readers.STS_FORMATS, default="auto",
                     help="stsb: score in column 5, sentences in 6 and 7; tsv: s1, s2, score; "
                          "auto (default): tsv when a line has 3 fields")

    retrieval = tasks.add_parser("retrieval", parents=[shared],
                                 help="top-1 translation retrieval accuracy, both directions")
    retrieval.add_argument("--src", help="one sentence per line (Tatoeba layout)")
    retrieval.add_argument("--tgt", help="the translations, line-aligned with --src")
    retrieval.add_argument("--pairs", help="instead of --src/--tgt: source<TAB>target lines")
    common.add_pcr_arguments(retrieval)

    mine = tasks.add_parser("mining", parents=[shared],
                            help="BUCC: margin-based mining, precision/recall/F1 vs gold")
    mine.add_argument("--src", required=True, help="id<TAB>sentence")
    mine.add_argument("--tgt", required=True, help="id<TAB>sentence")
    mine.add_argument("--gold", required=True, help="src_id<TAB>tgt_id")
    mine.add_argument("--margin", choices=mining.MARGINS, default="ratio")
    mine.add_argument("--k", type=int, default=4, help="neighbours for the margin (LASER: 4)")
    mine.add_argument("--threshold", type=float,
                      help="keep pairs scoring at least this; default: the best-F1 threshold")
    common.add_pcr_arguments(mine)

    bias = tasks.add_parser("bias", parents=[shared],
                            help="share of nearest neighbours in the query's own language")
    bias.add_argument("--data", required=True, help="folder of line-aligned DIR/<lang>.txt")
    bias.add_argument("--langs", required=True, help="comma-separated languages (file names)")
    bias.add_argument("--k", type=int, default=10, help="neighbours per query (default 10)")
    common.add_pcr_arguments(bias, languages=False)

    probe = tasks.add_parser("classify", parents=[shared],
                             help="logistic-regression probe accuracy on frozen embeddings")
    probe.add_argument("--train", required=True, help="text<TAB>label")
    probe.add_argument("--test", required=True, help="text<TAB>label")
    probe.add_argument("--dev", help="text<TAB>label; chooses C (default: 5-fold CV on train)")

    fit = tasks.add_parser("pcr", parents=[shared],
                           help="fit PCR components on given files and save them")
    fit.add_argument("--input", action="append", required=True, metavar="LANG=FILE",
                     help="sentences of one language, one per line (repeatable)")
    fit.add_argument("--save_pcr", required=True, help="output file (JSON)")

    bench = tasks.add_parser("mteb", parents=[shared],
                             help="MTEB 2.x tasks by name (pip install 'cmlm_tf[mteb]')")
    bench.add_argument("--tasks", required=True, nargs="+", metavar="TASK",
                       help="MTEB task names, e.g. STSBenchmark (space- or comma-separated)")
    bench.add_argument("--output_folder", default="mteb_results",
                       help="MTEB's result folder (default mteb_results): "
                            "results/cmlm_tf__<export folder>/<revision>/<Task>.json")
    bench.add_argument("--overwrite", action="store_true",
                       help="run again where the folder already has results (MTEB reuses them)")
    return parser


def _check_arguments(args) -> None:
    if args.batch_size <= 0:
        raise common.UsageError(f"--batch_size must be positive, got {args.batch_size}")
    if getattr(args, "k", 1) < 1:
        raise common.UsageError(f"--k must be positive, got {args.k}")
    if args.task in PCR_TASKS and args.save_pcr and not args.pcr:
        raise common.UsageError("--save_pcr needs --pcr (there is nothing fitted to save)")
    if args.task == "retrieval":
        if args.pairs and (args.src or args.tgt):
            raise common.UsageError("give either --pairs or --src and --tgt, not both")
        if not args.pairs and not (args.src and args.tgt):
            raise common.UsageError("retrieval needs --src and --tgt, or --pairs")


def parse_language_files(values: Sequence[str]) -> List[Tuple[str, str]]:
    """`LANG=FILE` strings → [(lang, file)]."""
    parsed = []
    for value in values:
        language, sep, path = value.partition("=")
        if not sep or not language or not path:
            raise common.UsageError(f"--input {value!r}: expected LANG=FILE")
        parsed.append((language, path))
    return parsed


def _read_inputs(args) -> Dict[str, object]:
    """Reads and checks every input file before the model is loaded."""
    if args.task == "sts":
        first, second, gold = readers.read_sts(args.data, args.format)
        return {"first": first, "second": second, "gold": gold}
    if args.task == "retrieval":
        if args.pairs:
            src, tgt = readers.read_bitext_tsv(args.pairs)
        else:
            src, tgt = readers.read_aligned(args.src, args.tgt)
        return {"src": src, "tgt": tgt}
    if args.task == "mining":
        src_ids, src = readers.read_id_sentences(args.src)
        tgt_ids, tgt = readers.read_id_sentences(args.tgt)
        return {"src_ids": src_ids, "src": src, "tgt_ids": tgt_ids, "tgt": tgt,
                "gold": readers.read_gold_pairs(args.gold)}
    if args.task == "bias":
        languages = [lang.strip() for lang in args.langs.split(",") if lang.strip()]
        if len(languages) < 2:
            raise common.UsageError(f"--langs: need at least 2 languages, got {args.langs!r}")
        texts = readers.read_multiway(args.data, languages)
        pool = sum(len(lines) for lines in texts.values())
        if args.k > pool - 1:
            raise common.UsageError(f"--k {args.k} is more than the {pool - 1} other sentences")
        return {"texts": texts}
    if args.task == "classify":
        splits = {"train": readers.read_labelled(args.train),
                  "test": readers.read_labelled(args.test)}
        if args.dev:
            splits["dev"] = readers.read_labelled(args.dev)
        return splits
    languages = parse_language_files(args.input)
    names = [lang for lang, _ in languages]
    if len(set(names)) != len(names):
        raise common.UsageError("--input: a language is given twice")
    return {"texts": {lang: readers.read_sentences(path, skip_empty=True)
                      for lang, path in languages}}


def _languages(args, inputs) -> List[str]:
    if args.task == "bias":
        return list(inputs["texts"])
    return [args.src_lang, args.tgt_lang]


def run(args) -> Dict[str, object]:
    """Runs one parsed command; returns the report."""
    from cmlm_tf.evaluation import suite
    from cmlm_tf.evaluation.pcr import PCRComponents

    _check_arguments(args)
    if args.task == "mteb":
        return _run_mteb(args)
    inputs = _read_inputs(args)
    pcr = None
    if args.task in PCR_TASKS:
        pcr = common.load_pcr(args.pcr_file)
        common.check_pcr_languages(pcr, _languages(args, inputs), args.pcr_file)
    encode = common.load_encoder(args.model, args.batch_size)
    fitted = None
    pcr_options = {}
    if args.task in PCR_TASKS:
        pcr_options = {"fit_pcr": args.pcr, "pcr": pcr}
    if args.task == "sts":
        metrics = suite.run_sts(encode, inputs["first"], inputs["second"], inputs["gold"])
    elif args.task == "retrieval":
        metrics, fitted = suite.run_retrieval(encode, inputs["src"], inputs["tgt"],
                                              src_lang=args.src_lang, tgt_lang=args.tgt_lang,
                                              **pcr_options)
    elif args.task == "mining":
        metrics, fitted = suite.run_mining(
            encode, inputs["src_ids"], inputs["src"], inputs["tgt_ids"], tgt=inputs["tgt"],
            gold=inputs["gold"], k=args.k, margin=args.margin, threshold=args.threshold,
            src_lang=args.src_lang, tgt_lang=args.tgt_lang, **pcr_options)
    elif args.task == "bias":
        metrics, fitted = suite.run_bias(encode, inputs["texts"], k=args.k, **pcr_options)
    elif args.task == "classify":
        metrics = suite.run_classify(encode, inputs["train"], inputs["test"],
                                     inputs.get("dev"))
    else:
        fitted = PCRComponents.fit({lang: encode(texts)
                                    for lang, texts in inputs["texts"].items()})
        metrics = {"languages": list(fitted.components), "dim": fitted.dim}
    if fitted is not None and args.save_pcr:
        fitted.save(args.save_pcr)
    return {"task": args.task, "model": args.model, "inputs": _input_files(args),
            "pcr": _pcr_summary(args), "metrics": metrics}


def _run_mteb(args) -> Dict[str, object]:
    """The `mteb` task: MTEB by task name, through `cmlm_tf.evaluation.mteb_adapter`."""
    from cmlm_tf.evaluation import mteb_adapter
    from cmlm_tf.inference import load, read_metadata

    try:
        mteb_adapter.import_mteb()
    except ImportError:
        raise common.UsageError("python -m cmlm_tf.evaluate mteb needs MTEB, which is not "
                             f"installed: {mteb_adapter.INSTALL_HINT}") from None
    read_metadata(args.model)  # a wrong --model stops before MTEB loads its task list
    tasks = mteb_adapter.resolve_tasks(args.tasks)
    encoder = mteb_adapter.MTEBEncoder(load(args.model))
    outcome = mteb_adapter.evaluate_encoder(encoder, tasks, args.output_folder,
                                            batch_size=args.batch_size, overwrite=args.overwrite)
    for path in outcome["files"]:
        print(f"MTEB results: {path}", file=sys.stderr)
    return {"task": "mteb", "model": args.model,
            "inputs": {"tasks": [task.metadata.name for task in tasks],
                       "output_folder": args.output_folder},
            "pcr": {"mode": "none"}, "metrics": outcome["scores"], "files": outcome["files"]}


def _input_files(args) -> Dict[str, object]:
    names = ("data", "format", "src", "tgt", "pairs", "gold", "langs", "train", "test", "dev",
             "input")
    return {name: getattr(args, name) for name in names if getattr(args, name, None)}


def check_outputs(args) -> None:
    """Refuses a `--output` or `--save_pcr` that is one of the inputs, inside or around one
    (`output_folders.check_apart`): writing it would replace the input."""
    inputs = {f"--{name}": value for name, value in _input_files(args).items()
              if name not in ("format", "langs", "input")}
    inputs.update({"--model": args.model, "--pcr_file": getattr(args, "pcr_file", None)})
    if getattr(args, "input", None):
        inputs["--input"] = [path for _, path in parse_language_files(args.input)]
    for flag in ("--output", "--save_pcr"):
        if getattr(args, flag[2:], None):
            output_folders.check_apart(getattr(args, flag[2:]), flag, inputs)


def _pcr_summary(args) -> Dict[str, object]:
    if args.task == "pcr":
        return {"mode": "fitted", "saved_to": args.save_pcr}
    if args.task not in PCR_TASKS or not (args.pcr or args.pcr_file):
        return {"mode": "none"}
    if args.pcr_file:
        return {"mode": "file", "file": args.pcr_file}
    return {"mode": "fitted", "saved_to": args.save_pcr}


def _flatten(metrics: Dict[str, object], prefix: str = "") -> List[Tuple[str, object]]:
    rows = []
    for name, value in metrics.items():
        if isinstance(value, dict):
            rows.extend(_flatten(value, f"{prefix}{name}."))
        else:
            rows.append((prefix + name, value))
    return rows


def format_table(report: Dict[str, object]) -> str:
    """The report's metrics as an aligned two-column table."""
    rows = _flatten(report["metrics"])
    pcr = report["pcr"]["mode"]
    title = f"{report['task']} — {report['model']}" + ("" if pcr == "none" else
                                                       f" (PCR: {pcr})")
    width = max(len(name) for name, _ in rows)
    lines = [title, "-" * max(len(title), width + 12)]
    for name, value in rows:
        if isinstance(value, float):
            text = f"{value:.4f}" if abs(value) < 1e4 else f"{value:.6g}"
        elif isinstance(value, list):
            text = ",".join(str(v) for v in value)
        else:
            text = str(value)
        lines.append(f"{name:<{width}}  {text:>10}")
    return "\n".join(lines)


def write_report(report: Dict[str, object], path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    common.check_input_paths(parser, {"--model": args.model})

    def body():
        check_outputs(args)
        report = run(args)
        print(format_table(report))
        if args.output:
            write_report(report, args.output)

    return common.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
