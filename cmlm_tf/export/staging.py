"""Where an export is written: beside `OUT` (`OUT.tmp-*`), then swapped into place whole.

An export folder may not overlap its source (`check_export_dir`), and `--overwrite` replaces
only an export (`check_replaceable`); the debris of a killed export is restored or removed
first (`staged_folder`), under a lock of OUT's parent that every export of the folder takes;
a full disk is one line naming the file (`writing`).
"""

import os
import shutil
from typing import Optional

from cmlm_tf.export.export_metadata import METADATA_FILE
from cmlm_tf.files import disk, locks, output_folders, staged_folder

# The export's scratch folder inside the staging folder (the checkpoint snapshot, the
# vocabulary copy, a converted --hf_dir); removed before the swap.
WORK_DIR = "_work"


def check_export_dir(export_dir: str, **sources: Optional[str]) -> None:
    """Refuses an export folder that is, holds or sits inside a source folder (`--model_dir`,
    `--hf_dir`, the `--checkpoint`'s folder): `--overwrite` would replace it
    (`output_folders.check_apart`)."""
    checkpoint = sources.get("checkpoint")
    if checkpoint and "://" not in checkpoint and not os.path.isdir(checkpoint):
        sources["checkpoint"] = os.path.dirname(checkpoint) or "."  # a prefix: its folder
    output_folders.check_apart(export_dir, "--export_dir",
                               {f"--{flag}": path for flag, path in sources.items()})


def check_replaceable(export_dir: str, *, overwrite: bool) -> None:
    """Refuses an existing OUT without `overwrite`, and with it anything but an export
    (`cmlm_tf_export.json`) or an empty folder (`output_folders.check_output`)."""
    output_folders.check_output(export_dir, "--export_dir", marker=METADATA_FILE,
                                what="an export", overwrite=overwrite)


def writing(export_dir: str, name: str):
    """Reports a full disk while writing `OUT/name` as one line naming it."""
    return disk.reporting_disk_full(os.path.join(export_dir, name) if name else export_dir)


def start(export_dir: str, *, overwrite: bool) -> str:
    """Restores an export a killed swap left aside, refuses an OUT it may not replace
    (`check_replaceable`), and returns a new staging folder beside OUT."""
    parent = os.path.dirname(export_dir)
    with disk.reporting_disk_full(export_dir):
        os.makedirs(parent, exist_ok=True)
    with locks.folder_lock(parent):
        staged_folder.restore_interrupted(export_dir)
    check_replaceable(export_dir, overwrite=overwrite)
    with disk.reporting_disk_full(export_dir):
        return staged_folder.owned_tempdir(export_dir)


def publish(staging: str, export_dir: str, *, overwrite: bool) -> None:
    """Drops the work folder and swaps the finished staging folder into OUT."""
    shutil.rmtree(os.path.join(staging, WORK_DIR), ignore_errors=True)
    with writing(export_dir, ""):
        staged_folder.replace_dir(staging, export_dir, overwrite=overwrite)


def remove_stale(export_dir: str) -> None:
    """Removes what the swap into OUT left aside (the old export, killed writers' folders)."""
    with locks.folder_lock(os.path.dirname(export_dir)):
        staged_folder.remove_stale(export_dir)
