"""What the fault scripts share: running a command's `main` in this process, the outcome of
one case, and the table they print (benchmarks/import_faults.py, benchmarks/corpus_faults.py).

Outcomes:

- `ok`: exit 0, and what the command wrote is right, where the case should succeed;
- `clear`: exit 2 (a refused input) or 1 (a failure while running, which the corpus
  commands report as `error: the pipeline failed: ...`) with one error line (`error: ...`,
  or argparse's `PROG: error: ...`), the last one, holding the text expected (the file,
  flag or field at fault), and no traceback;
- `unnamed`: exit 2, but the line does not name what is at fault;
- `traceback`: any other exit, or a traceback;
- `silent wrong`: exit 0 where the input should have been refused, or a wrong result;
- `lost`: something the command should have left alone was changed or deleted;
- `not run`: the case needs what this machine lacks (root to mount a small disk).
"""

import contextlib
import io
import pathlib
import re
import shutil
import tempfile
import traceback

OUTCOMES = ("ok", "clear", "unnamed", "traceback", "silent wrong", "lost", "not run")


def outcome(rc, err, expected):
    """The outcome of a run that exited `rc` with stderr `err`; `expected` is "ok" or the
    text the one error line must hold."""
    if "Traceback" in err or rc not in (0, 1, 2):
        return "traceback"
    if expected == "ok":
        return "ok" if rc == 0 else "unnamed"
    if rc == 0:
        return "silent wrong"
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if _is_error(line)]
    if len(errors) != 1 or lines[-1] != errors[0] or expected not in errors[0]:
        return "unnamed"
    return "clear"


def _is_error(line):
    """A command's one error line: `error: ...`, or argparse's `PROG: error: ...`."""
    return line.startswith("error: ") or re.match(r"^python -m [\w.]+: error: ", line) is not None


def run(main, argv):
    """(rc, stderr) of a command's `main(argv)`, with any escaping exception as a traceback."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as stop:
            rc = stop.code if isinstance(stop.code, int) else 1
        except BaseException:  # noqa: BLE001 (any escape is the outcome measured)
            traceback.print_exc(file=err)
            rc = 1
    return rc, err.getvalue()


def last_error(err):
    """The `error:` line of stderr `err`, else its last line."""
    errors = [line for line in err.splitlines() if _is_error(line)]
    return errors[-1] if errors else (err.strip().splitlines() or [""])[-1]


def listing(folder):
    """{relative path: bytes} of every file under `folder` ({} when it is gone)."""
    folder = pathlib.Path(folder)
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
            if p.is_file()}


def left_alone(path, make, run):
    """A case: `run()` (a command's (rc, stderr)) on what `make(path)` put at `path`; its
    verdict is `lost` when `path` changed."""
    def case():
        make(path)
        before = listing(path)
        result = run()
        return result, None if listing(path) == before else "lost"
    return case


def print_table(results, width=110):
    """Prints `name  outcome  line` per case and the count of each outcome; returns 0 when
    every case is `ok` or `clear` (or `not run`), else 1."""
    name_width = max(len(name) for name, _, _ in results)
    for name, result, line in results:
        print(f"{name:<{name_width}}  {result:<12}  {line[:width]}")
    counts = {kind: sum(1 for _, o, _ in results if o == kind) for kind in OUTCOMES}
    print(f"{len(results)} cases: " + ", ".join(f"{n} {o}" for o, n in counts.items()))
    good = counts["ok"] + counts["clear"] + counts["not run"]
    return 0 if good == len(results) else 1


def run_in_work_folder(work_dir, prefix, run_all):
    """Prints the table of `run_all(work)`'s results, run in `work_dir` (kept), or in a new
    temporary folder named `prefix...` (removed afterwards); returns `print_table`'s code."""
    work = work_dir or tempfile.mkdtemp(prefix=prefix)
    pathlib.Path(work).mkdir(parents=True, exist_ok=True)
    try:
        results = run_all(work)
    finally:
        if not work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return print_table(results)
