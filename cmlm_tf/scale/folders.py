"""Folders and files on a local disk or on a remote filesystem (`gs://`, `s3://`), the
latter through Beam's `FileSystems`: the embeddings folder's reads, renames and deletions.

Object stores have no folders: a remote folder is the files under its prefix, and a rename
moves them one by one.
"""

import os
import shutil
from typing import List


def is_remote(path: str) -> bool:
    """Whether `path` names a remote filesystem (`gs://...`), handled by Beam's FileSystems."""
    return "://" in path


def join(folder: str, name: str) -> str:
    """`FOLDER/NAME`, for a local or a remote folder."""
    return f"{folder.rstrip('/')}/{name}" if is_remote(folder) else os.path.join(folder, name)


def clean(path: str) -> str:
    """`path` without a trailing slash, so that siblings are named beside it."""
    return path.rstrip("/") or path


def delete_folder(folder: str) -> None:
    """Deletes `folder` and everything in it (nothing if it does not exist)."""
    if is_remote(folder):
        from apache_beam.io.filesystems import FileSystems

        paths = remote_paths(folder)
        if paths:
            FileSystems.delete(paths)
    elif os.path.isdir(folder):
        shutil.rmtree(folder)
    elif os.path.exists(folder):
        os.remove(folder)


def exists(path: str) -> bool:
    """Whether a local path, or a remote file or folder, exists."""
    if is_remote(path):
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.exists(path) or bool(remote_paths(path))
    return os.path.exists(path)


def remote_paths(folder: str) -> List[str]:
    """Every file under a remote folder, at any depth (object stores have no folders)."""
    from apache_beam.io.filesystems import FileSystems

    prefix = folder.rstrip("/") + "/"
    return sorted(m.path for m in FileSystems.match([prefix + "**"])[0].metadata_list)


def files(folder: str) -> List[str]:
    """The names of the files directly in `folder` ([] if there is no such folder)."""
    if not is_remote(folder):
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    start = len(folder.rstrip("/")) + 1
    return [path[start:] for path in remote_paths(folder) if "/" not in path[start:]]


def siblings(out: str, infix: str) -> List[str]:
    """The folders beside `out` named `OUT<infix>...`."""
    if is_remote(out):
        from apache_beam.io.filesystems import FileSystems

        matched = FileSystems.match([f"{out}{infix}*/**"])[0].metadata_list
        start = len(out) + len(infix)
        return sorted({m.path[:m.path.index("/", start)] for m in matched
                       if "/" in m.path[start:]})
    parent, base = os.path.split(os.path.abspath(out))
    if not os.path.isdir(parent):
        return []
    return sorted(os.path.join(os.path.dirname(out), name) for name in os.listdir(parent)
                  if name.startswith(base + infix))


def rename_folder(source: str, destination: str, marker: str, *, marker_last: bool = True) -> None:
    """Renames a folder: one rename locally; remotely file by file, the file named `marker`
    (an output's manifest) last when `marker_last` (an output moved into place) and first
    otherwise (one moved away), so that no moment shows a manifest beside missing shards."""
    if not is_remote(source):
        os.rename(source, destination)
        return
    from apache_beam.io.filesystems import FileSystems

    start = len(source.rstrip("/"))
    paths = sorted(remote_paths(source),
                   key=lambda path: path.endswith("/" + marker) == marker_last)
    for path in paths:
        FileSystems.rename([path], [destination.rstrip("/") + path[start:]])


def open_file(path: str):
    """`path` opened for binary reading (Beam's FileSystems for a remote path)."""
    if not is_remote(path):
        return open(path, "rb")
    from apache_beam.io.filesystems import CompressionTypes, FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
