"""TF-Text's ops, registered for whoever imports cmlm_tf.

cmlm_tf's `preprocessor/` and `serving/1` SavedModels tokenize with TF-Text ops, which
TensorFlow knows only once `tensorflow_text` is imported. `import cmlm_tf` arranges that:
at once when TensorFlow is already imported, else right after TensorFlow's own import
finishes (a one-time import hook), so `import cmlm_tf` stays free of TensorFlow and its
commands check their arguments before loading it. After that, `hub.KerasLayer(path)` and
`tf.saved_model.load(path)` read the exports without an explicit `import tensorflow_text`.
"""

import importlib.abc
import importlib.util
import sys
import warnings

_TENSORFLOW = "tensorflow"


def register_with_tensorflow() -> None:
    """Registers TF-Text's ops now, or as soon as TensorFlow has been imported."""
    if _TENSORFLOW in sys.modules:
        _register()
    elif not any(isinstance(finder, _AfterTensorFlow) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterTensorFlow())


def _register() -> None:
    try:
        import tensorflow_text  # noqa: F401  (registers the ops on import)
    except ImportError as error:
        warnings.warn(
            f"cmlm_tf: import tensorflow_text failed ({error}); the exports' preprocessor/ "
            "and serving/1 need its ops: pip install 'tensorflow-text~=2.20.0', then "
            "import tensorflow_text before loading them", RuntimeWarning, stacklevel=2)


class _AfterTensorFlow(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` with the other finders and wraps its loader so TF-Text's ops are
    registered once TensorFlow's module has run; then leaves `sys.meta_path`."""

    def find_spec(self, name, path=None, target=None):
        if name != _TENSORFLOW:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRegister(spec.loader)
        return spec


class _ThenRegister(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _register()

    def __getattr__(self, name):  # get_resource_reader, is_package, ... of the real loader
        return getattr(self._loader, name)
