"""Every `python -m` command in README.md and docs/ parses with the command's own parser
(flags, choices such as --experiment, packaged recipe names), the tests they name exist, and
the README stays short."""

import importlib
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from cmlm_tf import config_files
from cmlm_tf.scale import options
from tests.conftest import REPO_DIR, run_child

# Module run with `python -m` -> the module whose build_parser() parses its flags.
PARSERS = {
    "cmlm_tf.train": "cmlm_tf.commands.train",
    "cmlm_tf.export": "cmlm_tf.commands.export",
    "export.export_tfhub": "cmlm_tf.commands.export",
    "cmlm_tf.evaluate": "cmlm_tf.commands.evaluate",
    "cmlm_tf.mine": "cmlm_tf.commands.mine",
    "cmlm_tf.embed_corpus": "cmlm_tf.commands.embed_corpus",
    "cmlm_tf.mine_hard_negatives": "cmlm_tf.commands.mine_hard_negatives",
    "cmlm_tf.similarity": "cmlm_tf.commands.similarity",
    "cmlm_tf.build_vocab": "cmlm_tf.commands.build_vocab",
    "cmlm_tf.convert_hf_bert": "cmlm_tf.commands.convert_hf_bert",
    "cmlm_tf.import_model": "cmlm_tf.commands.import_model",
    "cmlm_tf.convert_nli": "cmlm_tf.commands.convert_nli",
}
OPTIONAL = {name: name for name in ("experiments.run", "experiments.report",
                                     "experiments.train", "experiments.evaluate")}
NOT_OURS = {"venv", "pip", "pytest", "zipfile", "json.tool"}
# Commands whose flags they do not know are Apache Beam pipeline options
# (`cmlm_tf.scale.options`).
BEAM_COMMANDS = {"cmlm_tf.embed_corpus", "cmlm_tf.mine"}
DOCS = [REPO_DIR / "README.md", *sorted((REPO_DIR / "docs").glob("*.md"))]


def _commands(path):
    """(file, line, module, arguments, whole) of each `python -m` command: whole commands in
    fenced blocks, and fragments (whole=False) in inline code spans that carry flags."""
    text = path.read_text(encoding="utf-8")
    found = []
    in_block = False
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            if not pending:
                start = number
            pending += line.rstrip("\\").rstrip() + " "
            if line.rstrip().endswith("\\"):
                continue
            found.append((start, pending, True))
            pending = ""
        else:
            for span in re.findall(r"`([^`]*python -m [^`]*)`", line):
                if " --" in span:
                    found.append((number, span, False))
    commands = []
    for number, text, whole in found:
        text = re.sub(r"\$\([^)]*\)", "SUBSTITUTED", text.split(" #")[0])
        for segment in re.split(r"&&|;|\|\|", text):
            match = re.search(r"python(?:3(?:\.\d+)?)? -m ([\w.]+)(.*)", segment)
            if match and match.group(1) not in NOT_OURS:
                commands.append((path.name, number, match.group(1), match.group(2).strip(),
                                 whole))
    return commands


ALL = [command for path in DOCS for command in _commands(path)]


def test_commands_were_found():
    modules = {module for _, _, module, _, _ in ALL}
    assert {"cmlm_tf.train", "cmlm_tf.export", "cmlm_tf.evaluate"} <= modules
    assert len(ALL) > 40


@pytest.mark.parametrize("where,number,module,arguments,whole", ALL,
                         ids=[f"{w}:{n}" for w, n, _, _, _ in ALL])
def test_command_parses(where, number, module, arguments, whole):
    target = PARSERS.get(module) or OPTIONAL.get(module)
    assert target, f"{where}:{number}: unknown command python -m {module}"
    try:
        parser = importlib.import_module(target).build_parser()
    except ModuleNotFoundError:
        pytest.skip(f"{target} is not part of this checkout")
    tokens = shlex.split(arguments)
    synopsis = not whole or any(token.startswith(("[", "(")) or token in ("|", "...", "…")
                                or token.endswith(("]", ")")) for token in tokens) \
        or "|" in arguments
    known = {option for action in parser._actions for option in action.option_strings}
    subparsers = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    for sub in subparsers:
        for child in sub.choices.values():
            known |= {o for a in child._actions for o in a.option_strings}
    if module in BEAM_COMMANDS:
        pytest.importorskip("apache_beam", reason="Beam options need the scale extra")

        known |= options.beam_flags()
    if synopsis:
        # A usage summary: every flag it names must exist.
        flags = {re.split(r"[=\]\)]", token.strip("[("))[0] for token in tokens
                 if token.strip("[(").startswith("--")}
        assert flags <= known, f"{where}:{number}: unknown flags {sorted(flags - known)}"
        return
    try:
        if module in BEAM_COMMANDS:
            args, _ = options.split_arguments(parser, tokens)
        else:
            args = parser.parse_args(tokens)
    except SystemExit:
        pytest.fail(f"{where}:{number}: python -m {module} {arguments}")
    for recipe in getattr(args, "config_file", None) or []:
        if "/" not in recipe and not recipe.endswith(".yaml"):
            config_files.resolve_recipe(recipe)


def _documented_commands():
    """The distinct modules of ours that the pages run with `python -m`, in this checkout."""
    modules = sorted({module for _, _, module, _, _ in ALL if module in PARSERS or
                      module in OPTIONAL})
    return [module for module in modules if importlib.util.find_spec(module.split(".")[0])]


COMMANDS = _documented_commands()


@pytest.fixture(scope="module")
def help_outputs():
    """{module: {"exit_code", "first_line"}} of `python -m MODULE --help` for every
    documented command, all run as `__main__` in one child interpreter."""
    result = run_child("help_of_commands", *COMMANDS)
    assert result.returncode == 0, result.stderr[-3000:]
    reports = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return {report.pop("module"): report for report in reports}


@pytest.mark.parametrize("module", COMMANDS)
def test_documented_command_help_runs(module, help_outputs):
    """`python -m MODULE --help`, as a user runs it: exit 0, a usage line naming the
    command."""
    report = help_outputs[module]
    assert report["exit_code"] == 0, report
    assert report["first_line"].startswith(f"usage: python -m {module} "), report


def test_readme_is_a_front_page():
    lines = (REPO_DIR / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    text = "\n".join(lines)
    for needed in ("python -m cmlm_tf.train", "hub.KerasLayer", "cmlm_tf.load",
                   "docker run", "pytest -q"):
        assert needed in text, needed


@pytest.mark.parametrize("page", ["configuration.md", "serving.md"])
def test_untrusted_models_are_called_code(page):
    """The docs warn that SavedModels and checkpoints are programs, where users look."""
    text = " ".join((REPO_DIR / "docs" / page).read_text(encoding="utf-8").split())
    assert "is a program" in text and "sources you trust" in text


# The public data sets the pages name, and the one place they are read from.
DATA_SETS = ("stsb", "udhr", "bible", "install_guide", "english_prose", "tatoeba", "bucc2018",
             "probe")
DATA_ROOT = "../shared/data"
_DATA_PATH = re.compile(r"(?P<root>[\w.~$/{}-]*?)\b(?P<set>" + "|".join(DATA_SETS) + r")/")
_DATA_FLAG = re.compile(r"--(?:shared_data|data_dir|bible_dir)[ =](?P<value>\S+)")


def _recipe_headers():
    """The comment lines at the top of each recipe in configs/ (its how-to-run header)."""
    for path in sorted((REPO_DIR / "configs").glob("*.yaml")):
        lines = path.read_text(encoding="utf-8").splitlines()
        header = []
        for line in lines:
            if not line.startswith("#"):
                break
            header.append(line)
        yield path, header


def _data_path_errors(name, lines):
    errors = []
    for number, line in enumerate(lines, 1):
        for match in _DATA_PATH.finditer(line):
            root = match.group("root")
            if root.rstrip("/").endswith("data") and root.rstrip("/") != DATA_ROOT:
                errors.append(f"{name}:{number}: {root}{match.group('set')}/ (use "
                              f"{DATA_ROOT}/{match.group('set')}/)")
        for match in _DATA_FLAG.finditer(line):
            value = match.group("value").strip("`'\"")
            if not value.startswith(DATA_ROOT):
                errors.append(f"{name}:{number}: {match.group(0)} (use {DATA_ROOT})")
    return errors


def test_one_data_path_convention():
    """README, docs and recipe headers name public data sets under ../shared/data/ only (not
    `data/stsb/...` in one page and `../shared/data/stsb/...` in the next)."""
    errors = []
    for page in DOCS:
        errors += _data_path_errors(page.relative_to(REPO_DIR),
                                    page.read_text(encoding="utf-8").splitlines())
    for path, header in _recipe_headers():
        errors += _data_path_errors(path.relative_to(REPO_DIR), header)
    assert not errors, "\n".join(errors)
    # The check itself catches the forms the pages used to mix.
    assert len(_data_path_errors("example", [
        "--data data/stsb/sts-dev.csv", "--shared_data data --output x",
        "`data/udhr/<code>.txt`", "--bible_dir data/bible"])) == 4
    assert not _data_path_errors("example", ["--data ../shared/data/stsb/sts-dev.csv",
                                             "cmlm_tf/data/corpus/bible_en_es.tsv"])


def test_every_test_the_docs_name_exists():
    """`tests/...py` and `tests/...py::test_name` in README.md and docs/ point at a file and a
    test function that exist (tests move with the modules they test)."""
    missing = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for file, name in re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", text):
            target = REPO_DIR / file
            if not target.is_file():
                missing.append(f"{path.name}: {file}")
            elif name and not re.search(rf"^def {name}\(", target.read_text(encoding="utf-8"),
                                        re.MULTILINE):
                missing.append(f"{path.name}: {file}::{name}")
    assert not missing, missing


def python_blocks(path):
    """(line, code) of each fenced ```python block of `path`."""
    blocks, code, start = [], None, 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if code is None and line.strip() == "```python":
            code, start = [], number + 1
        elif code is not None and line.strip() == "```":
            blocks.append((start, "\n".join(code) + "\n"))
            code = None
        elif code is not None:
            code.append(line)
    return blocks


# Snippets that need a running model server are not run here (docs/serving.md runs a
# server's requests in tests/export/test_serving.py), nor those that need
# sentence-transformers, which the MTEB venv runs
# (tests/mteb_extra/test_sentence_transformers_export.py), or its ONNX backend, which the ONNX
# venv runs (tests/onnx_extra/test_onnx_backend.py), nor those that need keras-hub, which the
# MTEB venv runs too (tests/mteb_extra/test_keras_hub_preset.py).
_SERVER_SNIPPETS = ("grpc", "requests.post")
SENTENCE_TRANSFORMERS_SNIPPETS = "from sentence_transformers import"
ONNX_SNIPPETS = 'backend="onnx"'
KERAS_HUB_SNIPPETS = "import keras_hub"
SNIPPETS = [(page, number, code) for page in ("README.md", "docs/serving.md")
            for number, code in python_blocks(REPO_DIR / page)
            if not any(word in code for word in _SERVER_SNIPPETS)
            and SENTENCE_TRANSFORMERS_SNIPPETS not in code and KERAS_HUB_SNIPPETS not in code]


@pytest.mark.parametrize("page,number", [(page, number) for page, number, _ in SNIPPETS],
                         ids=[f"{page}:{number}" for page, number, _ in SNIPPETS])
def test_python_snippets_run_quietly(page, number, tiny_export, minilm_export, tmp_path):
    """Each snippet runs as a user would paste it (exports at the paths it names), exits 0
    and writes nothing to stderr: no TensorFlow start-up lines, no CUDA errors."""
    exports = tmp_path / "exports"
    exports.mkdir()
    os.symlink(tiny_export, exports / "cmlm_tiny")
    os.symlink(minilm_export, exports / "all-MiniLM-L6-v2")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = str(REPO_DIR)
    result = subprocess.run([sys.executable, "-m", "tests.driver.children", "doc_snippet", page,
                             str(number)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.strip() == "", result.stderr[-3000:]
