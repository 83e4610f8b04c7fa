"""The export's staging folder and its swap into OUT (`cmlm_tf/export/staging.py`): an
export folder that overlaps its source, an existing OUT, a kill at each rename of
`--overwrite`, two exports of one folder at once, the debris of killed exports, full disks."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from cmlm_tf.commands import export as export_cli
from cmlm_tf.export import export_lib
from cmlm_tf.files import staged_folder
from tests.conftest import imported_modules, one_error_line, subprocess_env

SAVED_MODELS = ("preprocessor", "encoder", "serving/1")


def _copy_run(tiny_run_dir, folder):
    shutil.copytree(tiny_run_dir, folder)
    return folder


def _listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _complete(export_dir) -> bool:
    return (export_dir / "cmlm_tf_export.json").is_file() and all(
        (export_dir / sub / "saved_model.pb").is_file() for sub in SAVED_MODELS)


def _old_export(tiny_export, target):
    """A complete export at `target`, told apart from a new one by `old.txt`."""
    shutil.copytree(tiny_export, target)
    (target / "old.txt").write_text("the old export", encoding="utf-8")
    return target


@pytest.mark.parametrize("where", ["same", "same_relative", "inside", "holds", "hf_dir"])
def test_export_dir_overlapping_the_source_is_refused(where, tmp_path, tiny_run_dir,
                                                      monkeypatch, capsys):
    run = _copy_run(tiny_run_dir, tmp_path / "runs" / "run")
    before = _listing(run)
    monkeypatch.chdir(tmp_path)
    source_flag = "--hf_dir" if where == "hf_dir" else "--model_dir"
    source, export_dir = {
        "same": (str(run), str(run)),
        "same_relative": ("runs/run", "./runs/../runs/run"),
        "inside": ("runs/run", str(run / "export")),
        "holds": (str(run), "runs"),
        "hf_dir": ("runs/run", str(run)),
    }[where]
    rc = export_cli.main([source_flag, source, "--export_dir", export_dir, "--overwrite"])
    line = one_error_line(capsys.readouterr().err)
    assert rc == 2
    assert "--export_dir" in line and f"the {source_flag} folder" in line
    assert _listing(run) == before  # the run's checkpoints and params.yaml are all there
    assert sorted(os.listdir(tmp_path)) == ["runs"]
    assert sorted(os.listdir(tmp_path / "runs")) == ["run"]


def test_existing_export_dir_needs_overwrite(tiny_export, tiny_run_dir, capsys):
    with pytest.raises(FileExistsError, match="--overwrite"):
        export_lib.export(str(tiny_export), model_dir=str(tiny_run_dir))
    rc = export_cli.main(["--model_dir", str(tiny_run_dir), "--export_dir", str(tiny_export)])
    assert rc == 2 and "already exists" in capsys.readouterr().err


def test_overwrite_replaces_export(tmp_path, tiny_run_dir, tiny_export):
    target = _old_export(tiny_export, tmp_path / "out")  # an export, with a file of its own
    export_lib.export(str(target), model_dir=str(tiny_run_dir), overwrite=True)
    assert not (target / "old.txt").exists()
    meta = json.loads((target / "cmlm_tf_export.json").read_text())
    assert meta["seq_length"] == 16  # the training run's task.train_data.seq_length
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def _not_an_export(kind, tiny_run_dir, folder):
    """A folder cmlm_tf did not write as an export: a copy of a training run, or notes."""
    if kind == "training run":
        return _copy_run(tiny_run_dir, folder)
    folder.mkdir()
    (folder / "notes.txt").write_text("my notes", encoding="utf-8")
    return folder


@pytest.mark.parametrize("kind", ["training run", "notes"])
def test_overwrite_refuses_a_folder_that_is_not_an_export(kind, tmp_path, tiny_run_dir,
                                                          capsys):
    """`--overwrite` replaces only an export: a copy of a training run, or a folder of
    notes, is refused in one line naming what it holds, and without `--overwrite` the
    refusal does not suggest it."""
    target = _not_an_export(kind, tiny_run_dir, tmp_path / "bt_copy")
    before = {p.name: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    args = ["--model_dir", str(tiny_run_dir), "--export_dir", str(target)]
    assert export_cli.main(args + ["--overwrite"]) == 2
    line = one_error_line(capsys.readouterr().err)
    shown = "(a training run)" if kind == "training run" else "holds notes.txt,"
    assert f"{target}: exists and holds " in line and shown in line, line
    assert "not an export written by cmlm_tf (no cmlm_tf_export.json)" in line, line
    assert "--overwrite replaces only an export" in line, line
    assert export_cli.main(args) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "not an export written by cmlm_tf" in line and "--overwrite" not in line, line
    with pytest.raises(FileExistsError, match="not an export"):
        export_lib.export(str(target), model_dir=str(tiny_run_dir), overwrite=True)
    assert {p.name: p.read_bytes() for p in target.rglob("*") if p.is_file()} == before
    assert sorted(os.listdir(tmp_path)) == ["bt_copy"]


def test_an_existing_export_dir_is_refused_before_tensorflow_starts(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "params.yaml").write_text("task: {}\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "cmlm_tf_export.json").write_text("{}", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cmlm_tf.export", "--model_dir", str(run),
         "--export_dir", str(out)], env=subprocess_env(), capture_output=True, text=True,
        timeout=3600)  # a safety net
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert lines == [f"error: {out}: already exists; pass --overwrite to replace it, or "
                     "choose another --export_dir"], lines
    imported = imported_modules(done.stderr)
    assert "cmlm_tf.commands.export" in imported and "tensorflow" not in imported


def _export_process(tmp_path, kill_at):
    """`--model_dir run --export_dir exports/out --overwrite` (relative to `tmp_path`) in a
    subprocess that dies (`os._exit(137)`, like kill -9) at its `kill_at`-th rename in
    `exports/` (0: never); returns it and the file counting its renames."""
    count = tmp_path / f"renames-{kill_at}.txt"
    args = [sys.executable, "-m", "tests.export.children", "export_killed_at_rename",
            str(kill_at), str(count), str(tmp_path / "exports"),
            "--model_dir", "run", "--export_dir", "exports/out", "--overwrite"]
    return subprocess.Popen(args, env=subprocess_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path), count


def test_overwrite_killed_at_each_rename_loses_nothing(tmp_path, tiny_run_dir, tiny_export,
                                                       monkeypatch):
    _copy_run(tiny_run_dir, tmp_path / "run")
    monkeypatch.chdir(tmp_path)  # relative --model_dir and --export_dir, as the README's
    exports = tmp_path / "exports"
    out = exports / "out"
    renames = []

    def counted(real):
        def rename(src, dst, *args, **kwargs):
            if any(os.path.abspath(p).startswith(str(exports)) for p in (src, dst)):
                renames.append(dst)
            return real(src, dst, *args, **kwargs)
        return rename

    kill_at, swap_renames, between_renames = 1, None, 0
    while swap_renames is None or kill_at <= swap_renames:
        shutil.rmtree(exports, ignore_errors=True)
        exports.mkdir()
        _old_export(tiny_export, out)
        process, _ = _export_process(tmp_path, kill_at)
        _, err = process.communicate(timeout=3600)
        assert process.returncode == 137, err[-2000:]
        # Killed: a complete OUT, or the old export restorable from OUT.old-*/export.
        if out.exists():
            assert _complete(out)
        else:
            between_renames += 1
            olds = [p / "export" for p in exports.glob("out.old-*") if (p / "export").is_dir()]
            assert len(olds) == 1 and _complete(olds[0]) and (olds[0] / "old.txt").exists()
            # An export that fails still puts the only copy back first.
            with pytest.raises(ValueError, match="seq_length"):
                export_lib.export("exports/out", model_dir="run", overwrite=True,
                                  seq_length=1000)
            assert _complete(out) and (out / "old.txt").exists()
        renames.clear()
        with monkeypatch.context() as patch:
            patch.setattr(os, "rename", counted(os.rename))
            patch.setattr(os, "replace", counted(os.replace))
            export_lib.export("exports/out", model_dir="run", overwrite=True)
        if swap_renames is None:  # killed at the first rename: the next export is a plain
            swap_renames = len(renames)  # --overwrite, with the renames of every export
        assert _complete(out) and not (out / "old.txt").exists()
        assert sorted(os.listdir(exports)) == ["out"]
        kill_at += 1
    # Both renames of the swap were hit, the second with OUT moved aside.
    assert swap_renames == 2 and between_renames == 1


def test_two_exports_to_one_folder_at_once(tmp_path, tiny_run_dir, tiny_export, monkeypatch):
    _copy_run(tiny_run_dir, tmp_path / "run")
    exports = tmp_path / "exports"
    exports.mkdir()
    out = _old_export(tiny_export, exports / "out")
    monkeypatch.chdir(tmp_path)
    other, _ = _export_process(tmp_path, 0)
    deadline = time.time() + 3600  # a safety net
    while not list(exports.glob("out.tmp-*")) and other.poll() is None:
        assert time.time() < deadline
        time.sleep(0.2)
    export_lib.export("exports/out", model_dir="run", overwrite=True)
    _, err = other.communicate(timeout=3600)
    assert other.returncode == 0, err[-2000:]  # --overwrite: both win, one after the other
    assert _complete(out) and not (out / "old.txt").exists()
    assert sorted(os.listdir(exports)) == ["out"]
    meta = json.loads((out / "cmlm_tf_export.json").read_text())
    assert meta["source"]["checkpoint"] == "ckpt-1"


def test_interrupted_export_folders_are_removed_by_the_next_export(tmp_path, tiny_run_dir):
    target = tmp_path / "out"
    dead = subprocess.Popen([sys.executable, "--version"], stdout=subprocess.DEVNULL)
    dead.wait()
    for name in ("out.tmp-abc", "out.old-def"):
        (tmp_path / name).mkdir()
        (tmp_path / name / staged_folder.OWNER_FILE).write_text(json.dumps(
            {"pid": dead.pid, "host": socket.gethostname()}))
    live = tmp_path / "out.tmp-live"
    live.mkdir()
    (live / staged_folder.OWNER_FILE).write_text(json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname()}))
    export_lib.export(str(target), model_dir=str(tiny_run_dir))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.tmp-live"]
    assert not (target / staged_folder.OWNER_FILE).exists()


def _tf_disk_full(*args, **kwargs):
    raise tf.errors.ResourceExhaustedError(
        None, None, "variables.data-00000-of-00001; No space left on device")


def test_full_disk_during_overwrite_is_one_line_and_keeps_the_old_export(
        tmp_path, tiny_run_dir, tiny_export, monkeypatch, capsys):
    out = _old_export(tiny_export, tmp_path / "out")
    monkeypatch.setattr(tf.saved_model, "save", _tf_disk_full)
    rc = export_cli.main(["--model_dir", str(tiny_run_dir), "--export_dir", str(out),
                          "--overwrite"])
    line = one_error_line(capsys.readouterr().err)
    assert rc == 2
    assert line.startswith(f"error: {out / 'serving' / '1'}: no space left on device")
    assert "MiB free there" in line
    assert _complete(out) and (out / "old.txt").exists()
    assert sorted(os.listdir(tmp_path)) == ["out"]


def _size(folder) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_overwrite_on_a_tmpfs_with_room_for_one_copy(small_disk, tiny_run_dir, tiny_export,
                                                     capsys):
    room = int(_size(tiny_export) * 1.6)
    small = small_disk(room)
    out = _old_export(tiny_export, small / "out")
    rc = export_cli.main(["--model_dir", str(tiny_run_dir), "--export_dir", str(out),
                          "--overwrite"])
    line = one_error_line(capsys.readouterr().err)
    assert rc == 2
    assert line.startswith(f"error: {small}") and "no space left on device" in line
    assert "MiB free there" in line
    assert _complete(out) and (out / "old.txt").exists()
    assert sorted(os.listdir(small)) == ["out"]
