"""Tests of `python -m cmlm_tf.evaluate` (and `python -m cmlm_tf.mine`, `encode(language=)`) in
this process on the tiny export: reports equal the library's numbers, output formats, clear
errors; without the `mteb` extra, `evaluate mteb` says in one line how to install it and a
wrapped model encodes as before (with the extra: tests/mteb_extra). (In a fresh process:
tests/driver/test_evaluate_cli.py.)"""

import json
import re
import sys

import numpy as np
import pytest

import cmlm_tf
from cmlm_tf.commands import evaluate, mine
from cmlm_tf.evaluation import bias, mining, pcr, retrieval, sts
from cmlm_tf.evaluation.mteb_adapter import MTEBEncoder
from tests.conftest import TINY_WORDS


def _sentences(count, seed, length=6):
    rng = np.random.default_rng(seed)
    words = [w for w in TINY_WORDS if w.isalpha()]
    return [" ".join(rng.choice(words, size=rng.integers(2, length + 1)))
            for _ in range(count)]


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def loaded(tiny_export):
    return cmlm_tf.load(str(tiny_export))


@pytest.fixture
def model(monkeypatch, tiny_export, loaded):
    """The tiny export, loaded once: the commands below get it from `cmlm_tf.load` too
    (loading itself is covered by the STS test and the fresh-process test)."""
    real_load = cmlm_tf.load
    monkeypatch.setattr(cmlm_tf, "load", lambda export_dir: (
        loaded if export_dir == str(tiny_export) else real_load(export_dir)))
    return loaded


def _run(capsys, argv):
    code = evaluate.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _report(capsys, tmp_path, argv):
    output = tmp_path / "report.json"
    code, out, err = _run(capsys, argv + ["--output", str(output)])
    assert code == 0, err
    report = json.loads(output.read_text(encoding="utf-8"))
    assert report["task"] == argv[0]
    for name, value in report["metrics"].items():
        if isinstance(value, float):
            assert f"{name}" in out  # the printed table lists every metric
    return report


def test_sts_report_equals_library(capsys, tmp_path, tiny_export, loaded):
    model = loaded
    first, second = _sentences(30, 1), _sentences(30, 2)
    gold = np.round(np.linspace(0, 5, 30), 3)
    lines = [f"main-news\tfile\t2012\t{i:04d}\t{g:.3f}\t{a}\t{b}"
             for i, (a, b, g) in enumerate(zip(first, second, gold))]
    lines[3] = lines[3].replace("\t" + first[3], '\t"' + first[3])  # an unbalanced quote
    first[3] = '"' + first[3]
    path = _write(tmp_path / "sts.csv", lines)
    report = _report(capsys, tmp_path, ["sts", "--model", str(tiny_export), "--data", path])
    expected = sts.sts_correlations(model.encode(first), model.encode(second), gold)
    assert report["metrics"]["spearman"] == pytest.approx(expected["spearman"], abs=1e-9)
    assert report["metrics"]["pearson"] == pytest.approx(expected["pearson"], abs=1e-6)
    assert report["metrics"]["num_pairs"] == 30 and report["pcr"] == {"mode": "none"}


def test_sts_and_mine_say_each_encoding_once(capsys, tmp_path, tiny_export, model):
    """Two sides of the same size are two lines that say so, not one line twice."""
    first, second = _sentences(12, 21), _sentences(12, 22)
    lines = [f"main-news\tfile\t2012\t{i:04d}\t{i % 5}.000\t{a}\t{b}"
             for i, (a, b) in enumerate(zip(first, second))]
    code, _, err = _run(capsys, ["sts", "--model", str(tiny_export), "--data",
                                 _write(tmp_path / "sts.csv", lines)])
    assert code == 0, err
    assert err.splitlines() == ["encoding 12 sentences",
                                "encoding 12 more sentences, 24 in all"], err
    code = mine.main(["--model", str(tiny_export), "--src", _write(tmp_path / "s.txt", first),
                      "--tgt", _write(tmp_path / "t.txt", second),
                      "--output", str(tmp_path / "pairs.tsv")])
    err = capsys.readouterr().err
    assert code == 0, err
    encoding = [line for line in err.splitlines() if "encoding" in line]
    assert encoding == ["encoding 12 sentences", "encoding 12 more sentences, 24 in all"], err


def test_retrieval_with_pcr_fit_save_and_reuse(capsys, tmp_path, tiny_export, model):
    src, tgt = _sentences(40, 3), _sentences(40, 4)
    src_file, tgt_file = _write(tmp_path / "src.txt", src), _write(tmp_path / "tgt.txt", tgt)
    pairs_file = _write(tmp_path / "pairs.tsv", [f"{a}\t{b}" for a, b in zip(src, tgt)])
    common = ["retrieval", "--model", str(tiny_export)]
    plain = _report(capsys, tmp_path, common + ["--src", src_file, "--tgt", tgt_file])
    expected = retrieval.retrieval_accuracy(model.encode(src), model.encode(tgt))
    assert plain["metrics"] == expected
    assert _report(capsys, tmp_path, common + ["--pairs", pairs_file])["metrics"] == expected

    pcr_file = tmp_path / "pcr.json"
    fitted = _report(capsys, tmp_path, common + [
        "--pairs", pairs_file, "--pcr", "--save_pcr", str(pcr_file), "--src_lang", "en",
        "--tgt_lang", "es"])
    components = pcr.PCRComponents.load(str(pcr_file))
    assert components.languages == ["en", "es"] and components.dim == 32
    np.testing.assert_allclose(components.component("en"),
                               pcr.first_singular_vector(model.encode(src)), atol=1e-5)
    assert fitted["pcr"] == {"mode": "fitted", "saved_to": str(pcr_file)}
    expected_pcr = retrieval.retrieval_accuracy(components.apply(model.encode(src), "en"),
                                                components.apply(model.encode(tgt), "es"))
    assert fitted["metrics"] == expected_pcr
    reused = _report(capsys, tmp_path, common + [
        "--pairs", pairs_file, "--pcr_file", str(pcr_file), "--src_lang", "en",
        "--tgt_lang", "es"])
    assert reused["metrics"] == expected_pcr and reused["pcr"]["mode"] == "file"


def test_mining_report_equals_library(capsys, tmp_path, tiny_export, model):
    src, tgt = _sentences(30, 5), _sentences(36, 6)
    src_file = _write(tmp_path / "src.tsv", [f"s{i}\t{t}" for i, t in enumerate(src)])
    tgt_file = _write(tmp_path / "tgt.tsv", [f"t{i}\t{t}" for i, t in enumerate(tgt)])
    gold_file = _write(tmp_path / "gold.tsv", [f"s{i}\tt{i}" for i in range(20)])
    report = _report(capsys, tmp_path, ["mining", "--model", str(tiny_export), "--src",
                                        src_file, "--tgt", tgt_file, "--gold", gold_file])
    pairs = mining.mine(model.encode(src), model.encode(tgt), k=4)
    correct = (pairs.src_indices == pairs.tgt_indices) & (pairs.src_indices < 20)
    threshold, expected = mining.best_f1_threshold(pairs.scores, correct, 20)
    metrics = report["metrics"]
    assert metrics["f1"] == pytest.approx(expected["f1"])
    assert metrics["threshold"] == pytest.approx(threshold, rel=1e-5)
    assert metrics["num_candidates"] == len(pairs) and metrics["threshold_choice"] == "best_f1"
    assert set(metrics) >= {"precision", "recall", "f1", "threshold"}
    fixed = _report(capsys, tmp_path, ["mining", "--model", str(tiny_export), "--src",
                                       src_file, "--tgt", tgt_file, "--gold", gold_file,
                                       "--threshold=-1e9", "--margin", "distance"])
    assert fixed["metrics"]["num_kept"] == fixed["metrics"]["num_candidates"]


def test_bias_report_with_and_without_pcr(capsys, tmp_path, tiny_export, model):
    data = tmp_path / "multi"
    data.mkdir()
    texts = {lang: _sentences(12, seed) for lang, seed in (("aa", 7), ("bb", 8), ("cc", 9))}
    for lang, lines in texts.items():
        _write(data / f"{lang}.txt", lines)
    common = ["bias", "--model", str(tiny_export), "--data", str(data), "--langs", "aa,bb,cc",
              "--k", "3"]
    report = _report(capsys, tmp_path, common)
    vectors = {lang: model.encode(lines) for lang, lines in texts.items()}
    expected = bias.same_language_share(vectors, k=3)
    assert report["metrics"]["per_language"] == pytest.approx(expected["per_language"])
    assert report["metrics"]["overall"] == pytest.approx(expected["overall"])
    with_pcr = _report(capsys, tmp_path, common + ["--pcr"])
    expected_pcr = bias.same_language_share(pcr.PCRComponents.fit(vectors).apply_all(vectors),
                                            k=3)
    assert with_pcr["metrics"]["overall"] == pytest.approx(expected_pcr["overall"])


def test_classify_with_cv_and_with_dev(capsys, tmp_path, tiny_export, model):
    def split(seed, count):
        rng = np.random.default_rng(seed)
        lines = []
        for _ in range(count):
            label = rng.choice(["animal", "music"])
            pool = ["dog", "cat", "horse", "snake"] if label == "animal" else [
                "guitar", "flute", "playing"]
            lines.append(f"the {rng.choice(pool)} {rng.choice(pool)} is red\t{label}")
        return _write(tmp_path / f"split{seed}.tsv", lines)

    train, test, dev = split(1, 40), split(2, 20), split(3, 20)
    common = ["classify", "--model", str(tiny_export), "--train", train, "--test", test]
    by_cv = _report(capsys, tmp_path, common)["metrics"]
    assert by_cv["selection"] == "cv" and by_cv["num_labels"] == 2
    assert by_cv["accuracy"] >= 0.8  # the words decide the label
    by_dev = _report(capsys, tmp_path, common + ["--dev", dev])["metrics"]
    assert by_dev["selection"] == "dev" and 0 <= by_dev["accuracy"] <= 1


def test_pcr_task_fits_given_files(capsys, tmp_path, tiny_export, model):
    en, es = _sentences(15, 10), _sentences(20, 11)
    out = tmp_path / "fitted.json"
    code, _, err = _run(capsys, ["pcr", "--model", str(tiny_export), "--input",
                                 "en=" + _write(tmp_path / "en.txt", en), "--input",
                                 "es=" + _write(tmp_path / "es.txt", es), "--save_pcr",
                                 str(out)])
    assert code == 0, err
    components = pcr.PCRComponents.load(str(out))
    np.testing.assert_allclose(components.component("es"),
                               pcr.first_singular_vector(model.encode(es)), atol=1e-5)


def test_mine_writes_sorted_one_to_one_pairs(capsys, tmp_path, tiny_export, model):
    src, tgt = _sentences(25, 12), _sentences(30, 13)
    src_file = _write(tmp_path / "src.txt", src[:10] + [""] + src[10:])  # empty line skipped
    tgt_file = _write(tmp_path / "tgt.txt", tgt)
    output = tmp_path / "pairs.tsv"
    code = mine.main(["--model", str(tiny_export), "--src", src_file, "--tgt", tgt_file,
                      "--output", str(output)])
    assert code == 0, capsys.readouterr().err
    rows = [line.split("\t") for line in output.read_text(encoding="utf-8").splitlines()]
    assert rows and all(len(row) == 3 for row in rows)
    scores = [float(row[0]) for row in rows]
    assert scores == sorted(scores, reverse=True)
    expected = mining.mine(model.encode(src), model.encode(tgt))
    assert len(rows) == len(expected)
    assert [(row[1], row[2]) for row in rows] == [
        (src[i], tgt[j]) for i, j in zip(expected.src_indices, expected.tgt_indices)]
    np.testing.assert_allclose(scores, expected.scores, atol=2e-6)
    # 1-to-1: no sentence is used twice (positions, as the random sentences may repeat).
    assert len(set(expected.src_indices)) == len(set(expected.tgt_indices)) == len(rows)
    threshold = scores[len(scores) // 2]
    code = mine.main(["--model", str(tiny_export), "--src", src_file, "--tgt", tgt_file,
                      "--output", str(output), "--threshold", str(threshold)])
    assert code == 0
    kept = output.read_text(encoding="utf-8").splitlines()
    assert len(kept) == sum(s >= threshold for s in expected.scores)


def test_encode_with_language_removes_that_component(tmp_path, model):
    texts = _sentences(12, 14)
    components = pcr.PCRComponents.fit({"en": model.encode(texts),
                                        "es": model.encode(_sentences(12, 15))})
    expected = components.apply(model.encode(texts), "en")
    np.testing.assert_allclose(model.encode(texts, language="en", pcr=components), expected,
                               atol=1e-6)
    path = tmp_path / "pcr.json"
    components.save(str(path))
    model.set_pcr(str(path))
    try:
        vectors = model.encode(texts, language="en")
        np.testing.assert_allclose(vectors, expected, atol=1e-6)
        np.testing.assert_allclose(vectors @ components.component("en"), 0, atol=1e-6)
        assert model.encode(texts[0], language="es").shape == (32,)
        np.testing.assert_allclose(model.encode(texts), model.encode(texts, language=None))
        with pytest.raises(ValueError, match="no PCR component for language 'de'"):
            model.encode(texts, language="de")
        raw = model.encode(texts, normalize=False, language="en")
        np.testing.assert_allclose(raw @ components.component("en"), 0, atol=1e-4)
    finally:
        model.set_pcr(None)
    with pytest.raises(ValueError, match="needs PCR components"):
        model.encode(texts, language="en")
    with pytest.raises(ValueError, match="pcr= needs language="):
        model.encode(texts, pcr=components)


@pytest.mark.parametrize("argv,message", [
    (["sts", "--data", "{tmp}/missing.csv"], "missing.csv: file not found"),
    (["sts", "--data", "{tmp}/bad.tsv"], r"bad.tsv:2: score 'high' is not a number"),
    (["retrieval", "--src", "{tmp}/a.txt", "--tgt", "{tmp}/b.txt"],
     "b.txt: has 1 lines but .*a.txt has 2"),
    (["retrieval", "--src", "{tmp}/a.txt"], "retrieval needs --src and --tgt, or --pairs"),
    (["retrieval", "--pairs", "{tmp}/bad.tsv", "--save_pcr", "{tmp}/p.json"],
     "--save_pcr needs --pcr"),
    (["retrieval", "--src", "{tmp}/a.txt", "--tgt", "{tmp}/a.txt", "--pcr_file",
      "{tmp}/pcr.json", "--src_lang", "en", "--tgt_lang", "fr"],
     "pcr.json: no PCR component for fr"),
    (["bias", "--data", "{tmp}", "--langs", "a"], "--langs: need at least 2 languages"),
    (["bias", "--data", "{tmp}", "--langs", "a,b"], "not line-aligned"),
    (["mining", "--src", "{tmp}/a.txt", "--tgt", "{tmp}/a.txt", "--gold", "{tmp}/a.txt"],
     r"a.txt:1: expected 2 tab-separated fields \(id, sentence\), got 1"),
    (["classify", "--train", "{tmp}/bad.tsv", "--test", "{tmp}/bad.tsv"],
     r"bad.tsv:1: expected 2 tab-separated fields \(text, label\), got 3"),
    (["sts", "--data", "{tmp}/a.txt", "--batch_size", "0"], "--batch_size must be positive"),
])
def test_bad_input_is_a_one_line_error_with_exit_code_2(capsys, tmp_path, tiny_export, model,
                                                        argv, message):
    _write(tmp_path / "bad.tsv", ["a\tb\t1", "c\td\thigh"])
    _write(tmp_path / "a.txt", ["one", "two"])
    _write(tmp_path / "b.txt", ["uno"])
    pcr.PCRComponents({"en": np.ones(32) / np.sqrt(32)}).save(str(tmp_path / "pcr.json"))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, out, err = _run(capsys, argv[:1] + ["--model", str(tiny_export)] + argv[1:])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert re.search(message, lines[0]), lines[0]


def test_mteb_command_without_mteb_names_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "mteb", None)  # `import mteb` raises ImportError
    assert evaluate.main(["mteb", "--model", str(tmp_path), "--tasks", "STSBenchmark"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: python -m cmlm_tf.evaluate mteb needs MTEB, which is not installed: "
        "pip install 'cmlm_tf[mteb]'"]


def test_loaded_model_without_mteb(monkeypatch, tiny_export):
    model = MTEBEncoder(cmlm_tf.load(str(tiny_export)))
    monkeypatch.setitem(sys.modules, "mteb", None)
    assert not hasattr(model, "mteb_model_meta")
    with pytest.raises(AttributeError, match=r"pip install 'cmlm_tf\[mteb\]'"):
        model.mteb_model_meta  # noqa: B018
    vectors = model.encode(["the dog", "a cat", "the dog"])
    np.testing.assert_allclose(model.similarity_pairwise(vectors[:2], vectors[[2, 1]]),
                               [1.0, 1.0], atol=1e-5)
    # Keywords are checked as before: only an MTEB call (a loader, or MTEB's keywords) takes
    # the extra ones.
    with pytest.raises(TypeError, match="unexpected keyword arguments: normalise"):
        model.encode(["the dog"], normalise=True)


@pytest.mark.parametrize("flags, refused", [
    (["sts", "--data", "{dir}/sts.tsv", "--output", "{dir}/sts.tsv"],
     "--output {dir}/sts.tsv is the --data file {dir}/sts.tsv"),
    (["pcr", "--input", "en={dir}/sts.tsv", "--save_pcr", "{dir}/sts.tsv"],
     "--save_pcr {dir}/sts.tsv is the --input file {dir}/sts.tsv"),
    (["sts", "--data", "{dir}/sts.tsv", "--output", "{dir}/model/report.json"],
     "--output {dir}/model/report.json is inside the --model folder {dir}/model"),
])
def test_an_output_that_is_an_input_is_refused(flags, refused, tmp_path, capsys):
    """`--output` / `--save_pcr` naming an input would replace it: one line, the input kept."""
    (tmp_path / "model").mkdir()
    (tmp_path / "sts.tsv").write_text("a\tb\t1.0\n", encoding="utf-8")
    argv = [flag.format(dir=tmp_path) for flag in flags]
    argv[1:1] = ["--model", str(tmp_path / "model")]
    assert evaluate.main(argv) == 2
    assert capsys.readouterr().err.startswith(f"error: {refused.format(dir=tmp_path)}; "
                                              "cmlm_tf never writes over an input")
    assert (tmp_path / "sts.tsv").read_text(encoding="utf-8") == "a\tb\t1.0\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "sts.tsv"]
