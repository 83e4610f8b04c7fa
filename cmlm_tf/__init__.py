"""cmlm_tf: train and ship multilingual sentence encoders with TensorFlow."""

__version__ = "0.2.0"


def load(export_dir: str, **kwargs):
    """Loads an export of `python -m cmlm_tf.export`; see `cmlm_tf.inference.load`
    for the keyword arguments (`precision`, `intra_op_threads`, `inter_op_threads`,
    `jit_compile`)."""
    from cmlm_tf.inference import load as _load

    return _load(export_dir, **kwargs)


__all__ = ["load", "__version__"]
