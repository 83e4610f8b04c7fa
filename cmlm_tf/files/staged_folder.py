"""Folders published whole: written into a staging sibling, then renamed into place.

An export (`OUT/`) and an import folder are never changed in place. The writer makes
`OUT.tmp-<random>` beside the target (`owned_tempdir`), writes everything into it, and
renames it to `OUT` as its last step (`replace_dir`); an `--overwrite` first moves the old
folder aside into `OUT.old-<random>/export` and removes it once the new one is in place.
A process killed at any point leaves either the old folder, the new one, or the old one
inside a stale `OUT.old-*` folder, which the next writer renames back
(`restore_interrupted`) before anything else. Staging folders whose writer is gone are then
removed, with a warning (`remove_stale`).
"""

import json
import os
import shutil
import socket
import sys
import tempfile
from typing import List, Optional

from cmlm_tf.files import locks, output_folders

# In every staging folder: which process writes it, so a later writer can tell a folder an
# interrupted one left behind from one that another process is writing now.
OWNER_FILE = ".cmlm_tf_export_owner"


def owned_tempdir(target: str, infix: str = ".tmp-") -> str:
    """A new sibling folder of `target` holding OWNER_FILE, with the umask's usual mode (it
    may become the published folder, which other users, a model server's say, must be able
    to read)."""
    # The name says who writes it too, for a writer killed before its owner file is whole.
    prefix = f"{os.path.basename(target)}{infix}{output_folders.writer_tag()}-"
    folder = tempfile.mkdtemp(prefix=prefix, dir=os.path.dirname(target))
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        os.chmod(folder, 0o777 & ~umask)  # mkdtemp makes it 0700 whatever the umask
        with open(os.path.join(folder, OWNER_FILE), "w", encoding="utf-8") as f:
            json.dump({"pid": os.getpid(), "host": socket.gethostname()}, f)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def _owner_file(folder: str) -> Optional[dict]:
    """The writer a staging folder's owner file records, or None (no file yet, or damaged)."""
    try:
        with open(os.path.join(folder, OWNER_FILE), encoding="utf-8") as f:
            owner = json.load(f)
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def stale_staging(target: str) -> List[str]:
    """The names of `target`'s `.tmp-*` / `.old-*` siblings whose writing process is gone
    (`output_folders.writer_gone`: its owner file, else its name, says which process it
    was): what an interrupted writer leaves behind."""
    parent, base = os.path.split(target)
    stale = []
    for name in sorted(os.listdir(parent)):
        infix = next((infix for infix in (".tmp-", ".old-")
                      if name.startswith(base + infix)), None)
        if infix is None:
            continue
        folder = os.path.join(parent, name)
        if output_folders.writer_gone(folder, name[len(base) + len(infix):],
                                      _owner_file(folder)):
            stale.append(name)
    return stale


def restore_interrupted(target: str, what: str = "export") -> Optional[str]:
    """Renames the old folder back to `target` when an `--overwrite` was killed between its
    two renames (`target` missing, the old folder only in a stale `target.old-*/export`).
    Returns the folder it came from, or None."""
    if os.path.lexists(target):
        return None
    parent = os.path.dirname(target)
    olds = [os.path.join(parent, name) for name in stale_staging(target)
            if ".old-" in name and os.path.isdir(os.path.join(parent, name, "export"))]
    if not olds:
        return None
    newest = max(olds, key=os.path.getmtime)
    os.rename(os.path.join(newest, "export"), target)
    print(f"restored {target} from {newest}, left by an interrupted {what}", file=sys.stderr)
    return newest


def remove_stale(target: str, what: str = "export") -> List[str]:
    """Removes the folders an interrupted writer left behind (`stale_staging`), after
    restoring an old folder that is the only copy left (`restore_interrupted`). Returns
    the names removed."""
    restore_interrupted(target, what)
    removed = stale_staging(target)
    for name in removed:
        shutil.rmtree(os.path.join(os.path.dirname(target), name), ignore_errors=True)
    if removed:
        print(f"warning: removed {', '.join(removed)}, left by an interrupted {what}",
              file=sys.stderr)
    return removed


def replace_dir(new: str, target: str, *, overwrite: bool = True) -> None:
    """Moves `new` to `target`; an old `target` is removed only once `new` is in place.

    A process killed between the two renames leaves the old folder in
    `target.old-*/export`, which the next writer renames back (`restore_interrupted`).
    """
    with locks.folder_lock(os.path.dirname(target)):
        if os.path.exists(target) and not overwrite:  # another writer made it meanwhile
            raise FileExistsError(f"{target}: already exists (pass --overwrite to replace it)")
        if os.path.exists(target):
            old = owned_tempdir(target, ".old-")
            os.rename(target, os.path.join(old, "export"))
            os.rename(new, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(new, target)
        # Only now: until `new` is in place, its owner file marks it as a staging folder.
        os.remove(os.path.join(target, OWNER_FILE))
