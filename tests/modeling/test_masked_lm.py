"""`MaskedLMPretrainer` and progressive stacking (`stack_from_checkpoint`)."""

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf.modeling import masked_lm
from tests.conftest import tiny_encoder_config


def _trained_like(config, seed):
    model = masked_lm.MaskedLMPretrainer(config).build_variables()
    rng = np.random.default_rng(seed)
    for variable in model.encoder.weights + model.mlm_head.weights:
        variable.assign(rng.normal(0, 0.1, variable.shape).astype(np.float32))
    return model



def _inputs(vocab_size, batch=3, length=10):
    rng = np.random.default_rng(1)
    mask = np.ones([batch, length], np.int32)
    mask[0, 6:] = 0
    return {"input_word_ids": tf.constant(rng.integers(5, vocab_size, [batch, length]),
                                          tf.int32),
            "input_mask": tf.constant(mask), "input_type_ids": tf.zeros([batch, length],
                                                                        tf.int32)}



def test_progressive_stacking_copies_layers_exactly(tmp_path):
    shallow_config = tiny_encoder_config(60, num_layers=2)
    shallow = _trained_like(shallow_config, seed=0)
    prefix = tf.train.Checkpoint(**shallow.checkpoint_items).write(str(tmp_path / "ckpt"))
    deep = masked_lm.MaskedLMPretrainer(shallow_config.replace(num_layers=5)).build_variables()
    assert masked_lm.stack_from_checkpoint(deep, prefix) == 2
    shallow_layers = shallow.encoder.bert.transformer_layers
    for index, layer in enumerate(deep.encoder.bert.transformer_layers):
        for a, b in zip(layer.weights, shallow_layers[index % 2].weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(deep.mlm_head.weights, shallow.mlm_head.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(deep.encoder.bert.get_embedding_table().numpy(),
                                  shallow.encoder.bert.get_embedding_table().numpy())

    # The deeper model differs only through the new layers: the first two layers' outputs
    # are the shallow model's, and each new layer i is old layer i mod 2 applied on top.
    inputs = _inputs(60)
    deep_outputs = deep.encoder(inputs, training=False)["encoder_outputs"]
    shallow_outputs = shallow.encoder(inputs, training=False)["encoder_outputs"]
    for a, b in zip(deep_outputs[:2], shallow_outputs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
    bert = shallow.encoder.bert
    attention_mask = bert._attention_mask_layer(deep_outputs[0], inputs["input_mask"])
    for index in range(2, 5):
        expected = shallow_layers[index % 2]([deep_outputs[index - 1], attention_mask])
        np.testing.assert_allclose(deep_outputs[index].numpy(), expected.numpy(), atol=1e-5)
    assert not np.allclose(deep_outputs[-1].numpy(), shallow_outputs[-1].numpy(), atol=1e-3)



def test_progressive_stacking_errors_name_the_option(tmp_path):
    shallow = masked_lm.MaskedLMPretrainer(tiny_encoder_config(60, num_layers=2))
    shallow.build_variables()
    prefix = tf.train.Checkpoint(**shallow.checkpoint_items).write(str(tmp_path / "ckpt"))
    wider = masked_lm.MaskedLMPretrainer(tiny_encoder_config(60, num_layers=4, hidden_size=48))
    with pytest.raises(ValueError, match=r"task.init_stack_from: .*\(2 layers\) does not fit"
                                         r" task.model.encoder") as error:
        masked_lm.stack_from_checkpoint(wider.build_variables(), prefix)
    assert "\n" not in str(error.value)
    shallower = masked_lm.MaskedLMPretrainer(tiny_encoder_config(60, num_layers=1))
    with pytest.raises(ValueError, match="has 2 layers, more than"):
        masked_lm.stack_from_checkpoint(shallower.build_variables(), prefix)
