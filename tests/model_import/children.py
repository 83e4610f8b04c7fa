"""Children of the import tests: functions a test runs in a fresh interpreter, by name.

    python -m tests.model_import.children FUNCTION [ARGS...]

run with the repository on PYTHONPATH (`tests.conftest.subprocess_env()`), through the
dispatcher `tests.driver.children.main`. A function's return value is the child's exit
status.
"""

import builtins
import os
import sys

from cmlm_tf.commands import import_model


class _HalfWriter:
    """Writes half of what it is given, then the process dies, as under kill -9."""

    def __init__(self, file):
        self.file = file

    def write(self, data):
        self.file.write(data[:len(data) // 2])
        self.file.flush()
        os._exit(137)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.file.__exit__(*exc)


def import_killed_at_write(kill_at, count_file, watched, *argv):
    """`python -m cmlm_tf.import_model ARGV`, killed (`os._exit(137)`) at its `kill_at`-th
    file write (half-way through it) or rename of a path under `watched`; each such event
    rewrites `count_file` with the count so far."""
    kill_at, events = int(kill_at), []

    def event(what):
        events.append(what)
        with open(count_file, "w", encoding="utf-8") as f:
            f.write(str(len(events)))
        return len(events) == kill_at

    real_open = builtins.open

    def hooked_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if (isinstance(file, (str, os.PathLike)) and "w" in mode
                and os.path.abspath(file).startswith(watched) and event(("write", file))):
            return _HalfWriter(handle)
        return handle

    def hooked(real):
        def rename(src, dst, *args, **kwargs):
            if (any(os.path.abspath(p).startswith(watched) for p in (src, dst))
                    and event(("rename", dst))):
                os._exit(137)
            return real(src, dst, *args, **kwargs)
        return rename

    builtins.open = hooked_open
    os.rename, os.replace = hooked(os.rename), hooked(os.replace)

    return import_model.main(list(argv))


if __name__ == "__main__":
    from tests.driver import children

    sys.exit(children.main(sys.argv[1:], globals()))
