"""The import folder: published whole, self-contained, refused when it exists or is damaged."""

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from cmlm_tf import config_files
from cmlm_tf.commands import export as export_cli
from cmlm_tf.commands import import_model
from cmlm_tf.driver import train_lib
from cmlm_tf.export.source import resolve_source
from cmlm_tf.model_import import import_folder, importer
from tests.conftest import REPO_DIR, TESTS_DIR, fill_disk, subprocess_env

STANDINS = TESTS_DIR / "testdata" / "st_standins"
# Two WordPiece models with vocabularies of different lengths.
OLD_MODEL, NEW_MODEL = STANDINS / "st6_bert_mean", STANDINS / "labse_layout"


def _lines(path) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: ") and "Traceback" not in err, err
    return lines[-1]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """A finished import folder of OLD_MODEL (copy it before changing it)."""
    folder = tmp_path_factory.mktemp("imported") / "old"
    importer.convert(str(OLD_MODEL), str(folder))
    return folder


def test_warm_start_names_its_files_relative_to_the_folder(imported):
    with open(imported / import_folder.WARM_START_FILE, encoding="utf-8") as f:
        task = yaml.safe_load(f)["task"]
    assert task["init_checkpoint"] == import_folder.CHECKPOINT_NAME
    assert task["model"]["tokenizer"]["vocab_file"] == import_folder.VOCAB_FILE
    assert sorted(os.listdir(imported)) == sorted([
        "encoder.index", "encoder.data-00000-of-00001", "vocab.txt", "warm_start.yaml",
        "source.json"])


def test_a_relative_warm_start_trains_and_exports_as_the_docs_write_it(
        tmp_path, imported, monkeypatch):
    """`--config_file=runs/model/warm_start.yaml` and `--model_dir runs/model`, relative to
    the working directory, as docs/import.md's commands give them."""
    shutil.copytree(imported, tmp_path / "runs" / "model")
    monkeypatch.chdir(tmp_path)
    params = train_lib.build_params("cmlm_tf/bitext", ["runs/model/warm_start.yaml"])
    assert os.path.samefile(params.task.init_checkpoint + ".index",
                            tmp_path / "runs" / "model" / "encoder.index")
    source = resolve_source(model_dir="runs/model")
    assert os.path.samefile(source.checkpoint + ".index",
                            tmp_path / "runs" / "model" / "encoder.index")


def test_a_moved_folder_reads_its_own_files_not_those_at_the_old_path(tmp_path, imported):
    """Moved away, with another model imported at its old path, the folder still reads its
    own checkpoint and vocabulary, for training and for export."""
    old_path, moved = tmp_path / "model", tmp_path / "moved"
    shutil.copytree(imported, old_path)
    os.rename(old_path, moved)
    importer.convert(str(NEW_MODEL), str(old_path))
    params = config_files.load_experiment_config([str(moved / "warm_start.yaml")])
    assert params.task.init_checkpoint == str(moved / "encoder")
    assert params.task.model.tokenizer.vocab_file == str(moved / "vocab.txt")
    source = resolve_source(model_dir=str(moved))
    assert source.checkpoint == str(moved / "encoder")
    assert source.description["hf_dir"] == OLD_MODEL.name
    assert source.model.encoder.vocab_size == _lines(imported / "vocab.txt")


@pytest.mark.parametrize("existing", ["import", "export"])
def test_an_existing_output_dir_is_refused_without_overwrite(tmp_path, imported, existing,
                                                             tiny_export, capsys):
    out = tmp_path / "out"
    shutil.copytree(imported if existing == "import" else tiny_export, out)
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert import_model.main(["--import_dir", str(NEW_MODEL), "--output_dir", str(out)]) == 2
    line = _error_line(capsys.readouterr().err)
    assert str(out) in line
    # --overwrite is suggested only for an import folder: it replaces nothing else.
    assert ("--overwrite" in line) == (existing == "import"), line
    if existing == "export":
        assert "(an export), not an import folder written by cmlm_tf" in line, line
        assert import_model.main(["--import_dir", str(NEW_MODEL), "--output_dir", str(out),
                                  "--overwrite"]) == 2
        assert "not an import folder" in _error_line(capsys.readouterr().err)
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_overwrite_replaces_an_import_folder(tmp_path, imported, capsys):
    out = tmp_path / "out"
    shutil.copytree(imported, out)
    assert import_model.main(["--import_dir", str(NEW_MODEL), "--output_dir", str(out),
                              "--overwrite"]) == 0
    source = import_folder.check(str(out))
    assert source["source_dir"].endswith(NEW_MODEL.name)
    assert sorted(os.listdir(tmp_path)) == ["out"]


@pytest.mark.parametrize("damage", ["truncated_vocab", "no_source", "no_checkpoint"])
def test_a_damaged_import_folder_is_refused_in_one_line_naming_the_file(
        tmp_path, imported, damage, capsys):
    folder = tmp_path / "model"
    shutil.copytree(imported, folder)
    if damage == "truncated_vocab":
        lines = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines(keepends=True)
        (folder / "vocab.txt").write_text("".join(lines[:len(lines) // 2]), encoding="utf-8")
        named = "vocab.txt"
    elif damage == "no_source":
        os.remove(folder / "source.json")
        named = "source.json"
    else:
        os.remove(folder / "encoder.index")
        named = "encoder"

    with pytest.raises(import_folder.ImportFolderError, match=named):
        train_lib.build_params("cmlm_tf/bitext", [str(folder / "warm_start.yaml")])
    rc = export_cli.main(["--model_dir", str(folder), "--export_dir", str(tmp_path / "out")])
    assert rc == 2 and named in _error_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_a_cmlm_tf_export_as_import_dir_is_refused_in_one_line(tmp_path, tiny_export, capsys):
    for path in (tiny_export, tiny_export / "serving" / "1", tiny_export / "preprocessor"):
        assert import_model.main(["--import_dir", str(path),
                                  "--output_dir", str(tmp_path / "out")]) == 2
        line = _error_line(capsys.readouterr().err)
        assert "cmlm_tf export" in line and "--model_dir" in line
    assert not (tmp_path / "out").exists()


def test_a_reimport_killed_at_each_write_keeps_a_whole_folder(tmp_path, imported, capsys):
    """A re-import with --overwrite, killed at each of its file writes (half-way through the
    write) and renames: the folder is the old import or the new one, whole, each time; the
    next import removes the debris with a warning."""
    models = tmp_path / "models"
    out = models / "model"
    old_tokens = _lines(imported / "vocab.txt")
    args = ["--import_dir", str(NEW_MODEL), "--output_dir", str(out), "--overwrite"]
    kill_at, seen, debris_warned = 1, set(), False
    while True:
        shutil.rmtree(models, ignore_errors=True)
        models.mkdir()
        shutil.copytree(imported, out)
        count = tmp_path / "events.txt"
        count.write_text("0")
        killed = subprocess.run(
            [sys.executable, "-m", "tests.model_import.children", "import_killed_at_write",
             str(kill_at), str(count), str(models)] + args, cwd=REPO_DIR,
            env=subprocess_env(), capture_output=True, text=True, timeout=3600)
        if killed.returncode == 0:
            break
        assert killed.returncode == 137, killed.stderr
        found = out
        if not out.exists():  # killed between the renames: the old folder is set aside
            olds = list(models.glob("model.old-*/export"))
            assert len(olds) == 1, os.listdir(models)
            found = olds[0]
        source = import_folder.check(str(found))  # whole: old or new, never a mix
        seen.add("old" if source["source_dir"].endswith(OLD_MODEL.name) else "new")
        if seen == {"old"}:
            assert _lines(found / "vocab.txt") == old_tokens
        assert import_model.main(args) == 0
        debris_warned |= "warning: removed" in capsys.readouterr().err
        assert sorted(os.listdir(models)) == ["model"], kill_at
        assert import_folder.check(str(out))["source_dir"].endswith(NEW_MODEL.name)
        kill_at += 1
    assert kill_at > 4 and "old" in seen and debris_warned, (kill_at, seen)


def test_an_import_onto_a_full_disk_is_one_line_and_leaves_nothing(small_disk, capsys):
    disk = small_disk("64k")
    fill_disk(disk)
    out = disk / "model"
    assert import_model.main(["--import_dir", str(OLD_MODEL), "--output_dir", str(out)]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith(f"error: {out}: no space left on device"), line
    assert sorted(os.listdir(disk)) == ["filler"]


def test_a_run_folder_whose_vocabulary_was_cut_is_refused_by_the_export(
        tmp_path, tiny_run_dir, capsys):
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    vocab_file = config_files.load_experiment_config([str(run / "params.yaml")]) \
        .task.model.tokenizer.vocab_file
    copy = tmp_path / "vocab.txt"
    lines = open(vocab_file, encoding="utf-8").read().splitlines(keepends=True)
    copy.write_text("".join(lines[:-3]), encoding="utf-8")
    params = (run / "params.yaml").read_text(encoding="utf-8")
    (run / "params.yaml").write_text(params.replace(vocab_file, str(copy)), encoding="utf-8")
    rc = export_cli.main(["--model_dir", str(run), "--export_dir", str(tmp_path / "out")])
    line = _error_line(capsys.readouterr().err)
    assert rc == 2 and str(copy) in line and "embedding table" in line, line
    assert not (tmp_path / "out").exists()
