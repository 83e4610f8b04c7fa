"""The exporter and the miners under faults: a second export that finds OUT written, the
miners on full disks, and the modes another user needs to read an export. (The faults of the
staging folder and of the checkpoint snapshot are in test_staging.py and test_snapshot.py.)"""

import errno
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

from cmlm_tf.commands import mine, mine_hard_negatives
from cmlm_tf.export import export_lib
from cmlm_tf.files import staged_folder
from cmlm_tf.scale import corpus_mining
from tests.conftest import fill_disk, one_error_line, subprocess_env


def test_second_export_without_overwrite_loses_cleanly(tmp_path):
    """Another export wrote OUT while this one ran: without --overwrite the swap stops, and
    both OUT and the finished staging folder are as they were."""
    out = tmp_path / "out"
    staging = staged_folder.owned_tempdir(str(out))
    (tmp_path / staging / "new.txt").write_text("this export", encoding="utf-8")
    out.mkdir()
    (out / "other.txt").write_text("the other export", encoding="utf-8")
    with pytest.raises(FileExistsError, match="--overwrite"):
        staged_folder.replace_dir(staging, str(out), overwrite=False)
    assert sorted(os.listdir(out)) == ["other.txt"]
    assert sorted(os.listdir(staging)) == [staged_folder.OWNER_FILE, "new.txt"]
    staged_folder.replace_dir(staging, str(out), overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["out"] and os.listdir(out) == ["new.txt"]


class _FillingFile:
    """A text file that takes `room` characters, then fails as a full disk does."""

    def __init__(self, file, room):
        self.file, self.room = file, room

    def write(self, text):
        if len(text) > self.room:
            self.file.write(text[:self.room])
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(text)
        return self.file.write(text)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


def _disk_full_after(room):
    def opener(path, mode="r", **kwargs):
        return _FillingFile(open(path, mode, **kwargs), room)
    return opener


PAIRS = [("the dog runs", "el perro corre"), ("a cat sleeps", "un gato duerme"),
         ("the man is playing a guitar", "el hombre toca la guitarra"),
         ("a woman is slicing an onion", "una mujer corta una cebolla"),
         ("red car", "coche rojo"), ("blue house", "casa azul")]


def _run_miner(name, tmp_path, tiny_export, output):
    if name == "mine":
        src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
        src.write_text("".join(s + "\n" for s, _ in PAIRS), encoding="utf-8")
        tgt.write_text("".join(t + "\n" for _, t in PAIRS), encoding="utf-8")
        return mine.main(["--model", str(tiny_export), "--src", str(src), "--tgt", str(tgt),
                          "--output", str(output)])
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    return mine_hard_negatives.main(["--model", str(tiny_export), "--pairs", str(pairs),
                                     "--output", str(output), "--num_negatives", "2",
                                     "--range_max", "5", "--duplicate_cosine", "1.1"])


@pytest.mark.parametrize("name", ["mine", "mine_hard_negatives"])
def test_miner_on_a_full_disk_leaves_no_partial_output(name, tmp_path, tiny_export,
                                                       monkeypatch, capsys):
    # The module that opens the output file (`mine` writes it in `corpus_mining`).
    module = {"mine": corpus_mining, "mine_hard_negatives": mine_hard_negatives}[name]
    folder = tmp_path / "mined"
    folder.mkdir()
    output = folder / "out.tsv"
    output.write_text("an earlier run's output\n", encoding="utf-8")
    monkeypatch.setattr(module, "open", _disk_full_after(20), raising=False)
    rc = _run_miner(name, tmp_path, tiny_export, output)
    line = one_error_line(capsys.readouterr().err)
    assert rc == 2 and line.startswith(f"error: {output}: no space left on device"), line
    assert "MiB free there" in line
    assert output.read_text(encoding="utf-8") == "an earlier run's output\n"
    assert os.listdir(folder) == ["out.tsv"]


def test_mine_on_a_full_tmpfs_leaves_no_output(tmp_path, small_disk, tiny_export, capsys):
    small = small_disk(64 * 1024)
    fill_disk(small)
    output = small / "pairs.tsv"
    rc = _run_miner("mine", tmp_path, tiny_export, output)
    line = one_error_line(capsys.readouterr().err)
    assert rc == 2 and line.startswith(f"error: {output}: no space left on device")
    assert "0.0 MiB free there" in line
    assert sorted(os.listdir(small)) == ["filler"]


@pytest.fixture(scope="module")
def umask_022_export(tiny_run_dir):
    """An export written under umask 022 into a folder every user can read."""
    parent = tempfile.mkdtemp(prefix="cmlm_tf_umask_")
    os.chmod(parent, 0o755)
    old_umask = os.umask(0o022)
    try:
        out = export_lib.export(os.path.join(parent, "out"), model_dir=str(tiny_run_dir))
    finally:
        os.umask(old_umask)
    yield out
    shutil.rmtree(parent, ignore_errors=True)


def test_export_has_the_umask_modes(umask_022_export):
    modes = {}
    for root, dirs, files in os.walk(umask_022_export):
        for name in dirs + files:
            path = os.path.join(root, name)
            modes[os.path.relpath(path, umask_022_export)] = stat.S_IMODE(os.stat(path).st_mode)
    modes["."] = stat.S_IMODE(os.stat(umask_022_export).st_mode)
    wrong = {path: oct(mode) for path, mode in modes.items()
             if mode != (0o755 if os.path.isdir(os.path.join(umask_022_export, path))
                         else 0o644)}
    assert not wrong and "serving/1/saved_model.pb" in modes


def test_another_user_loads_the_export(umask_022_export):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("reading as another user needs root and setpriv; the modes test above "
                    "checks what that user needs")
    env = dict(subprocess_env(), HOME="/tmp")
    result = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
         sys.executable, "-m", "tests.export.children", "serving_dim",
         os.path.join(umask_022_export, "serving", "1")], capture_output=True, text=True, env=env,
        cwd="/", timeout=3600)
    assert result.returncode == 0 and "dim 32" in result.stdout, result.stderr[-2000:]
