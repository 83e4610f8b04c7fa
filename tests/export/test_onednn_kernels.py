"""The oneDNN kernels `serving_bf16/1` and `serving_int8/1` run, read from `ONEDNN_VERBOSE=1`
in a fresh process, as a model server runs them: every dense layer on oneDNN's brgemm
kernels for inference (never its older `gemm:jit` inner product), and no int8 weights
reordered per call.

The kernel names are of one family on every AVX-512 CPU with bfloat16 (`avx512_core_bf16`
here, `avx10_1_512_amx` on AMX), so this holds the AMX path on a machine without AMX."""

import json
import os

import numpy as np
import pytest

from cmlm_tf.commands import export as export_cli
from cmlm_tf.export import int8_dense, serving_forward
from cmlm_tf.runtime import host
from tests.conftest import TINY_EXPORT_SEQ_LENGTH, TINY_WORDS
from tests.export.test_serving import run_child

pytestmark = [
    pytest.mark.skipif(not host.native_bfloat16(),
                       reason="the CPU has no native bfloat16 (neither avx512_bf16 nor "
                              "amx_bf16): oneDNN has no bfloat16 brgemm kernels to pick here"),
    pytest.mark.skipif(os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0",
                       reason="TF_ENABLE_ONEDNN_OPTS=0: TensorFlow runs no oneDNN kernels"),
]
# One request of 64 texts after a warm-up request, then this many requests counted.
CALLS = 3
TEXTS = 64
# The tiny export (`tiny_encoder_config`): 2 layers of 4 dense layers each.
LAYERS, DENSE_PER_LAYER = 2, 4
# Reorders the int8 model ran per layer and sub-batch when its kernels were variables: one
# per dense layer (its weights, every call) and two transposes of the attention heads. For
# this export and request that was 144 over the 3 counted calls.
VARIABLE_KERNEL_INT8_REORDERS = 6


@pytest.fixture(scope="module")
def kernels(tmp_path_factory, tiny_run_dir):
    """precision -> {kernel: runs} of the counted requests of the precision's serving model
    in a tiny export with `--bf16 --int8`."""
    if not int8_dense.available():
        pytest.skip("oneDNN's int8 matmul does not run here")
    out = tmp_path_factory.mktemp("exports") / "kernels"
    assert export_cli.main(["--model_dir", str(tiny_run_dir), "--export_dir", str(out),
                            "--seq_length", str(TINY_EXPORT_SEQ_LENGTH), "--bf16",
                            "--int8"]) == 0
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(TINY_WORDS, size=rng.integers(1, 12)))
             for _ in range(TEXTS)]
    texts_file = out / "texts.json"
    texts_file.write_text(json.dumps(texts), encoding="utf-8")
    results = {precision: run_child("serving_calls_after_warm_up", str(out / folder / "1"),
                                    str(texts_file), str(CALLS), ONEDNN_VERBOSE="1")
               for precision, folder in (("bfloat16", "serving_bf16"), ("int8", "serving_int8"))}
    counts = {}
    for precision, result in results.items():
        assert result.returncode == 0, result.stderr[-2000:]
        counts[precision] = host.onednn_kernel_counts(result.stdout.split("COUNTED", 1)[1])
    return counts


def _sub_batches(precision: str) -> int:
    rows = serving_forward.PRECISION_BUCKET_ROWS.get(precision, serving_forward.BUCKET_ROWS)
    return -(-TEXTS // rows)


def _runs(counts: dict, kind: str) -> dict:
    return {name: runs for name, runs in counts.items() if name.startswith(kind + " ")}


@pytest.mark.parametrize("precision", ["bfloat16", "int8"])
def test_every_dense_layer_runs_on_brgemm_kernels(kernels, precision):
    counts = kernels[precision]
    assert not [name for name in counts if "gemm:jit" in name], counts
    dense = _runs(counts, "inner_product")
    assert all(name.split()[1].startswith("brgemm:") for name in dense), counts
    # Every dense layer of every sub-batch is one of them (its bias and activation fused).
    assert sum(dense.values()) == CALLS * _sub_batches(precision) * LAYERS * DENSE_PER_LAYER
    if precision == "bfloat16":
        assert all(name.endswith(" forward_inference") for name in dense), counts


def test_int8_reorders_no_weights_per_call(kernels):
    reorders = sum(_runs(kernels["int8"], "reorder").values())
    was = CALLS * _sub_batches("int8") * LAYERS * VARIABLE_KERNEL_INT8_REORDERS
    assert reorders <= was // 2, kernels["int8"]
