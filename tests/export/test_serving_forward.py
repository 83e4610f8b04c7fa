"""`InferenceForward`: the fused forward against a NumPy post-norm BERT, and its precisions."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from scipy.special import erf

from cmlm_tf.export import serving_forward
from cmlm_tf.modeling import sentence_encoder
from cmlm_tf.runtime import internals
from tests.conftest import cosines, tiny_encoder_config


def _encoder(**overrides):
    tf_keras.utils.set_random_seed(5)
    config = tiny_encoder_config(30, hidden_size=8, num_attention_heads=2, intermediate_size=16,
                                 max_position_embeddings=16, initializer_range=0.5,
                                 **overrides)
    return sentence_encoder.build_sentence_encoder(config)


def _numpy_forward(encoder, ids, mask, types):
    """Post-norm BERT in float64 from the encoder's Keras weights: separate query, key and
    value heads, masked softmax, exact GELU, masked mean pooling, tanh projection."""
    def w(variable):
        return variable.numpy().astype(np.float64)

    def layer_norm(x, norm):
        mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(variance + norm.epsilon) * w(norm.gamma) + w(norm.beta)

    bert = encoder.bert
    seq = ids.shape[1]
    x = (w(bert._embedding_layer.embeddings)[ids]
         + w(bert._position_embedding_layer._position_embeddings)[:seq]
         + w(bert._type_embedding_layer.embeddings)[types])
    x = layer_norm(x, bert._embedding_norm_layer)
    for block in bert._transformer_layers:
        attention = block._attention_layer

        def heads(dense, x=x):  # [batch, heads, seq, head_dim]
            return np.einsum("bsw,whd->bhsd", x, w(dense.kernel)) + w(dense.bias)[:, None]

        query, key, value = (heads(attention._query_dense), heads(attention._key_dense),
                             heads(attention._value_dense))
        scores = query @ key.transpose(0, 1, 3, 2) / np.sqrt(query.shape[-1])
        scores = np.where(mask[:, None, None, :] > 0, scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = probs @ value
        attended = (np.einsum("bhsd,hdw->bsw", context, w(attention._output_dense.kernel))
                    + w(attention._output_dense.bias))
        x = layer_norm(x + attended, block._attention_layer_norm)
        inner = x @ w(block._intermediate_dense.kernel) + w(block._intermediate_dense.bias)
        inner = 0.5 * inner * (1.0 + erf(inner / np.sqrt(2.0)))
        output = inner @ w(block._output_dense.kernel) + w(block._output_dense.bias)
        x = layer_norm(x + output, block._output_layer_norm)
    weights = mask[..., None].astype(np.float64)
    pooled = (x * weights).sum(1) / weights.sum(1)
    return np.tanh(pooled @ w(encoder.projection.kernel) + w(encoder.projection.bias))


def test_forward_equals_a_numpy_bert_forward():
    encoder = _encoder(projection_size=6, projection_activation="tanh")
    forward = serving_forward.InferenceForward(encoder, precisions=("float32",))
    rng = np.random.default_rng(2)
    ids = rng.integers(5, 30, size=[3, 7]).astype(np.int32)
    mask = (np.arange(7) < np.array([[7], [4], [1]])).astype(np.int32)
    ids[mask == 0] = 0
    types = (np.arange(7) >= 3).astype(np.int32)[None].repeat(3, axis=0) * mask
    actual = forward(ids, mask, types).numpy()
    expected = _numpy_forward(encoder, ids, mask, types)
    assert actual.shape == expected.shape == (3, 6) and forward.output_dim == 6
    np.testing.assert_allclose(actual, expected, atol=1e-5)


def test_only_the_prepared_precisions_run():
    encoder = _encoder()
    with pytest.raises(ValueError, match=r"precisions must be among .*\['float16'\]"):
        serving_forward.InferenceForward(encoder, precisions=("float32", "float16"))
    forward = serving_forward.InferenceForward(encoder, precisions=("float32",))
    assert forward.precisions == ("float32",) and forward.output_dim == 8
    assert set(forward.layers[0].dense) == {"float32"}
    ids = np.full([1, 4], 7, np.int32)
    with pytest.raises(ValueError, match="precision 'bfloat16' was not prepared"):
        forward(ids, np.ones_like(ids), np.zeros_like(ids), precision="bfloat16")
    both = serving_forward.InferenceForward(encoder)
    full, half = (both(ids, np.ones_like(ids), np.zeros_like(ids), precision=p).numpy()
                  for p in serving_forward.SERVING_PRECISIONS)
    np.testing.assert_allclose(full, forward(ids, np.ones_like(ids), np.zeros_like(ids)),
                               atol=1e-6)
    np.testing.assert_allclose(half, full, atol=5e-2)
    assert np.abs(half - full).max() > 0  # the bfloat16 weights are really used


def _inputs(batch=3, seq=7):
    rng = np.random.default_rng(2)
    ids = rng.integers(5, 30, size=[batch, seq]).astype(np.int32)
    mask = (np.arange(seq) < np.array([[seq], [4], [1]])[:batch]).astype(np.int32)
    return ids * mask, mask, np.zeros_like(ids)


@pytest.mark.skipif(os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0",
                    reason="grappler fuses GELU into the matmul only with oneDNN's kernels")
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_every_dense_layer_runs_as_one_fused_matmul(precision):
    """After grappler, each layer is 4 fused matmuls (query/key/value, attention output and
    feed-forward output with their bias, in float32 the last with its residual too; the
    feed-forward input with its bias and exact GELU), the projection one more, and nothing
    is left of a plain MatMul or BiasAdd; the vectors are the NumPy forward's."""
    encoder = _encoder(projection_size=6, projection_activation="tanh")
    rng = np.random.default_rng(3)
    for weight in encoder.weights:  # no zero bias, which grappler would fold away
        weight.assign(weight + rng.normal(0.0, 0.1, weight.shape).astype(np.float32))
    forward = serving_forward.InferenceForward(encoder, precisions=(precision,))
    spec = tf.TensorSpec([None, None], tf.int32)
    function = tf.function(lambda *ids: forward(*ids, precision=precision))
    counts = internals.optimized_op_counts(function.get_concrete_function(spec, spec, spec))
    layers = len(forward.layers)
    # float32 also takes the feed-forward output's residual into its matmul; in bfloat16 a
    # cast to float32 stands between them.
    residual = layers if precision == "float32" else 0
    assert counts.get("_FusedMatMul[BiasAdd,GeluExact]") == layers, counts
    assert counts.get("_FusedMatMul[BiasAdd,Add]", 0) == residual, counts
    assert counts.get("_FusedMatMul[BiasAdd]") == 3 * layers - residual, counts
    assert counts.get("_FusedMatMul[BiasAdd,Tanh]") == 1, counts  # the projection
    assert "BiasAdd" not in counts and "MatMul" not in counts, counts
    ids = _inputs()
    if precision == "float32":
        expected = _numpy_forward(encoder, *ids)
        assert cosines(function(*ids).numpy(), expected).min() >= 0.99999


def test_int8_forward_is_close_to_float32_and_keeps_no_float_kernels():
    encoder = _encoder(projection_size=6, projection_activation="tanh")
    forward = serving_forward.InferenceForward(encoder, precisions=("float32", "int8"))
    dense = forward.layers[0].dense["int8"]["inner"]
    assert dense.kernel.dtype == tf.int8
    ids = _inputs()
    assert not forward.int8_calibrated
    with pytest.raises(RuntimeError, match="calibrate it first"):
        forward(*ids, precision="int8")
    forward.calibrate_int8(*ids)
    assert forward.int8_calibrated and dense._float_weights is None
    full = forward(*ids).numpy()
    quantized = forward(*ids, precision="int8").numpy()
    assert cosines(quantized, full).min() >= 0.99
    assert np.abs(quantized - full).max() > 0  # the int8 layers are really used


def test_bfloat16_and_int8_kernels_are_graph_constants_up_to_a_size(monkeypatch):
    """NumPy kernels, which each trace makes graph constants (what oneDNN's brgemm kernels
    need, tests/export/test_onednn_kernels.py); float32 ones, and all of a model past
    `CONSTANT_KERNEL_BYTES`, stay variables, with the same vectors."""
    encoder = _encoder()
    forward = serving_forward.InferenceForward(encoder, precisions=("float32", "bfloat16",
                                                                    "int8"))
    dense = forward.layers[0].dense
    assert forward.constant_kernels and isinstance(dense["float32"]["inner"][0], tf.Variable)
    assert dense["bfloat16"]["inner"][0].dtype == tf.bfloat16.as_numpy_dtype
    assert isinstance(dense["int8"]["inner"].kernel, np.ndarray)
    monkeypatch.setattr(serving_forward, "CONSTANT_KERNEL_BYTES", 100)
    kept = serving_forward.InferenceForward(encoder, precisions=("bfloat16", "int8"))
    assert not kept.constant_kernels
    assert isinstance(kept.layers[0].dense["bfloat16"]["inner"][0], tf.Variable)
    assert isinstance(kept.layers[0].dense["int8"]["inner"].kernel, tf.Variable)
    ids = _inputs()
    forward.calibrate_int8(*ids)
    kept.calibrate_int8(*ids)
    for precision in ("bfloat16", "int8"):
        np.testing.assert_array_equal(kept(*ids, precision=precision).numpy(),
                                      forward(*ids, precision=precision).numpy())
