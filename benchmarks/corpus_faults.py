r"""Faults on the corpus, mining and precision surfaces, one at a time, and what each gives.

    python benchmarks/corpus_faults.py [--work_dir DIR] [--steps 100]

Trains the tiny CMLM recipe for half of `--steps` steps, then all (`python -m cmlm_tf.train`,
in a child process), exporting it at both (the last with `--int8`), embeds the held-out Bible
verses of the package (`cmlm_tf/data/corpus/bible_en_es_heldout.tsv`, 668 English and 668
Spanish lines) with `python -m cmlm_tf.embed_corpus`, then runs each case with the command a
user would run, in this process (int8 in a child with TF_ENABLE_ONEDNN_OPTS=0). Outcomes
(`ok`, `clear`, `traceback`, `silent wrong`, `lost`, ...): benchmarks/fault_runs.py. Prints
a table; exits 1 unless every case is `ok` or `clear`. tests/test_corpus_faults.py runs the
cases that need no model.
"""

import argparse
import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
from unittest import mock

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # loaded by path in tests
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fault_runs  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
VERSES = REPO / "cmlm_tf" / "data" / "corpus" / "bible_en_es_heldout.tsv"
BEAM = ["--direct_running_mode=in_memory"]
TRAIN = ["--experiment=cmlm_tf/cmlm", "--config_file=cmlm_tiny"]


@dataclasses.dataclass
class Setup:
    """What the cases run on: the work folder, the texts and, for the cases that need a
    model, the run, its exports and the embeddings (None without)."""

    work: pathlib.Path
    src: pathlib.Path
    tgt: pathlib.Path
    run_dir: pathlib.Path = None
    export: pathlib.Path = None
    other_export: pathlib.Path = None
    vectors: dict = None


def _mine(*argv):
    from cmlm_tf.commands import mine

    return fault_runs.run(mine.main, [str(part) for part in argv])


def _embed_run(model, text, out):
    from cmlm_tf.commands import embed_corpus

    return fault_runs.run(embed_corpus.main, ["--model", str(model), "--input", str(text),
                                              "--output", str(out)] + BEAM)


def _embed(model, text, out):
    rc, err = _embed_run(model, text, out)
    if rc != 0:
        raise RuntimeError(f"embedding {text} failed: {err[-2000:]}")
    return out


def _train(argv):
    from cmlm_tf.commands import train

    return fault_runs.run(train.main, TRAIN + argv)


def prepare(work, steps=0):
    """The texts, and with `steps` a run, its exports and the embeddings of `Setup`."""
    work = pathlib.Path(work)
    pairs = [line.split("\t") for line in VERSES.read_text(encoding="utf-8").splitlines()]
    setup = Setup(work, work / "src.txt", work / "tgt.txt")
    setup.src.write_text("".join(f"{s}\n" for s, _ in pairs), encoding="utf-8")
    setup.tgt.write_text("".join(f"{t}\n" for _, t in pairs), encoding="utf-8")
    if not steps:
        return setup
    from cmlm_tf.commands import export

    setup.run_dir = work / "run"
    setup.export, setup.other_export = work / "export", work / "export_early"
    # Two models of one size: the run at half its steps, and at the end.
    for until, out, extra in ((steps // 2, setup.other_export, []),
                              (steps, setup.export, ["--int8"])):
        trained = subprocess.run([sys.executable, "-m", "cmlm_tf.train", *TRAIN, "--mode=train",
                                  f"--model_dir={setup.run_dir}", "--params_override="
                                  f"trainer.train_steps={until},trainer.optimizer_config.warmup"
                                  f".linear.warmup_steps={max(1, steps // 10)}"],
                                 cwd=REPO, capture_output=True, text=True)
        if trained.returncode != 0:
            raise RuntimeError(f"training failed: {trained.stderr[-2000:]}")
        rc, err = fault_runs.run(export.main, ["--model_dir", str(setup.run_dir),
                                               "--export_dir", str(out)] + extra)
        if rc != 0:
            raise RuntimeError(f"export failed: {err[-2000:]}")
    (work / "three_src.txt").write_text("".join(f"{s}\n" for s, _ in pairs[:3]))
    (work / "three_tgt.txt").write_text("".join(f"{t}\n" for _, t in pairs[:3]))
    (work / "empty.txt").write_text("\n")
    setup.vectors = {name: _embed(model, work / f"{text}.txt", work / f"{name}_emb")
                     for name, model, text in (
                         ("src", setup.export, "src"), ("tgt", setup.export, "tgt"),
                         ("tgt_other", setup.other_export, "tgt"),
                         ("three_src", setup.export, "three_src"),
                         ("three_tgt", setup.export, "three_tgt"),
                         ("empty", setup.export, "empty"))}
    return setup


def _vectors_argv(setup, src="src", tgt="tgt", texts=None):
    texts = texts or (setup.src, setup.tgt)
    return ["--src", texts[0], "--tgt", texts[1], "--src_vectors", setup.vectors[src],
            "--tgt_vectors", setup.vectors[tgt]]


def _edited_text(setup, edit, name):
    """Mines after `edit(lines)` changed the source text; the text is restored after."""
    def case():
        before, status = setup.src.read_bytes(), setup.src.stat()
        lines = before.decode("utf-8").splitlines()
        try:
            setup.src.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
            return _mine(*_vectors_argv(setup), "--output", setup.work / f"{name}.tsv"), None
        finally:
            setup.src.write_bytes(before)
            os.utime(setup.src, ns=(status.st_atime_ns, status.st_mtime_ns))
    return case


def _damaged_vectors(setup, name, damage):
    """Mines a copy of the source vectors damaged by `damage(folder)`."""
    def case():
        folder = setup.work / name
        shutil.copytree(setup.vectors["src"], folder)
        damage(folder)
        argv = _vectors_argv(setup)
        argv[5] = folder
        return _mine(*argv, "--output", setup.work / f"{name}.tsv"), None
    return case


def _set_vectors(value_of):
    """Damage: every vector of the first shard replaced by `value_of(row, vector)`."""
    def damage(folder):
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = sorted(folder.glob("part-*.parquet"))[0]
        table = pq.read_table(path)
        vectors = [value_of(row, vector)
                   for row, vector in enumerate(table.column("embedding").to_pylist())]
        pq.write_table(table.set_column(2, "embedding", pa.array(
            vectors, pa.list_(pa.float32()))), path, write_page_checksum=True)
    return damage


def _flip_bytes(folder):
    path = max(folder.glob("part-*.parquet"), key=lambda p: p.stat().st_size)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle - 1000:middle + 1000] = bytes(b ^ 0x5A for b in data[middle - 1000:middle + 1000])
    path.write_bytes(bytes(data))


def _kept_share(setup, index, name):
    """Mines with `--index index` and compares with the exact search: `silent wrong` when
    fewer than 99 % of the exact pairs are kept."""
    def case():
        exact, out = setup.work / "exact.tsv", setup.work / f"{name}.tsv"
        if not exact.exists():
            _mine(*_vectors_argv(setup), "--index", "exact", "--output", exact)
        rc, err = _mine(*_vectors_argv(setup), "--index", index, "--output", out)
        if rc != 0:
            return (rc, err), None
        pairs = [{tuple(line.split("\t")[1:]) for line in path.read_text().splitlines()}
                 for path in (out, exact)]
        kept = len(pairs[0] & pairs[1]) / len(pairs[1])
        verdict = None if kept >= 0.99 else "silent wrong"
        return (rc, err + f"kept {kept:.2%} of the exact pairs\n"), verdict
    return case


def _without_faiss(setup):
    with mock.patch.dict(sys.modules, {"faiss": None}):
        return _mine("--src_vectors", setup.work / "a", "--tgt_vectors", setup.work / "b",
                     "--src", setup.src, "--tgt", setup.tgt, "--index", "ann",
                     "--output", setup.work / "no_faiss.tsv"), None


def _eval_untrained(setup, name, make):
    """`train --mode=eval` on a run folder without a checkpoint (`make` it or not)."""
    def case():
        model_dir = setup.work / name
        if make:
            model_dir.mkdir()
        result = _train(["--mode=eval", f"--model_dir={model_dir}"])
        return result, None if make or not model_dir.exists() else "silent wrong"
    return case


def no_model_cases(setup):
    """(name, case, expected): cases that need no trained model."""
    return [
        ("mine --threshold nan", lambda: (_mine(
            "--src_vectors", setup.work / "a", "--tgt_vectors", setup.work / "b", "--src",
            setup.src, "--tgt", setup.tgt, "--output", setup.work / "nan.tsv",
            "--threshold=nan"), None), "--threshold"),
        ("mine --index ann without faiss", lambda: _without_faiss(setup), "faiss-cpu"),
        ("train --params_override=task.model.encoder=5", lambda: (_train(
            ["--mode=train", f"--model_dir={setup.work / 'override'}",
             "--params_override=task.model.encoder=5"]), None), "task.model.encoder"),
        ("train --mode=eval, --model_dir empty", _eval_untrained(setup, "empty_run", True),
         "empty_run"),
        ("train --mode=eval, --model_dir a typo", _eval_untrained(setup, "no_such_run", False),
         "no_such_run"),
    ]


def _int8_without_onednn(setup):
    result = subprocess.run([sys.executable, __file__, "--int8_child", str(setup.export)],
                            capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0"})
    return (result.returncode, result.stderr), None


def _damaged_export(setup):
    damaged = setup.work / "damaged_export"
    shutil.copytree(setup.export, damaged)
    for data in (damaged / "serving" / "1" / "variables").glob("variables.data-*"):
        data.write_bytes(data.read_bytes()[:100])
    return _embed_run(damaged, setup.src, setup.work / "from_damaged"), None


def _full_disk(setup):
    point = setup.work / "small_disk"
    point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(point)],
                             capture_output=True).returncode == 0
    if not mounted:
        return (0, "mounting a tmpfs needs root\n"), "not run"
    try:
        return _embed_run(setup.export, setup.src, point / "out"), None
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)  # lazy: Beam may hold files


def _owned_staging(setup):
    """embed_corpus beside the live staging folder of another run (this process)."""
    from cmlm_tf.files import output_folders

    out = setup.work / "race_out"
    staging = pathlib.Path(f"{out}.staging-{output_folders.writer_tag()}-0123abcd")
    staging.mkdir()
    (staging / "part-00000-of-00001.parquet").write_bytes(b"being written")
    result = _embed_run(setup.export, setup.tgt, out)
    return result, None if staging.exists() else "lost"


def _dead_work(setup):
    """mine with Beam options beside the work folder of a killed mine (a dead pid)."""
    from cmlm_tf.files import output_folders

    folder = setup.work / "debris"
    folder.mkdir()
    child = subprocess.Popen(["true"])
    child.wait()
    debris = folder / f".mine-work-{output_folders.host_tag()}-{child.pid}-0123abcd"
    debris.mkdir()
    (debris / "src.npy").write_bytes(b"left by a killed run")
    result = _mine(*_vectors_argv(setup), "--output", folder / "pairs.tsv", *BEAM)
    return result, None if not debris.exists() else "silent wrong"


def ownership_cases(setup):
    """(name, case, expected): output flags pointed at what they must not replace."""
    def export_into(folder):
        from cmlm_tf.commands import export

        return fault_runs.run(export.main, ["--model_dir", str(setup.run_dir), "--export_dir",
                                            str(folder), "--overwrite"])

    def notes(path):
        path.mkdir()
        (path / "notes.txt").write_text("mine\n")

    same = setup.work / "same.txt"
    user_work = setup.work / "user_work"
    return [
        ("export --overwrite onto a copy of a run", fault_runs.left_alone(
            setup.work / "bt_copy", lambda path: shutil.copytree(setup.run_dir, path),
            lambda: export_into(setup.work / "bt_copy")), "bt_copy"),
        ("export --overwrite onto a folder of notes", fault_runs.left_alone(
            setup.work / "notes", notes, lambda: export_into(setup.work / "notes")), "notes"),
        ("mine --output is --src", fault_runs.left_alone(
            same, lambda path: shutil.copy(setup.src, path), lambda: _mine(
                "--model", setup.export, "--src", same, "--tgt", setup.tgt, "--output", same)),
         "--output"),
        ("mine --work_dir a folder of the user's", fault_runs.left_alone(
            user_work, notes, lambda: _mine(*_vectors_argv(setup), "--output",
                                            setup.work / "work_dir.tsv", "--work_dir",
                                            user_work, *BEAM)), "ok"),
    ]


def model_cases(setup):
    """(name, case, expected): the cases that mine, embed or export with the tiny model."""
    return ownership_cases(setup) + [
        ("mine after a line of --src changed", _edited_text(
            setup, lambda lines: lines[:5] + [lines[5][::-1]] + lines[6:], "changed"),
         "src.txt"),
        ("mine after a line inserted at the top of --src", _edited_text(
            setup, lambda lines: ["A new first line."] + lines, "inserted"), "src.txt"),
        ("mine, one NaN vector in a shard", _damaged_vectors(setup, "one_nan", _set_vectors(
            lambda row, vector: [float("nan")] * len(vector) if row == 7 else vector)),
         "not finite"),
        ("mine, every vector NaN", _damaged_vectors(setup, "all_nan", _set_vectors(
            lambda row, vector: [float("nan")] * len(vector))), "not finite"),
        ("mine, 2,000 bytes flipped inside a shard", _damaged_vectors(
            setup, "flipped", _flip_bytes), "parquet"),
        ("mine, vectors of two models", lambda: (_mine(
            *_vectors_argv(setup, tgt="tgt_other"), "--output", setup.work / "two.tsv"), None),
         "another model"),
        ("mine --index flat keeps 99 % of exact pairs", _kept_share(setup, "flat", "flat"),
         "ok"),
        ("mine --index ann keeps 99 % of exact pairs", _kept_share(setup, "ann", "ann"), "ok"),
        ("mine --index ann, 3 x 3 vectors", lambda: (_mine(*_vectors_argv(
            setup, "three_src", "three_tgt", (setup.work / "three_src.txt",
                                              setup.work / "three_tgt.txt")),
            "--index", "ann", "--output", setup.work / "three.tsv"), None), "ok"),
        ("mine --index ann, 668 x 3 vectors", lambda: (_mine(*_vectors_argv(
            setup, "src", "three_tgt", (setup.src, setup.work / "three_tgt.txt")),
            "--index", "ann", "--output", setup.work / "many_three.tsv"), None), "ok"),
        ("mine, an empty vectors folder", lambda: (_mine(*_vectors_argv(
            setup, "empty", "tgt", (setup.work / "empty.txt", setup.tgt)),
            "--output", setup.work / "empty.tsv"), None), "--src_vectors"),
        ("load(precision='int8'), TF_ENABLE_ONEDNN_OPTS=0", lambda: _int8_without_onednn(
            setup), "TF_ENABLE_ONEDNN_OPTS"),
        ("embed_corpus with a damaged export", lambda: _damaged_export(setup),
         "damaged_export"),
        ("embed_corpus onto a full disk", lambda: _full_disk(setup), "small_disk"),
        ("embed_corpus beside another run's live staging", lambda: _owned_staging(setup),
         "ok"),
        ("mine beside a killed mine's work folder", lambda: _dead_work(setup), "ok"),
    ]


def run_cases(setup, names=None):
    """Runs the cases (those named in `names`, else all that `setup` allows); returns
    [(name, outcome, the line printed)]."""
    cases = no_model_cases(setup) + (model_cases(setup) if setup.export else [])
    results = []
    for name, case, expected in cases:
        if names is not None and name not in names:
            continue
        (rc, err), verdict = case()
        found = fault_runs.outcome(rc, err, expected)
        outcome = found if found == "traceback" or verdict is None else verdict
        results.append((name, outcome, fault_runs.last_error(err)))
    return results


def _int8_child(export):
    import cmlm_tf
    from cmlm_tf.commands import common

    return common.run_main(lambda: cmlm_tf.load(export, precision="int8").encode(["a cat"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", help="where to write the cases (default: a temporary "
                                           "folder, removed afterwards)")
    parser.add_argument("--steps", type=int, default=100,
                        help="training steps of the tiny model (default 100)")
    parser.add_argument("--int8_child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.int8_child:
        return _int8_child(args.int8_child)
    return fault_runs.run_in_work_folder(args.work_dir, "corpus_faults-",
                                         lambda work: run_cases(prepare(work, args.steps)))


if __name__ == "__main__":
    sys.exit(main())
