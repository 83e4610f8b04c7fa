"""The machine's side of `encode()`: CPU flags read for bfloat16 and speed figures, the
oneDNN kernels a verbose run names, and TensorFlow's thread settings, which apply only before
its runtime starts."""

import pytest
import tensorflow as tf

import cmlm_tf
from cmlm_tf.runtime import host


def test_native_bfloat16_and_speed_flags_follow_the_cpu_flags(monkeypatch):
    monkeypatch.setattr(host, "cpu_flags", lambda: {"sse4_2", "avx2", "amx_bf16", "fma"})
    assert host.native_bfloat16() is True
    assert host.speed_flags() == ["avx2", "amx_bf16"]
    monkeypatch.setattr(host, "cpu_flags", lambda: {"avx2", "avx512f"})
    assert host.native_bfloat16() is False
    assert host.describe_cpu().endswith("flags: avx2 avx512f")
    monkeypatch.setattr(host, "cpu_flags", lambda: None)
    assert host.native_bfloat16() is None
    assert host.speed_flags() == []
    assert host.describe_cpu().endswith("flags: unknown")


def test_onednn_kernel_counts_count_executions_by_kernel():
    verbose = "\n".join([
        "onednn_verbose,v1,info,oneDNN v3.7.3 (commit N/A)",
        "onednn_verbose,v1,primitive,info,template:operation,engine,primitive,implementation",
        "onednn_verbose,v1,primitive,create:cache_miss,cpu,inner_product,x64:gemm:jit,"
        "forward_training,src:f32::blocked:ab::f0,,,mb8ic32oc64,0.1",
        "onednn_verbose,v1,primitive,exec,cpu,inner_product,x64:gemm:jit,forward_training,"
        "src:f32::blocked:ab::f0 wei:f32::blocked:ba::f0,attr-scratchpad:user,,mb8ic32oc64,0.05",
        "onednn_verbose,v1,primitive,exec,cpu,inner_product,brgemm:avx512_core_bf16,"
        "forward_inference,src:bf16::blocked:ab::f0,,,mb8ic32oc64,0.02",
        "onednn_verbose,v1,primitive,exec,cpu,inner_product,brgemm:avx512_core_bf16,"
        "forward_inference,src:bf16::blocked:ab::f0,attr-post-ops:eltwise_gelu_erf,,mb8,0.02",
        "onednn_verbose,v1,graph,exec,cpu,100002,sdp,MatMul;Add;SoftMax,,in0,strict,dnnl,0.1",
        "onednn_verbose,exec,cpu,reorder,jit:uni,undef,src_f32::blocked:ba:f0,,,32x64,0.01",
        "the model's own output, exec,cpu,inner_product",
    ])
    assert host.onednn_kernel_counts(verbose) == {
        "inner_product x64:gemm:jit forward_training": 1,
        "inner_product brgemm:avx512_core_bf16 forward_inference": 2,
        "reorder jit:uni undef": 1}
    assert host.onednn_kernel_counts("") == {}


def test_negative_thread_counts_are_refused():
    with pytest.raises(ValueError, match="thread counts must be >= 0"):
        host.apply_thread_settings(-1, None)


def test_thread_settings_after_start_are_reported_not_applied(tiny_export):
    tf.constant(1.0) + 1  # TensorFlow's runtime has started
    current = tf.config.threading.get_intra_op_parallelism_threads()
    model = cmlm_tf.load(str(tiny_export), intra_op_threads=current)
    assert model.threads["applied"]
    with pytest.warns(RuntimeWarning, match="not applied"):
        model = cmlm_tf.load(str(tiny_export), intra_op_threads=current + 3)
    assert model.threads == {"intra_op_threads": current + 3, "inter_op_threads": None,
                             "applied": False}
