"""What an export format is: its flag, the check that it can hold the model, its writer and
its rows of the model card (`ExportFormat`), and what the exporter hands every writer
(`WriteContext`).

Standard library only: the command builds its flags from the formats before TensorFlow is
imported. The writers import what they need when they run.
"""

import dataclasses
import os
from typing import Any, Callable, Optional, Tuple


@dataclasses.dataclass
class WriteContext:
    """The exporter's state, shared by the writers of one export.

    `encoder`: the restored `SentenceEncoder`; `model`: its `SentenceModelConfig`;
    `tokenizer`: the serving tokenizer; `staged`: the staging folder that becomes `OUT`;
    `export_dir`: `OUT` (for messages); `stage`: the progress lines. The TF Hub and TF
    Serving format sets `module` (the float32 `ServingModule`) and `forward_error`; the
    exporter then sets `meta` (the export's metadata, which each later writer adds its entry
    to) and `card_description` (the model card's description list, for the cards of other
    libraries' folders).
    """

    encoder: Any
    model: Any
    tokenizer: Any
    seq_length: int
    staged: str
    export_dir: str
    stage: Callable[[str], None]
    module: Any = None
    forward_error: Optional[float] = None
    meta: Optional[dict] = None
    card_description: str = ""

    def path(self, relative: str) -> str:
        """Where `OUT/relative` (`/`-separated) is written in the staging folder."""
        return os.path.join(self.staged, *relative.split("/"))


def _no_text(meta: dict) -> str:
    return ""


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """One format an export can write.

    `name`: `export()`'s keyword, the metadata's `options` key and the flag `--name`;
    `help`: the flag's help (the always-written format has no flag); `always`: written by
    every export; `recorded`: its option is in the metadata even when off (the formats of
    the first metadata version, so that their exports still compare equal); `implies`: the
    formats it writes into or reads from, turned on with it; `outputs`: files that a whole
    export with it holds (relative to `OUT`); `require`: raises one line when a package it
    needs is missing (run before TensorFlow starts); `check(model, flag)`: raises one line,
    starting with `flag`, when it cannot hold the model (run before anything is written);
    `write(context)`: writes it into the staging folder; `card_rows(meta)`: its rows of the
    model card's table of contents; `card_section(meta)`: text the card adds after its own
    loading lines (how to load and use what the format wrote).
    """

    name: str
    write: Callable[[WriteContext], None]
    help: str = ""
    always: bool = False
    recorded: bool = False
    implies: Tuple[str, ...] = ()
    outputs: Tuple[str, ...] = ()
    require: Optional[Callable[[], None]] = None
    check: Optional[Callable[[Any, str], None]] = None
    card_rows: Callable[[dict], str] = _no_text
    card_section: Callable[[dict], str] = _no_text

    @property
    def flag(self) -> str:
        return f"--{self.name}"
