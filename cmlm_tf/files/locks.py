"""Locks on local folders, for the writers that share one: exports that swap one OUT, imports,
experiment runners that write one seed's initialisation, and the run directory's lock file.

- `folder_lock`: an exclusive `flock` of a folder for a block (no file is left behind).
- `folder_guard`: the same, where the platform or file system allows it; else the block runs
  unguarded.
- `pid_alive`: whether a process of this host still exists (is a lock's holder gone?).
- `is_local`: a path on this machine's file system, not a remote URL (`gs://...`).
"""

import contextlib
import os


def is_local(path: str) -> bool:
    return "://" not in path


@contextlib.contextmanager
def folder_lock(folder: str):
    """Holds an exclusive lock on the local folder `folder` (no file is left behind): the
    processes that take it for one folder run their blocks one at a time."""
    import fcntl

    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def folder_guard(folder: str):
    """An exclusive `flock` of `folder` for the block (where the platform has none, or the
    file system refuses it, the block runs unguarded)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(descriptor)  # closing the last descriptor releases the flock
