"""cmlm_tf: train and ship multilingual sentence encoders with TensorFlow."""

__version__ = "0.2.0"

# TensorFlow's C++ start-up lines ("failed call to cuInit", oneDNN notices) are noise for a
# user of the Python API as for the commands: quiet them before TensorFlow is imported,
# unless TF_CPP_MIN_LOG_LEVEL is set (TF_CPP_MIN_LOG_LEVEL=0 brings every line back).
from cmlm_tf.runtime.tf_logs import quiet_tensorflow_logs as _quiet_tensorflow_logs  # noqa: E402

_quiet_tensorflow_logs()

# TF-Text's ops, which the exports' tokenizers use, are registered once TensorFlow loads.
from cmlm_tf.text.text_ops import register_with_tensorflow as _register_text_ops  # noqa: E402

_register_text_ops()


def load(export_dir: str, **kwargs):
    """Loads an export of `python -m cmlm_tf.export`; see `cmlm_tf.inference.load`
    for the keyword arguments (`precision`, `intra_op_threads`, `inter_op_threads`,
    `jit_compile`)."""
    from cmlm_tf.inference import load as _load

    return _load(export_dir, **kwargs)


__all__ = ["load", "__version__"]
