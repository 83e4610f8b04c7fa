"""TensorFlow's C++ log level, set before TensorFlow is imported. The package runs this at
its own import (`cmlm_tf/__init__.py`), so it imports nothing of the package: TensorFlow's
start-up lines ("failed call to cuInit", oneDNN notices) are noise for a user of the Python
API as for the commands."""

import os


def quiet_tensorflow_logs() -> None:
    """Sets TensorFlow's C++ log level before TensorFlow is imported, unless the user did.

    Level 2 hides INFO and WARNING lines (oneDNN, CPU features, "Could not find cuda
    drivers"). On a machine without an NVIDIA driver, level 3: TensorFlow 2.20 logs a
    spurious ERROR, "failed call to cuInit", at start-up there (tensorflow/tensorflow#105022),
    and C++ errors that matter reach Python as exceptions. `TF_CPP_MIN_LOG_LEVEL=0` shows
    everything again.
    """
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return
    has_nvidia_driver = os.path.exists("/proc/driver/nvidia/version") or \
        os.path.exists("/dev/nvidia0")
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2" if has_nvidia_driver else "3"
