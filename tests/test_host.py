"""The machine's side of `encode()`: CPU flags read for bfloat16 and speed figures, and
TensorFlow's thread settings, which apply only before its runtime starts."""

import pytest

import cmlm_tf
from cmlm_tf import host


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


def test_negative_thread_counts_are_refused():
    with pytest.raises(ValueError, match="thread counts must be >= 0"):
        host.apply_thread_settings(-1, None)


def test_thread_settings_after_start_are_reported_not_applied(tiny_export):
    import tensorflow as tf

    tf.constant(1.0) + 1  # TensorFlow's runtime has started
    current = tf.config.threading.get_intra_op_parallelism_threads()
    model = cmlm_tf.load(str(tiny_export), intra_op_threads=current)
    assert model.threads["applied"]
    with pytest.warns(RuntimeWarning, match="not applied"):
        model = cmlm_tf.load(str(tiny_export), intra_op_threads=current + 3)
    assert model.threads == {"intra_op_threads": current + 3, "inter_op_threads": None,
                             "applied": False}
