"""Tests of `python -m cmlm_tf.convert_nli`: MNLI to the NLI reader's TSV, and XNLI aligned by
pair across languages."""

from cmlm_tf.commands import convert_nli
from cmlm_tf.data import nli


def test_converter_reads_mnli_and_aligns_xnli_by_pair(tmp_path):
    mnli = tmp_path / "mnli.txt"
    mnli.write_text(
        "gold_label\tsentence1_parse\tsentence1\tsentence2\tpairID\n"
        "neutral\t(x)\tA man.\tA tall man.\t1\n"
        "-\t(x)\tNo consensus.\tNone.\t2\n"
        "contradiction\t(x)\tA dog.\tNo  dog.\t3\n", encoding="utf-8")
    out = tmp_path / "out" / "mnli.tsv"
    assert convert_nli.main([str(mnli), str(out)]) == 0
    assert out.read_text(encoding="utf-8").splitlines() == [
        "A man.\tA tall man.\tneutral", "A dog.\tNo dog.\tcontradiction"]

    xnli = tmp_path / "xnli.tsv"
    xnli.write_text(
        "language\tgold_label\tsentence1\tsentence2\tpairID\n"
        "en\tentailment\tHi.\tHello.\t1\nes\tentailment\tHola.\tBuenas.\t1\n"
        "en\tneutral\tRain.\tCold.\t2\n"                      # no Spanish side: dropped
        "es\tcontradiction\tSol.\tLluvia.\t3\nen\tcontradiction\tSun.\tRain.\t3\n",
        encoding="utf-8")
    counts = convert_nli.convert(str(xnli), str(tmp_path / "x"), by_language=True)
    assert counts == {"written": 2, "dropped": 1, "files": 2}
    english = (tmp_path / "x.en.tsv").read_text(encoding="utf-8").splitlines()
    spanish = (tmp_path / "x.es.tsv").read_text(encoding="utf-8").splitlines()
    assert english == ["Hi.\tHello.\tentailment", "Sun.\tRain.\tcontradiction"]
    assert spanish == ["Hola.\tBuenas.\tentailment", "Sol.\tLluvia.\tcontradiction"]
    assert nli.scan_nli([str(tmp_path / "x.en.tsv"), str(tmp_path / "x.es.tsv")],
                        cross_lingual=True).examples == 2


def test_an_output_that_is_the_input_is_refused(tmp_path, capsys):
    source = tmp_path / "mnli.tsv"
    source.write_text("sentence1\tsentence2\tgold_label\na\tb\tentailment\n", encoding="utf-8")
    assert convert_nli.main([str(source), str(source)]) == 2
    assert capsys.readouterr().err.startswith(f"error: output {source} is the input file "
                                              f"{source}; cmlm_tf never writes over an input")
    assert source.read_text(encoding="utf-8").endswith("a\tb\tentailment\n")
