"""What the command lines share: the one error path (a user's mistake prints one line
naming the field or file and exits 2; an internal error keeps its traceback), readable
console logs, and the options and loaders of the commands that encode with an exported
model (`cmlm_tf.evaluate`, `cmlm_tf.mine`).

Nothing here imports TensorFlow at import time: `--help` and argument errors stay fast.
"""

import argparse
import logging
import os
import sys
from typing import Callable, Optional, Sequence

# TensorFlow errors that report a user's file or argument (a missing or unreadable file, a
# corrupt checkpoint, a directory that cannot be written), not a bug.
_TF_USER_ERRORS = {"NotFoundError", "PermissionDeniedError", "DataLossError",
                   "AlreadyExistsError", "FailedPreconditionError", "UnimplementedError"}


class UsageError(ValueError):
    """A bad combination of command-line arguments."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, but an option it does not know is reported as such, with the
    closest known flag ("--model-dir: not recognised; did you mean --model_dir?"), before
    any other complaint (a required `--model_dir` is "missing" only because of the typo).
    Every command's parser is one, subcommands included (argparse builds them alike)."""

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message):
        unknown = self.unrecognised_flags(getattr(self, "_given", []))
        if unknown:
            message = "; ".join(self._flag_suggestion(flag) for flag in unknown)
        super().error(message)

    def _known_flags(self) -> list:
        return _flags_of(self)

    def unrecognised_flags(self, given: Sequence[str]) -> list:
        """The option-like arguments in `given` that no flag of this parser accepts
        (unique prefixes, which argparse accepts, count as known)."""
        known = self._known_flags()
        unknown = []
        for token in given:
            if token == "--":
                break
            if not token.startswith("-") or token == "-" or _is_number(token):
                continue
            flag = token.split("=", 1)[0]
            if flag in known or (flag.startswith("--") and len(flag) > 2 and any(
                    name.startswith(flag) for name in known)):
                continue
            unknown.append(flag)
        return unknown

    def _flag_suggestion(self, flag: str) -> str:
        from cmlm_tf.did_you_mean import closest

        known = [name for name in self._known_flags() if name.startswith("--")]
        spelled = "--" + flag.lstrip("-").replace("-", "_")
        close = [spelled] if spelled in known else closest(flag, known)
        if close:
            return f"{flag}: not recognised; did you mean {' or '.join(close)}?"
        return f"{flag}: not recognised (see --help)"


def check_input_paths(parser: argparse.ArgumentParser, paths: dict) -> None:
    """Refuses, as an argument error, each local input folder or file of `paths` ({flag as
    shown: value or None}) that does not exist, with a close sibling when there is one
    ("runs/cmlm_tny: not found; did you mean runs/cmlm_tiny?"). Called right after parsing,
    before TensorFlow is imported. Remote paths (`gs://...`) are left to the reader."""
    for flag, path in paths.items():
        if path is None or "://" in path or os.path.exists(path):
            continue
        parent, name = os.path.split(os.path.normpath(path))
        try:
            siblings = os.listdir(parent or ".")
        except OSError:
            siblings = []
        from cmlm_tf.did_you_mean import closest

        close = [os.path.join(parent, sibling) for sibling in closest(name, siblings)]
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        parser.error(f"argument {flag}: {path}: not found{hint}")


def _flags_of(parser: argparse.ArgumentParser) -> list:
    """Every flag of `parser` and of its subcommands (argparse hands a subcommand's unknown
    arguments back to the top-level parser, which must not call its flags unknown)."""
    flags = []
    for action in parser._actions:
        flags += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for subparser in set(action.choices.values()):
                flags += _flags_of(subparser)
    return flags


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def one_line(error: Exception) -> str:
    """The informative line of an error's message (its type when it has none).

    TensorFlow's traced-function errors start with "in user code:" and end with the
    message; gin prefixes "In call to configurable".
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()
             and not line.strip().startswith("In call to configurable")]
    if not lines:
        return type(error).__name__
    if lines[0].startswith("in user code:"):
        return lines[-1][:500]
    return lines[0][:500]


def is_user_error(error: BaseException) -> bool:
    """Whether `error` reports a mistake in the user's arguments, config or files.

    ValueError (our errors name the field or file), OSError (FileNotFoundError,
    PermissionError, ...), Model Garden's unknown-registry LookupError, and TensorFlow's
    file and checkpoint errors. KeyError, IndexError and everything else are internal: they
    keep their traceback.
    """
    from cmlm_tf.files import disk

    if disk.is_disk_full(error):
        return True  # write sites name their file (`cmlm_tf.files.disk.reporting_disk_full`)
    if isinstance(error, (KeyError, IndexError)):
        return False
    if isinstance(error, (ValueError, OSError, LookupError)):
        return True
    cls = type(error)
    return cls.__module__.startswith("tensorflow") and cls.__name__ in _TF_USER_ERRORS


def run_main(body: Callable[[], Optional[int]]) -> int:
    """Runs a command's body: 0 (or what it returns) on success; a user error prints
    `error: <one line>` to stderr and gives 2; Ctrl-C gives 130; other errors propagate.

    `CMLM_TF_DEBUG=1` in the environment lets user errors propagate too (full traceback).
    """
    try:
        code = body()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 (sorted below; internal errors re-raised)
        if not is_user_error(error) or os.environ.get("CMLM_TF_DEBUG"):
            raise
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    return 0 if code is None else int(code)


# Lines libraries log at every checkpoint, which say nothing a user can act on.
_CHATTER = ("Sharding callback duration", "Sync on async checkpoint saving")


def _not_chatter(record) -> bool:
    return not record.getMessage().startswith(_CHATTER)


class ConsoleFormatter(logging.Formatter):
    """A log line as the console shows it: the message alone, `warning: ` or `ERROR: `
    before a warning or an error."""

    def __init__(self):
        super().__init__("%(message)s")

    def format(self, record) -> str:
        text = super().format(record)
        if record.levelno >= logging.ERROR:
            return "ERROR: " + text
        if record.levelno >= logging.WARNING:
            return "warning: " + text
        return text


def console_logging() -> None:
    """Logs go to stderr through absl's handler, as plain lines (`ConsoleFormatter`): no
    `I1127 23:49:54.715357 140219995249536 file.py:137]` prefix, and no per-checkpoint
    chatter of libraries. A run's log file (`run_dir.log_file`) keeps the full format."""
    from absl import flags
    from absl import logging as absl_logging

    flags.FLAGS.mark_as_parsed()  # absl logging without absl.app: no flags of its own
    absl_logging.use_absl_handler()
    absl_logging.set_verbosity(absl_logging.INFO)
    handler = absl_logging.get_absl_handler().python_handler
    handler.setFormatter(ConsoleFormatter())
    if _not_chatter not in handler.filters:
        handler.addFilter(_not_chatter)


def add_pcr_arguments(parser: argparse.ArgumentParser, *, languages: bool = True) -> None:
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


def load_encoder(export_dir: str, batch_size: int, stage=None):
    """An `encode(texts)` function for the export (progress bar on a terminal).

    Each call says once what it encodes; a later call says it is more of the same command
    ("encoding 668 more sentences, 1336 in all"), so two sides of equal size do not read
    as one step done twice. With `stage`, that line is the running stage, which its timer
    names again only if it lasts.
    """
    import cmlm_tf

    model = cmlm_tf.load(export_dir)
    encoded = [0]

    def encode(texts):
        if encoded[0]:
            what = (f"encoding {len(texts)} more sentences, "
                    f"{encoded[0] + len(texts)} in all")
        else:
            what = f"encoding {len(texts)} sentences"
        print(what, file=sys.stderr, flush=True)
        if stage is not None:
            stage(what)
        vectors = model.encode(texts, batch_size=batch_size)
        encoded[0] += len(texts)
        return vectors

    return encode
