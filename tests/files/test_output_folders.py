"""The one rule of every output flag (cmlm_tf/files/output_folders.py): a folder is replaced only
when cmlm_tf's marker says it wrote it, an output is never an input, and staging and work
folders are removed only once their writer is gone."""

import os
import socket
import time

import pytest

from cmlm_tf.files import output_folders

# A process id above any pid_max: no process has it.
DEAD_PID = 2 ** 22 + 1
MARKER = "cmlm_tf_export.json"


def _refusal(path, overwrite):
    names = sorted(os.listdir(path)) if os.path.isdir(path) else None
    return output_folders.refusal(str(path), "--export_dir", names=names, marker=MARKER,
                                  what="an export", overwrite=overwrite)


def test_only_a_folder_with_the_marker_or_an_empty_one_is_replaced(tmp_path):
    ours, empty, notes = tmp_path / "ours", tmp_path / "empty", tmp_path / "notes"
    for folder in (ours, empty, notes):
        folder.mkdir()
    (ours / MARKER).write_text("{}")
    (notes / "notes.txt").write_text("mine")
    assert _refusal(ours, True) is None and _refusal(empty, True) is None
    assert _refusal(ours, False) == (f"{ours}: already exists; pass --overwrite to replace it, "
                                     "or choose another --export_dir")
    assert _refusal(notes, True) == (
        f"{notes}: exists and holds notes.txt, not an export written by cmlm_tf (no {MARKER}); "
        "--overwrite replaces only an export that cmlm_tf wrote: remove it yourself or choose "
        "another --export_dir")
    # Without --overwrite, --overwrite is not suggested: it would be refused too.
    assert _refusal(notes, False) == (
        f"{notes}: already exists and holds notes.txt, not an export written by cmlm_tf (no "
        f"{MARKER}): choose another --export_dir, or remove it yourself")
    (tmp_path / "file").write_text("x")
    assert "exists and is not a folder" in _refusal(tmp_path / "file", True)
    with pytest.raises(FileExistsError, match="holds notes.txt"):
        output_folders.check_output(str(notes), "--export_dir", marker=MARKER,
                                    what="an export", overwrite=True)
    output_folders.check_output(str(tmp_path / "new"), "--export_dir", marker=MARKER,
                                what="an export", overwrite=False)


def test_what_a_folder_holds_is_named_with_what_cmlm_tf_recognises(tmp_path):
    names = ["checkpoint", "ckpt-100.index", "ckpt-100.data-00000-of-00001", "params.yaml",
             "train.log"]
    assert output_folders.describe(str(tmp_path), names) == (
        "holds checkpoint, ckpt-100.index, ckpt-100.data-00000-of-00001 and 2 more "
        "(a training run)")
    assert output_folders.describe(str(tmp_path), [MARKER, "notes.txt"]).endswith(
        "(an export)")


@pytest.mark.parametrize("output, relation", [
    ("data/en.txt", "is the --src file data/en.txt"),
    ("data/../data/en.txt", "is the --src file data/en.txt"),
    ("run/pairs.tsv", "is inside the --model folder run"),
    (".", "holds the --src file data/en.txt"),
    ("/", "holds the --src file data/en.txt"),
])
def test_an_output_is_never_an_input(output, relation, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "en.txt").write_text("a line\n")
    (tmp_path / "run").mkdir()
    inputs = {"--src": ["data/en.txt"], "--model": "run", "--tgt": None,
              "--remote": "gs://bucket/x"}
    with pytest.raises(ValueError, match=f"^--output {output} {relation}; cmlm_tf never "
                                         "writes over an input: choose another --output$"):
        output_folders.check_apart(output, "--output", inputs)
    output_folders.check_apart("data/es.txt", "--output", inputs)
    output_folders.check_apart("gs://bucket/x", "--output", inputs)


def test_a_folder_is_left_behind_only_when_its_writer_is_gone(tmp_path):
    here = socket.gethostname()
    assert output_folders.writer_of(f"{output_folders.writer_tag()}-abc") == {
        "pid": os.getpid(), "host": here}
    assert output_folders.writer_of("0123abcd") is None
    live = tmp_path / "live"
    live.mkdir()
    assert not output_folders.writer_gone(str(live), f"{output_folders.writer_tag()}-x")
    assert output_folders.writer_gone(str(live), f"{output_folders.host_tag()}-{DEAD_PID}-x")
    # Another host's writer cannot be asked: it may still be running.
    assert not output_folders.writer_gone(str(live), f"otherhost-{DEAD_PID}-x")
    assert not output_folders.writer_gone(str(live), "x", {"pid": DEAD_PID, "host": "other"})
    # A folder naming no writer is left behind once nothing changed in it for a while.
    assert not output_folders.writer_gone(str(live), "0123abcd")
    os.utime(live, (time.time() - 3600,) * 2)
    assert output_folders.writer_gone(str(live), "0123abcd")


def test_a_work_folder_is_the_runs_own_and_removing_it_spares_the_rest(tmp_path):
    parent = tmp_path / "work"  # made by this run
    folder = output_folders.work_folder(str(parent), ".job-")
    assert os.path.basename(folder).startswith(f".job-{output_folders.writer_tag()}-")
    output_folders.remove_work(folder, str(parent), parent_made=True)
    assert not parent.exists()
    parent.mkdir()
    (parent / "notes.txt").write_text("mine")
    folder = output_folders.work_folder(str(parent), ".job-")
    output_folders.remove_work(folder, str(parent), parent_made=True)  # not empty: kept
    assert [p.name for p in parent.iterdir()] == ["notes.txt"]
    remote = output_folders.remote_work_folder("gs://bucket/work/", ".job-")
    assert remote.startswith(f"gs://bucket/work/.job-{output_folders.writer_tag()}-")
