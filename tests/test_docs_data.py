"""Every command of README.md and docs/ that reads data runs from a clone on its own, or
names a public data set whose row in docs/data.md says how to get it."""

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO_DIR, SHARED_DATA, load_script

DOCS = [REPO_DIR / "README.md", *sorted((REPO_DIR / "docs").glob("*.md"))]
_PUBLIC = re.compile(r"\.\./shared/data\b")
_PUBLIC_SET = re.compile(r"\.\./shared/data/(\w+)")
# Inputs a clone has: the bundled corpus, and what the data commands below write.
_LOCAL_INPUT = re.compile(r"(?<![\w/.])((?:cmlm_tf/data/corpus|runs/bible_langs|"
                          r"runs/bitext_split/(?:train\.tsv|heldout))[\w./*-]*)")
_SHELL_TOOLS = {"mkdir", "cut", "cat", "head", "paste", "sed"}


def _block_commands():
    """(page, line, command) of each command line in a fenced block (continuations joined;
    comments dropped)."""
    found = []
    for path in DOCS:
        in_block, pending, start = False, "", 0
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                in_block = not in_block
                continue
            if not in_block:
                continue
            if not pending:
                start = number
            pending += line.rstrip("\\").rstrip() + " "
            if line.rstrip().endswith("\\"):
                continue
            command = pending.split(" # ")[0].strip()
            pending = ""
            if command and not command.startswith("#"):
                found.append((path.name, start, command))
    return found


COMMANDS = _block_commands()
PUBLIC = [(page, line, command) for page, line, command in COMMANDS
          if _PUBLIC.search(command)]
LOCAL = [(page, line, command) for page, line, command in COMMANDS
         if _LOCAL_INPUT.search(command) and not _PUBLIC.search(command)]


def _how_to_get():
    """data set -> the "how to get it" cell of docs/data.md's table."""
    text = (REPO_DIR / "docs" / "data.md").read_text(encoding="utf-8")
    table = {}
    for cells in re.findall(r"^\| (`[^|]+`) \| (.+) \|$", text, re.MULTILINE):
        for name in re.findall(r"`(\w+)/`", cells[0]):
            table[name] = cells[1]
    return table


def test_the_docs_have_data_commands_of_both_kinds():
    assert len(PUBLIC) > 30 and len(LOCAL) > 10


def test_every_public_data_set_the_docs_read_says_how_to_get_it():
    table = _how_to_get()
    missing = sorted({f"{name} ({page}:{line})" for page, line, command in PUBLIC
                      for name in _PUBLIC_SET.findall(command) if name not in table})
    assert not missing, f"docs/data.md does not say how to get: {missing}"
    # Where a command gets it, the command is one the repository has.
    for name, cell in table.items():
        for script in re.findall(r"python (benchmarks/\w+\.py) (\w+)", cell):
            assert (REPO_DIR / script[0]).is_file(), f"{name}: {script[0]} missing"
            assert script[1] in (REPO_DIR / script[0]).read_text(encoding="utf-8")


def _clone(destination):
    """The tracked files of the checkout (as they are now), in a folder with no ../shared."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_DIR, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = REPO_DIR / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def _runs_here(command):
    """Whether the test runs `command` itself: shell data preparation on bundled files, and
    the bitext split with its offline fallback."""
    words = set(re.findall(r"(?:^|&&|\||;)\s*(\w+)", command))
    if words and words <= _SHELL_TOOLS:
        return True
    return command.startswith("python benchmarks/bitext_split.py")


def test_bundled_data_commands_work_in_a_clone_without_shared(tmp_path):
    clone = _clone(tmp_path / "workspace" / "cmlm_tf")
    assert not (clone.parent / "shared").exists()
    env = dict(os.environ, PYTHONPATH=str(clone))
    ran = []
    # The split's docs command names ../shared/data: in the clone it falls back, offline.
    split = next(c for _, _, c in PUBLIC if c.startswith("python benchmarks/bitext_split.py"))
    for page, line, command in [(p, n, c) for p, n, c in LOCAL if _runs_here(c)] + [
            ("docs/evaluation.md", 0, split)]:
        command = command.replace("python ", f"{shlex.quote(sys.executable)} ", 1) \
            if command.startswith("python ") else command
        done = subprocess.run(command, shell=True, cwd=clone, env=env, capture_output=True,
                              text=True, timeout=3600)
        assert done.returncode == 0, f"{page}:{line}: {command}\n{done.stderr[-2000:]}"
        ran.append(command)
    assert len(ran) >= 4
    assert "bundled with cmlm_tf instead" in done.stderr

    # Every input of the other commands on local data now exists in the clone.
    missing = []
    for page, line, command in LOCAL:
        for path in _LOCAL_INPUT.findall(command):
            path = path.rstrip(".")
            if not list(clone.glob(path)) and not (clone / path).exists():
                missing.append(f"{page}:{line}: {path}")
    assert not missing, missing


@pytest.mark.skipif(not (SHARED_DATA / "install_guide").is_dir(),
                    reason="../shared/data/install_guide is absent")
def test_public_data_builder_names_the_languages_shared_data_has():
    public_data = load_script("benchmarks/public_data.py")
    have = sorted(path.stem for path in (SHARED_DATA / "install_guide").glob("*.tsv"))
    assert list(public_data.INSTALL_GUIDE_LANGUAGES) == have
