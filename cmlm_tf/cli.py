"""What the command lines share: their usage errors and one-line error messages, and the
options and loaders of the commands that encode with an exported model (`cmlm_tf.evaluate`,
`cmlm_tf.mine`).

Nothing here imports TensorFlow at import time: `--help` and argument errors stay fast.
"""

import argparse
import sys
from typing import Optional, Sequence


class UsageError(ValueError):
    """A bad combination of command-line arguments."""


def one_line(error: Exception) -> str:
    """The first line of an error's message (its type when it has none)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def add_pcr_arguments(parser: argparse.ArgumentParser, languages: bool = True) -> None:
    """`--pcr`, `--pcr_file`, `--save_pcr` (and `--src_lang`/`--tgt_lang` when asked)."""
    group = parser.add_argument_group("principal component removal")
    exclusive = group.add_mutually_exclusive_group()
    exclusive.add_argument("--pcr", action="store_true",
                           help="fit one component per language on the evaluated sentences "
                                "and remove it")
    exclusive.add_argument("--pcr_file", help="apply components saved with --save_pcr")
    group.add_argument("--save_pcr", help="with --pcr: save the fitted components (JSON)")
    if languages:
        group.add_argument("--src_lang", default="src",
                           help="language name of the source side, for PCR files "
                                "(default: src)")
        group.add_argument("--tgt_lang", default="tgt",
                           help="language name of the target side (default: tgt)")


def load_pcr(path: Optional[str]):
    """The components saved at `path`, or None."""
    if not path:
        return None
    from cmlm_tf.evaluation.pcr import PCRComponents

    return PCRComponents.load(path)


def check_pcr_languages(pcr, languages: Sequence[str], path: str) -> None:
    """Stops before encoding when `pcr` lacks one of `languages`."""
    if pcr is None:
        return
    missing = [lang for lang in languages if lang not in pcr.components]
    if missing:
        raise UsageError(f"{path}: no PCR component for {', '.join(missing)} (the file has "
                         f"{', '.join(sorted(pcr.components))}); name the sides with "
                         "--src_lang/--tgt_lang or --langs")


def load_encoder(export_dir: str, batch_size: int):
    """An `encode(texts)` function for the export (progress bar on a terminal)."""
    import cmlm_tf

    model = cmlm_tf.load(export_dir)

    def encode(texts):
        print(f"encoding {len(texts)} sentences", file=sys.stderr, flush=True)
        return model.encode(texts, batch_size=batch_size)

    return encode
