"""Writing files without losing data: full disks reported in one line, outputs written under
a temporary name and renamed into place.

- `DiskFullError`: an `OSError` (ENOSPC) whose message names the file being written and the
  free space left, so the command lines print it as one line and exit 2.
- `reporting_disk_full(path)`: a `with` block that turns any "no space left on device"
  (Python's `OSError`, or TensorFlow's errors from a checkpoint or SavedModel write) into a
  `DiskFullError` naming `path`.
- `atomic_output(path)`: yields a temporary sibling of `path` to write; on success it is
  renamed over `path`, on any error it is removed and `path` is left as it was.

Nothing here imports TensorFlow.
"""

import contextlib
import errno
import os
import shutil
from typing import Iterator, Optional


class DiskFullError(OSError):
    """No space left on the device while writing a named file."""

    def __init__(self, path: str, detail: str = ""):
        free = free_bytes(path)
        space = f"{free / 2**20:.1f} MiB free there" if free is not None else "free space unknown"
        message = (f"{path}: no space left on device while writing it ({space}); free some "
                   "space or write to another disk")
        if detail:
            message += f" [{detail}]"
        super().__init__(errno.ENOSPC, message)
        self.path = path

    def __str__(self) -> str:
        return self.args[1]


def free_bytes(path: str) -> Optional[int]:
    """Free bytes on the filesystem holding `path` (or its nearest existing parent)."""
    if "://" in path:
        return None
    folder = os.path.abspath(path)
    while folder and not os.path.exists(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` reports a full disk: ENOSPC, or TensorFlow's "No space left on device"
    (e.g. `ResourceExhaustedError` from `SaveV2`)."""
    if isinstance(error, DiskFullError):
        return True
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left on device" in str(error) or "Disk quota exceeded" in str(error)


@contextlib.contextmanager
def reporting_disk_full(path: str) -> Iterator[None]:
    """Re-raises a full disk inside the block as `DiskFullError(path)`."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as error:  # noqa: BLE001 (only full disks are translated)
        if not is_disk_full(error):
            raise
        raise DiskFullError(path, type(error).__name__) from error


@contextlib.contextmanager
def atomic_output(path: str, mode: int = 0o644) -> Iterator[str]:
    """Yields a temporary path beside `path`; renames it to `path` when the block succeeds.

    On an error (a full disk included, reported as `DiskFullError(path)`) the temporary file
    is removed and an existing `path` is untouched. The file gets `mode` less the umask.
    """
    folder, base = os.path.split(os.path.abspath(path))
    temp = os.path.join(folder, f".{base}.tmp-{os.getpid()}")
    try:
        with reporting_disk_full(path):
            yield temp
            umask = os.umask(0)
            os.umask(umask)
            if os.path.exists(temp):
                os.chmod(temp, mode & ~umask)
            os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.remove(temp)
