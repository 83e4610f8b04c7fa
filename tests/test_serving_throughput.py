"""benchmarks/serving_throughput.py `--kernels`: the oneDNN kernels of one pass of a system,
counted in a worker whose stdout (where oneDNN prints) goes to a file while its answers
still reach the benchmark."""

import argparse
import json
import sys

from tests.conftest import REPO_DIR, load_script


def test_kernels_of_one_pass_of_a_serving_system(tiny_export, tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO_DIR / "benchmarks"))
    script = load_script("benchmarks/serving_throughput.py")
    texts = ["a dog", "the man is playing a guitar", "hello world", "", "a b c d e f"] * 2
    texts_file = tmp_path / "texts.json"
    texts_file.write_text(json.dumps(texts), encoding="utf-8")
    args = argparse.Namespace(
        model=str(tiny_export), baseline_model=None, system_list=["serving"], batch_size=5,
        threads=None, st_model=None, st_python=sys.executable, st_int8_python=None,
        cap_isa=None, work=str(tmp_path))
    counts = script.kernel_counts(args, str(texts_file))["serving"]
    assert capsys.readouterr().out == "counted the oneDNN kernels of serving\n"
    dense = {name: runs for name, runs in counts.items() if name.startswith("inner_product ")}
    # The counted pass only: 2 requests of 5 texts, each one sub-batch, 2 layers of 4 dense
    # layers.
    assert sum(dense.values()) == 2 * 2 * 4, counts
    script.print_kernel_counts({"serving": counts, "tflite_int8": {}}, len(texts), 5)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("oneDNN kernels of one pass over the 10 texts in batches of 5")
    name, runs = max(dense.items(), key=lambda item: item[1])
    assert f"    {runs:8d}  {name}" in printed
    assert printed[-1] == "  tflite_int8: none (no oneDNN)"
