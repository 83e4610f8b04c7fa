"""What a command may replace or delete: only what cmlm_tf wrote, and never an input.

One rule for every output flag (`--export_dir`, `--output_dir`, `--output`, `--work_dir`):

- An existing output folder is replaced, and only with `--overwrite`, when it is empty or
  holds the marker file cmlm_tf writes into that kind of folder: an export's
  `cmlm_tf_export.json`, an import folder's `warm_start.yaml`, an embeddings folder's
  `_cmlm_tf_embeddings.json` (`refusal`, `check_output`). Anything else is refused in one
  line that says what the folder holds, and `--overwrite` is suggested only where it would
  be obeyed.
- An output is never one of the command's inputs, inside one, or around one
  (`check_apart`).
- A staging or work folder is named after the process that writes it
  (`<name><infix><host>-<pid>-<random>`, `writer_tag`), so that a later run removes it
  only once that process is gone (`writer_gone`). A work folder goes beside the output, or
  inside the `--work_dir` the user names, never in place of it (`work_folder`): what is
  removed afterwards holds nothing but cmlm_tf's files, and a later run removes those of a
  killed one, with a warning (`remove_dead_work`).

Standard library only: the commands check their outputs before TensorFlow is imported.
"""

import os
import re
import shutil
import socket
import tempfile
import time
from typing import Dict, Iterable, List, Optional, Union

from cmlm_tf.driver import run_dir
from cmlm_tf.export import export_metadata
from cmlm_tf.files import locks

# A folder of a writer that does not say who it is (one made by an earlier version of
# cmlm_tf) counts as left behind once nothing in it changed for this long.
_YOUNG_SECONDS = 60
# Names a refusal shows of what a folder holds.
_SHOWN = 3


def host_tag() -> str:
    """This host's name as it goes into a folder name: letters and digits only."""
    return re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:24] or "host"


def writer_tag() -> str:
    """`<host>-<pid>`: the part of a staging or work folder's name that names its writer."""
    return f"{host_tag()}-{os.getpid()}"


def writer_of(tail: str) -> Optional[dict]:
    """The writer a folder name's tail records (`<host>-<pid>-...`, the part after its
    infix) as `{"pid", "host"}`, or None when the tail is not of that form."""
    match = re.match(r"^([A-Za-z0-9]+)-(\d+)-", tail)
    if match is None:
        return None
    host = socket.gethostname() if match.group(1) == host_tag() else match.group(1)
    return {"pid": int(match.group(2)), "host": host}


def writer_alive(owner: dict) -> bool:
    """Whether the writer `owner` (`{"pid", "host"}`) may still be running: it is on another
    host (which this process cannot ask), or a live process here."""
    if owner.get("host") != socket.gethostname():
        return True
    try:
        return locks.pid_alive(int(owner.get("pid", -1)))
    except (TypeError, ValueError):
        return False


def writer_gone(path: str, tail: str, owner: Optional[dict] = None) -> bool:
    """Whether the staging or work folder `path` was left by a writer that is gone:
    `owner` (from its owner file), else the writer its name's `tail` records, is not
    running; a folder naming no writer counts as left behind once it is
    `_YOUNG_SECONDS` old (remote ones at once: they have no cheap age)."""
    owner = owner or writer_of(tail)
    if owner is not None:
        return not writer_alive(owner)
    if "://" in path:
        return True
    try:
        return time.time() - os.path.getmtime(path) >= _YOUNG_SECONDS
    except OSError:
        return False


def describe(path: str, names: List[str]) -> str:
    """`holds a.txt, b.txt and 4 more`, with what cmlm_tf recognises of it (a training run)."""
    shown = ", ".join(names[:_SHOWN])
    if len(names) > _SHOWN:
        shown += f" and {len(names) - _SHOWN} more"
    if run_dir.PARAMS_FILE in names or "checkpoint" in names:
        shown += " (a training run)"
    elif export_metadata.METADATA_FILE in names:
        shown += " (an export)"
    return f"holds {shown}"


def refusal(path: str, flag: str, *, names: Optional[List[str]], marker: str, what: str,
            overwrite: bool) -> Optional[str]:
    """The one line refusing the existing output `path` (the value of `flag`), or None when
    it may be written.

    Args:
        names: the entries of the folder `path`; None when `path` is not a folder.
        marker: the file cmlm_tf writes into every folder of this kind.
        what: the kind, as a phrase: `an export`, `an import folder`, ...
        overwrite: whether the user passed `--overwrite`.
    """
    if names is None:
        return (f"{path}: exists and is not a folder, so not {what} written by cmlm_tf; "
                f"choose another {flag}")
    if not names or marker in names:
        if overwrite:
            return None
        return (f"{path}: already exists; pass --overwrite to replace it, or choose another "
                f"{flag}")
    held = f"{path}: {'exists and ' if overwrite else 'already exists and '}" \
        f"{describe(path, sorted(names))}, not {what} written by cmlm_tf (no {marker})"
    if overwrite:
        return (f"{held}; --overwrite replaces only {what} that cmlm_tf wrote: remove it "
                f"yourself or choose another {flag}")
    return f"{held}: choose another {flag}, or remove it yourself"


def check_output(path: str, flag: str, *, marker: str, what: str, overwrite: bool) -> None:
    """Raises FileExistsError with `refusal`'s line when the local output `path` exists
    and may not be written."""
    if not os.path.lexists(path):
        return
    names = sorted(os.listdir(path)) if os.path.isdir(path) else None
    line = refusal(path, flag, names=names, marker=marker, what=what, overwrite=overwrite)
    if line is not None:
        raise FileExistsError(line)


InputPaths = Dict[str, Union[None, str, Iterable[str]]]


def check_apart(output: str, flag: str, inputs: InputPaths) -> None:
    """Refuses an output that is, is inside, or holds one of the command's inputs.

    Args:
        output: the output path (file or folder), the value of `flag`.
        inputs: {input flag: a path, several paths, or None}; remote paths are skipped.

    Raises:
        ValueError: naming both flags and paths.
    """
    if "://" in output:
        return
    target = os.path.realpath(output)
    for input_flag, paths in inputs.items():
        for path in [paths] if isinstance(paths, str) else (paths or ()):
            if not path or "://" in path:
                continue
            source = os.path.realpath(path)
            if target == source:
                relation = "is"
            elif target.startswith(os.path.join(source, "")):
                relation = "is inside"
            elif source.startswith(os.path.join(target, "")):
                relation = "holds"
            else:
                continue
            kind = "folder" if os.path.isdir(path) else "file"
            raise ValueError(f"{flag} {output} {relation} the {input_flag} {kind} {path}; "
                             f"cmlm_tf never writes over an input: choose another {flag}")


def work_folder(parent: str, prefix: str) -> str:
    """A new work folder `PARENT/<prefix><host>-<pid>-<random>` for this process (local
    `parent`, made when missing). Remove it with `remove_work`."""
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{prefix}{writer_tag()}-", dir=parent)


def remote_work_folder(parent: str, prefix: str) -> str:
    """The name of a new work folder under a remote `parent` (`gs://...`), as
    `work_folder` names it; object stores make folders as files are written."""
    return f"{parent.rstrip('/')}/{prefix}{writer_tag()}-{os.urandom(4).hex()}"


def remove_work(folder: str, parent: str, *, parent_made: bool) -> None:
    """Removes the local work folder `folder`, and its `parent` too when this run made it
    and nothing else is in it."""
    shutil.rmtree(folder, ignore_errors=True)
    if parent_made:
        try:
            os.rmdir(parent)
        except OSError:
            pass  # something else is in it now: not ours to remove


def remove_dead_work(parent: str, prefix: str, what: str) -> List[str]:
    """Removes the work folders `PARENT/<prefix>*` whose writer is gone (`writer_gone`):
    what killed runs left. Returns one warning line per folder removed."""
    if "://" in parent or not os.path.isdir(parent):
        return []
    notes = []
    for name in sorted(os.listdir(parent)):
        path = os.path.join(parent, name)
        if name.startswith(prefix) and os.path.isdir(path) and \
                writer_gone(path, name[len(prefix):]):
            shutil.rmtree(path, ignore_errors=True)
            notes.append(f"removed {path}, left by {what} that did not finish")
    return notes
