"""cmlm_tf: train and ship multilingual sentence encoders with TensorFlow."""

__version__ = "0.1.0"


def load(export_dir: str):
    """Loads an export of `python -m export.export_tfhub`; see `cmlm_tf.inference`."""
    from cmlm_tf.inference import load as _load

    return _load(export_dir)


__all__ = ["load", "__version__"]
