"""Where an export is written: beside `OUT` (`OUT.tmp-*`), then swapped into place whole.

An export folder may not overlap its source (`check_export_dir`); the debris of a killed
export is restored or removed first (`staged_folder`), under a lock of OUT's parent that
every export of the folder takes; a full disk is one line naming the file
(`writing`).
"""

import os
import shutil
from typing import Optional

from cmlm_tf import disk, run_dir, staged_folder

# The export's scratch folder inside the staging folder (the checkpoint snapshot, the
# vocabulary copy, a converted --hf_dir); removed before the swap.
WORK_DIR = "_work"


def check_export_dir(export_dir: str, **sources: Optional[str]) -> None:
    """Refuses an export folder that is, holds or sits inside a source folder (`--model_dir`,
    `--hf_dir`, the `--checkpoint`'s folder): `--overwrite` would replace it."""
    target = os.path.realpath(export_dir)
    for flag, path in sources.items():
        if not path or "://" in path:
            continue
        if flag == "checkpoint" and not os.path.isdir(path):
            path = os.path.dirname(path) or "."  # a prefix: its folder
        source = os.path.realpath(path)
        if target == source:
            relation = "is"
        elif target.startswith(os.path.join(source, "")):
            relation = "is inside"
        elif source.startswith(os.path.join(target, "")):
            relation = "holds"
        else:
            continue
        raise ValueError(f"--export_dir {export_dir} {relation} the --{flag} folder {path}; "
                         "the export would replace it: write the export to a folder of its own")


def writing(export_dir: str, name: str):
    """Reports a full disk while writing `OUT/name` as one line naming it."""
    return disk.reporting_disk_full(os.path.join(export_dir, name) if name else export_dir)


def start(export_dir: str, overwrite: bool) -> str:
    """Restores an export a killed swap left aside, refuses an existing OUT without
    `overwrite`, and returns a new staging folder beside OUT."""
    parent = os.path.dirname(export_dir)
    with disk.reporting_disk_full(export_dir):
        os.makedirs(parent, exist_ok=True)
    with run_dir.folder_lock(parent):
        staged_folder.restore_interrupted(export_dir)
    if os.path.exists(export_dir) and not overwrite:
        raise FileExistsError(f"{export_dir}: already exists (pass --overwrite to replace it)")
    with disk.reporting_disk_full(export_dir):
        return staged_folder.owned_tempdir(export_dir)


def publish(staging: str, export_dir: str, overwrite: bool) -> None:
    """Drops the work folder and swaps the finished staging folder into OUT."""
    shutil.rmtree(os.path.join(staging, WORK_DIR), ignore_errors=True)
    with writing(export_dir, ""):
        staged_folder.replace_dir(staging, export_dir, overwrite)


def remove_stale(export_dir: str) -> None:
    """Removes what the swap into OUT left aside (the old export, killed writers' folders)."""
    with run_dir.folder_lock(os.path.dirname(export_dir)):
        staged_folder.remove_stale(export_dir)
