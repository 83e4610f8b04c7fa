"""`--bf16`: `OUT/serving_bf16/1/`, the TF Serving model with bfloat16 matmuls and
activations (`serving_precision`)."""

from cmlm_tf.export.formats.serving_precision import precision_format

FORMAT = precision_format(
    "bf16", "bfloat16",
    help="also write OUT/serving_bf16/1: the TF Serving model with bfloat16 matmuls and "
         "activations (AMX, AVX512-BF16 CPUs)")
