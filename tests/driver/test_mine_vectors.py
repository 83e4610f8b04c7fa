"""`python -m cmlm_tf.mine` on the folders of `python -m cmlm_tf.embed_corpus`: the same pairs
as mining the text files with the model, on the exact search, the flat product, the index,
and Beam; clear
errors when the texts do not belong to the vectors."""

import json
import os
import pathlib

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="the scale extra (pip install -e '.[scale]')")
pytest.importorskip("faiss", reason="the scale extra (pip install -e '.[scale]')")

import shutil  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from cmlm_tf import mine  # noqa: E402
from cmlm_tf.scale import embed, embedding_files  # noqa: E402
from tests.conftest import TINY_WORDS  # noqa: E402

IN_PROCESS = ["--direct_running_mode=in_memory"]


def _sentences(count, seed):
    rng = np.random.default_rng(seed)
    words = [w for w in TINY_WORDS if w.isalpha()]
    return [" ".join(rng.choice(words, size=rng.integers(2, 8))) for _ in range(count)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tiny_export):
    """Two text files (an empty line in the source) and their embeddings folders."""
    folder = tmp_path_factory.mktemp("mine_vectors")
    src, tgt = _sentences(60, 31), _sentences(70, 32)
    src_file, tgt_file = folder / "src.txt", folder / "tgt.txt"
    src_file.write_text("\n".join(src[:20] + [""] + src[20:]) + "\n", encoding="utf-8")
    tgt_file.write_text("\n".join(tgt) + "\n", encoding="utf-8")
    for name, path in (("src", src_file), ("tgt", tgt_file)):
        embed.run(embed.EmbedConfig(str(tiny_export), [str(path)], str(folder / f"{name}_emb")),
                  beam_args=IN_PROCESS, report=lambda line: None)
    return folder


def _lines(path):
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]


def _mine(capsys, argv):
    code = mine.main(argv)
    return code, capsys.readouterr().err


def test_vectors_mine_the_pairs_the_model_mines(capsys, corpus, tiny_export):
    texts = ["--src", str(corpus / "src.txt"), "--tgt", str(corpus / "tgt.txt")]
    vectors = ["--src_vectors", str(corpus / "src_emb"), "--tgt_vectors", str(corpus / "tgt_emb")]
    code, err = _mine(capsys, ["--model", str(tiny_export), "--index", "exact",
                               "--output", str(corpus / "model.tsv")] + texts)
    assert code == 0, err
    expected = _lines(corpus / "model.tsv")
    assert len(expected) > 30
    # The flat product re-scores its shortlists exactly: the exact search's pairs and scores.
    for extra in (["--index", "exact"], ["--index", "exact"] + IN_PROCESS,
                  ["--index", "flat"], ["--index", "flat"] + IN_PROCESS):
        output = corpus / "vectors.tsv"
        code, err = _mine(capsys, vectors + texts + extra + ["--output", str(output)])
        assert code == 0, err
        got = _lines(output)
        assert [row[1:] for row in got] == [row[1:] for row in expected]
        np.testing.assert_allclose([float(row[0]) for row in got],
                                   [float(row[0]) for row in expected], atol=2e-6)
        assert "1-to-1 pairs" in err
    # The index, here and on Beam, gives one answer.
    for extra in (["--index", "ann"], ["--index", "ann"] + IN_PROCESS):
        code, err = _mine(capsys, vectors + texts + extra + ["--output", str(output)])
        assert code == 0, err
        approximate = _lines(output)
        if extra == ["--index", "ann"]:
            first = approximate
        assert approximate == first
        assert len(set(map(tuple, approximate)) & set(map(tuple, expected))) >= \
            0.9 * len(expected)


@pytest.mark.parametrize("argv,message", [
    (["--src", "{dir}/tgt.txt"], r"--src .*tgt.txt does not name .*src.txt"),
    (["--model", "{dir}/src_emb"], "--model and --src_vectors/--tgt_vectors are exclusive"),
    (["--work_dir", "{dir}/w"], "--work_dir applies to a Beam run"),
    (["--probes", "0"], "--probes must be positive, got 0"),
    (["--index", "exact", "--candidates", "8"], "--candidates applies to --index ann"),
    (["--index", "flat", "--probes", "8"], "--probes applies to --index ann"),
])
def test_bad_combinations_are_refused_in_one_line(capsys, corpus, argv, message):
    base = {"--src": str(corpus / "src.txt"), "--tgt": str(corpus / "tgt.txt"),
            "--src_vectors": str(corpus / "src_emb"), "--tgt_vectors": str(corpus / "tgt_emb"),
            "--output": str(corpus / "bad.tsv")}
    given = [part.format(dir=corpus) for part in argv]
    base.update(dict(zip(given[::2], given[1::2])))
    code, err = _mine(capsys, [part for pair in base.items() for part in pair])
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert __import__("re").search(message, err), err
    assert not (corpus / "bad.tsv").exists()


def test_a_source_file_changed_after_embedding_is_refused(capsys, tmp_path, tiny_export):
    src = tmp_path / "src.txt"
    src.write_text("\n".join(_sentences(12, 33)) + "\n", encoding="utf-8")
    embed.run(embed.EmbedConfig(str(tiny_export), [str(src)], str(tmp_path / "emb")),
              beam_args=IN_PROCESS, report=lambda line: None)
    src.write_text("only one line\n", encoding="utf-8")
    capsys.readouterr()  # what the embedding run logged (Beam's runner notes) is not mine's
    code, err = _mine(capsys, ["--src", str(src), "--tgt", str(src), "--src_vectors",
                               str(tmp_path / "emb"), "--tgt_vectors", str(tmp_path / "emb"),
                               "--output", str(tmp_path / "p.tsv")])
    assert code == 2
    assert f"error: {src}: changed after it was embedded into" in err, err
    assert err.count("\n") == 1


def _copy(corpus, tmp_path):
    """The corpus's texts and embeddings folders, copied where a test may change them."""
    for name in ("src.txt", "tgt.txt"):
        shutil.copy2(corpus / name, tmp_path / name)
    for name in ("src_emb", "tgt_emb"):
        shutil.copytree(corpus / name, tmp_path / name)
        manifest_path = tmp_path / name / embedding_files.MANIFEST
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        manifest["files"] = {str(tmp_path / source[len(str(corpus)) + 1:]): record
                             for source, record in manifest["files"].items()}
        manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    return tmp_path


def _rows_to(folder, base):
    """Points the rows' sources of the copied shards at `base` (they name the original)."""
    for shard in folder.glob("part-*.parquet"):
        table = pq.read_table(shard)
        sources = [str(base / pathlib.Path(source).name)
                   for source in table.column("source").to_pylist()]
        pq.write_table(table.set_column(0, "source", pa.array(sources, pa.string())), shard,
                       write_page_checksum=True)


def _argv(folder):
    return ["--src", str(folder / "src.txt"), "--tgt", str(folder / "tgt.txt"),
            "--src_vectors", str(folder / "src_emb"), "--tgt_vectors",
            str(folder / "tgt_emb"), "--output", str(folder / "pairs.tsv")]


@pytest.mark.parametrize("edit", ["same_size", "inserted_line", "touched"])
def test_texts_are_checked_against_their_fingerprints(capsys, corpus, tmp_path, edit):
    """A line changed in place (same size) or one inserted at the top is refused, naming
    the file; a file touched without a change in its bytes is mined."""
    folder = _copy(corpus, tmp_path)
    for side in ("src_emb", "tgt_emb"):
        _rows_to(folder / side, folder)
    text = folder / "tgt.txt"
    lines = text.read_text(encoding="utf-8").splitlines()
    if edit == "same_size":
        lines[5] = lines[5][::-1]
    elif edit == "inserted_line":
        lines.insert(0, "a new first line")
    content = "\n".join(lines) + "\n"
    text.write_text(content, encoding="utf-8")
    os.utime(text, ns=(0, 10**18))
    code, err = _mine(capsys, _argv(folder))
    if edit == "touched":
        assert code == 0, err
        return
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {text}: changed after it was embedded into "
                          f"{folder / 'tgt_emb'}")
    assert not (folder / "pairs.tsv").exists()


def test_vectors_of_two_models_are_refused_unless_allowed(capsys, corpus, tmp_path):
    folder = _copy(corpus, tmp_path)
    for side in ("src_emb", "tgt_emb"):
        _rows_to(folder / side, folder)
    manifest_path = folder / "tgt_emb" / embedding_files.MANIFEST
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["model_identity"]["checkpoint_sha256"] = "0" * 64
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    code, err = _mine(capsys, _argv(folder))
    assert code == 2 and err.count("\n") == 1, err
    assert "another model" in err and "--allow_different_models" in err
    code, err = _mine(capsys, _argv(folder) + ["--allow_different_models"])
    assert code == 0, err


def test_an_old_manifest_without_fingerprints_is_mined_with_one_warning(capsys, corpus,
                                                                        tmp_path):
    folder = _copy(corpus, tmp_path)
    for side in ("src_emb", "tgt_emb"):
        _rows_to(folder / side, folder)
        manifest_path = folder / side / embedding_files.MANIFEST
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        del manifest["files"], manifest["model_identity"]
        manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    code, err = _mine(capsys, _argv(folder))
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 2 and "records no fingerprints" in warnings[0], err
