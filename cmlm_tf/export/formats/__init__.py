"""The formats an export writes, one module each, in the order they are written.

Each module defines `FORMAT`, an `ExportFormat` (`base.py`): its flag, the check that it
can hold the model, its writer and its rows of the model card. `export_lib.export` takes
them as keyword-only flags, the command line adds a `--name` flag for each, and the model
card asks each for its rows. docs/architecture.md, "Adding an export format", says how to
add one.
"""

from typing import Dict, List

from cmlm_tf.export.formats import (
    bf16,
    int8,
    keras_hub,
    onnx,
    sentence_transformers,
    tf_hub,
    tflite,
)
from cmlm_tf.export.formats.base import ExportFormat, WriteContext

__all__ = ["FLAGGED", "FORMATS", "ExportFormat", "WriteContext", "add_flags", "check",
           "chosen", "options", "outputs", "require"]

FORMATS = (tf_hub.FORMAT, bf16.FORMAT, int8.FORMAT, tflite.FORMAT,
           sentence_transformers.FORMAT, onnx.FORMAT, keras_hub.FORMAT)
# The formats an export writes only when asked (a flag each).
FLAGGED = tuple(export_format for export_format in FORMATS if not export_format.always)
_BY_NAME = {export_format.name: export_format for export_format in FORMATS}


def _asked(flags: Dict[str, bool]) -> List[str]:
    """The names of the formats `flags` turns on; a name that is no format's is refused as
    Python refuses an unknown keyword."""
    unknown = sorted(set(flags) - {export_format.name for export_format in FLAGGED})
    if unknown:
        raise TypeError(f"export() got an unexpected keyword argument {unknown[0]!r} "
                        f"(export formats: {', '.join(f.name for f in FLAGGED)})")
    return [export_format.name for export_format in FLAGGED if flags.get(export_format.name)]


def chosen(flags: Dict[str, bool]) -> List[ExportFormat]:
    """The formats an export with `flags` ({name: on}) writes, in writing order: those
    always written, those asked for and those they imply."""
    on = set(_asked(flags))
    pending = list(on)
    while pending:
        for implied in _BY_NAME[pending.pop()].implies:
            if implied not in on:
                on.add(implied)
                pending.append(implied)
    return [f for f in FORMATS if f.always or f.name in on]


def _asking_flag(export_format: ExportFormat, flags: Dict[str, bool]) -> str:
    """The flag that turned `export_format` on: its own, or that of a format implying it."""
    asked = _asked(flags)
    if export_format.name in asked:
        return export_format.flag
    return next((_BY_NAME[name].flag for name in asked
                 if export_format.name in _BY_NAME[name].implies), export_format.flag)


def require(flags: Dict[str, bool]) -> None:
    """Raises one line when a chosen format needs a package that is not installed."""
    for export_format in chosen(flags):
        if export_format.require:
            export_format.require()


def check(flags: Dict[str, bool], model) -> None:
    """Raises one line, starting with the flag that asked for it, when a chosen format cannot
    hold `model` (a `SentenceModelConfig`): before anything is written."""
    for export_format in chosen(flags):
        if export_format.check:
            export_format.check(model, _asking_flag(export_format, flags))


def options(flags: Dict[str, bool]) -> Dict[str, bool]:
    """The formats' part of the metadata's `options`: those of the first metadata version
    always, the others only when written (so that earlier exports still compare equal)."""
    on = {export_format.name for export_format in chosen(flags)}
    return {export_format.name: export_format.name in on for export_format in FLAGGED
            if export_format.recorded or export_format.name in on}


def outputs(recorded: Dict[str, bool]) -> List[str]:
    """The files and folders (relative to `OUT`) that a whole export with the formats of
    `recorded` (the metadata's `options`) holds."""
    flags = {name: bool(recorded.get(name)) for name in _BY_NAME if name in recorded
             and _BY_NAME[name] in FLAGGED}
    return [path for export_format in chosen(flags) for path in export_format.outputs]


def add_flags(parser) -> None:
    """Adds each format's `--name` flag to an argparse parser."""
    for export_format in FLAGGED:
        parser.add_argument(export_format.flag, action="store_true", help=export_format.help)
