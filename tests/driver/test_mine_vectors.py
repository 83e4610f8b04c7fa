"""`python -m cmlm_tf.mine` on the folders of `python -m cmlm_tf.embed_corpus`: the same pairs
as mining the text files with the model, on the exact search, the flat product, the index,
and Beam; clear
errors when the texts do not belong to the vectors."""

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="the scale extra (pip install -e '.[scale]')")
pytest.importorskip("faiss", reason="the scale extra (pip install -e '.[scale]')")

from cmlm_tf import mine  # noqa: E402
from cmlm_tf.scale import embed  # noqa: E402
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
                  IN_PROCESS, report=lambda line: None)
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
              IN_PROCESS, report=lambda line: None)
    src.write_text("only one line\n", encoding="utf-8")
    code, err = _mine(capsys, ["--src", str(src), "--tgt", str(src), "--src_vectors",
                               str(tmp_path / "emb"), "--tgt_vectors", str(tmp_path / "emb"),
                               "--output", str(tmp_path / "p.tsv")])
    assert code == 2
    assert "src.txt: has no line" in err and "changed after it was embedded" in err
