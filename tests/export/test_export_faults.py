"""The exporter and the miners under faults: an export folder that overlaps the run, a kill at
each rename of `--overwrite`, two exports of one folder at once, a trainer pruning the
checkpoint being exported, full disks, and the modes another user needs to read an export."""

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

from cmlm_tf import staged_folder
from cmlm_tf.export import cli as export_cli
from cmlm_tf.export import export_lib
from tests.conftest import fill_disk, subprocess_env

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


def _one_error_line(err: str) -> str:
    """The `error:` line that ends a command's stderr: one, and no traceback (the lines
    before it are progress lines such as `cmlm_tf.progress.Stages`' or `encoding N sentences`)."""
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == lines[-1:] and "Traceback" not in err, err
    return errors[0]


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
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2
    assert "--export_dir" in line and f"the {source_flag} folder" in line
    assert _listing(run) == before  # the run's checkpoints and params.yaml are all there
    assert sorted(os.listdir(tmp_path)) == ["runs"]
    assert sorted(os.listdir(tmp_path / "runs")) == ["run"]


_KILLING_EXPORT = """
import os, sys
kill_at, count_file, watched = int(sys.argv[1]), sys.argv[2], sys.argv[3]
calls = []

def hooked(real):
    def rename(src, dst, *args, **kwargs):
        if any(os.path.abspath(p).startswith(watched) for p in (src, dst)):
            calls.append(dst)
            with open(count_file, "w") as f:
                f.write(str(len(calls)))
            if len(calls) == kill_at:
                os._exit(137)
        return real(src, dst, *args, **kwargs)
    return rename

os.rename, os.replace = hooked(os.rename), hooked(os.replace)
from cmlm_tf.export import cli
sys.exit(cli.main(sys.argv[4:]))
"""


def _export_process(tmp_path, kill_at):
    """`--model_dir run --export_dir exports/out --overwrite` (relative to `tmp_path`) in a
    subprocess that dies (`os._exit(137)`, like kill -9) at its `kill_at`-th rename in
    `exports/` (0: never); returns it and the file counting its renames."""
    script = tmp_path / "killing_export.py"
    script.write_text(_KILLING_EXPORT, encoding="utf-8")
    count = tmp_path / f"renames-{kill_at}.txt"
    args = [sys.executable, str(script), str(kill_at), str(count), str(tmp_path / "exports"),
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


def _clone_checkpoint(run, source, step):
    """`ckpt-<step>` with the files of `source`, named in the run's `checkpoint` state, as a
    trainer writes one; returns its prefix."""
    prefix = str(run / f"ckpt-{step}")
    for path in export_lib._checkpoint_files(str(source)):
        suffix = os.path.basename(path)[len(os.path.basename(str(source))):]
        shutil.copyfile(path, prefix + ".tmp")
        os.replace(prefix + ".tmp", prefix + suffix)
    state = run / "checkpoint.tmp"
    state.write_text(f'model_checkpoint_path: "ckpt-{step}"\n', encoding="utf-8")
    os.replace(state, run / "checkpoint")
    return prefix


def _prune(prefix):
    for path in export_lib._checkpoint_files(prefix):
        os.remove(path)


def test_checkpoint_pruned_during_export_is_read_from_one_snapshot(tmp_path, tiny_run_dir,
                                                                   monkeypatch):
    from cmlm_tf.modeling import sentence_encoder

    run = _copy_run(tiny_run_dir, tmp_path / "run")
    _clone_checkpoint(run, run / "ckpt-1", 2)
    resolve, restore = sentence_encoder.resolve_checkpoint, sentence_encoder.restore_encoder
    hashes = {}

    def resolve_then_prune(path):
        """The trainer writes ckpt-3 and prunes ckpt-2 right after the export resolved it."""
        prefix = resolve(path)
        if prefix.endswith("ckpt-2"):
            hashes["ckpt-3"] = export_lib.checkpoint_sha256(_clone_checkpoint(run, prefix, 3))
            _prune(prefix)
        return prefix

    def prune_then_restore(encoder, path, **kwargs):
        """... and prunes ckpt-3 too, once the export holds it, before it is read."""
        _prune(str(run / "ckpt-3"))
        return restore(encoder, path, **kwargs)

    monkeypatch.setattr(sentence_encoder, "resolve_checkpoint", resolve_then_prune)
    monkeypatch.setattr(sentence_encoder, "restore_encoder", prune_then_restore)
    out = tmp_path / "out"
    export_lib.export(str(out), model_dir=str(run))
    meta = json.loads((out / "cmlm_tf_export.json").read_text())
    assert meta["source"]["checkpoint"] == "ckpt-3"
    assert meta["source"]["checkpoint_sha256"] == hashes["ckpt-3"]
    assert not os.path.exists(str(run / "ckpt-3.index"))
    assert sorted(os.listdir(tmp_path)) == ["out", "run"]


def test_checkpoint_pruned_twice_is_one_error(tmp_path, tiny_run_dir, monkeypatch, capsys):
    from cmlm_tf.modeling import sentence_encoder

    run = _copy_run(tiny_run_dir, tmp_path / "run")
    resolve = sentence_encoder.resolve_checkpoint

    def resolve_then_prune(path):
        """A trainer that writes the next checkpoint and prunes the one just resolved."""
        prefix = resolve(path)
        step = int(prefix.rsplit("-", 1)[1])
        _clone_checkpoint(run, prefix, step + 1)
        _prune(prefix)
        return prefix

    monkeypatch.setattr(sentence_encoder, "resolve_checkpoint", resolve_then_prune)
    rc = export_cli.main(["--model_dir", str(run), "--export_dir", str(tmp_path / "out")])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and f"{run / 'ckpt-2'}: the checkpoint's files were removed" in line
    assert sorted(os.listdir(tmp_path)) == ["run"]


def test_checkpoint_sha256_of_no_files_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint files"):
        export_lib.checkpoint_sha256(str(tmp_path / "ckpt-50"))


def test_export_against_a_live_trainer(tmp_path, tiny_run_dir, monkeypatch):
    """A trainer that writes a checkpoint every 100 ms and keeps only the newest: the export
    records a checkpoint and the hash of that checkpoint's files."""
    run = _copy_run(tiny_run_dir, tmp_path / "run")
    original = shutil.copytree(run, tmp_path / "original")
    hashes, stop = {}, threading.Event()

    def train():
        step, previous = 2, str(run / "ckpt-1")
        while not stop.is_set():
            prefix = _clone_checkpoint(run, original / "ckpt-1", step)
            hashes[f"ckpt-{step}"] = export_lib.checkpoint_sha256(prefix)
            _prune(previous)
            previous, step = prefix, step + 1
            time.sleep(0.1)

    real_sha256 = export_lib.checkpoint_sha256

    def sha256_after_two_more_checkpoints(prefix):
        # The export hashes its snapshot only once the trainer has written and pruned two
        # more checkpoints: the export overlaps them however fast the machine is.
        if threading.current_thread() is threading.main_thread():
            target = len(hashes) + 2
            while len(hashes) < target and trainer.is_alive():
                time.sleep(0.01)
        return real_sha256(prefix)

    monkeypatch.setattr(export_lib, "checkpoint_sha256", sha256_after_two_more_checkpoints)
    trainer = threading.Thread(target=train)
    trainer.start()
    try:
        while len(hashes) < 2 and trainer.is_alive():
            time.sleep(0.05)
        assert len(hashes) >= 2, "the training thread ended before its second checkpoint"
        export_lib.export(str(tmp_path / "out"), model_dir=str(run))
    finally:
        stop.set()
        trainer.join()
    meta = json.loads((tmp_path / "out" / "cmlm_tf_export.json").read_text())
    source = meta["source"]
    assert source["checkpoint_sha256"] == hashes[source["checkpoint"]]
    assert len(hashes) > 3  # checkpoints were written and pruned while the export ran


def _tf_disk_full(*args, **kwargs):
    import tensorflow as tf

    raise tf.errors.ResourceExhaustedError(
        None, None, "variables.data-00000-of-00001; No space left on device")


def test_full_disk_during_overwrite_is_one_line_and_keeps_the_old_export(
        tmp_path, tiny_run_dir, tiny_export, monkeypatch, capsys):
    import tensorflow as tf

    out = _old_export(tiny_export, tmp_path / "out")
    monkeypatch.setattr(tf.saved_model, "save", _tf_disk_full)
    rc = export_cli.main(["--model_dir", str(tiny_run_dir), "--export_dir", str(out),
                          "--overwrite"])
    line = _one_error_line(capsys.readouterr().err)
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
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2
    assert line.startswith(f"error: {small}") and "no space left on device" in line
    assert "MiB free there" in line
    assert _complete(out) and (out / "old.txt").exists()
    assert sorted(os.listdir(small)) == ["out"]


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
    from cmlm_tf import mine, mine_hard_negatives

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
    from cmlm_tf import mine, mine_hard_negatives

    module = {"mine": mine, "mine_hard_negatives": mine_hard_negatives}[name]
    folder = tmp_path / "mined"
    folder.mkdir()
    output = folder / "out.tsv"
    output.write_text("an earlier run's output\n", encoding="utf-8")
    monkeypatch.setattr(module, "open", _disk_full_after(20), raising=False)
    rc = _run_miner(name, tmp_path, tiny_export, output)
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and line.startswith(f"error: {output}: no space left on device"), line
    assert "MiB free there" in line
    assert output.read_text(encoding="utf-8") == "an earlier run's output\n"
    assert os.listdir(folder) == ["out.tsv"]


def test_mine_on_a_full_tmpfs_leaves_no_output(tmp_path, small_disk, tiny_export, capsys):
    small = small_disk(64 * 1024)
    fill_disk(small)
    output = small / "pairs.tsv"
    rc = _run_miner("mine", tmp_path, tiny_export, output)
    line = _one_error_line(capsys.readouterr().err)
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
    code = textwrap.dedent(f"""
        import tensorflow as tf, tensorflow_text  # noqa: F401
        model = tf.saved_model.load({os.path.join(umask_022_export, "serving", "1")!r})
        out = model.signatures["serving_default"](sentences=tf.constant(["a dog"]))
        print("dim", out["embeddings"].shape[-1])
    """)
    env = dict(subprocess_env(), HOME="/tmp")
    result = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
         sys.executable, "-c", code], capture_output=True, text=True, env=env,
        cwd="/", timeout=3600)
    assert result.returncode == 0 and "dim 32" in result.stdout, result.stderr[-2000:]
