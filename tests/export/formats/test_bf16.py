"""`--bf16` (`cmlm_tf/export/formats/bf16.py`)."""

from cmlm_tf.export.formats import bf16


def test_bf16_writes_the_bfloat16_serving_model(precision_export):
    assert bf16.FORMAT.flag == "--bf16" and bf16.FORMAT.recorded
    assert bf16.FORMAT.outputs == ("serving_bf16/1/saved_model.pb",)
    assert (precision_export / bf16.FORMAT.outputs[0]).is_file()
