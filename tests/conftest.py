"""The suite's root: the environment TensorFlow must start in, the two logical CPU devices,
and the shared fixtures and helpers, which live by job in tests/fixtures/ (`models`, `exports`,
`tasks`, `processes`, `disk`, `paths`). Their fixtures reach every test through
`pytest_plugins`; their helpers are imported from here (`from tests.conftest import
tiny_encoder_config`)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# XLA's CPU backend spends most of a compile in LLVM optimisation; the compiled steps of the
# tests are tiny, so the cheapest backend settings keep a compile at seconds instead of tens
# of seconds. Read at the first XLA compile of the process.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 "
                                   "--xla_llvm_disable_expensive_passes=true")

import importlib.util  # noqa: E402

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

# The fixture modules' asserts report their values, as a conftest's do: imported below (the
# helpers), they must be marked for pytest's assert rewriting first.
pytest.register_assert_rewrite("tests.fixtures")

from threadpoolctl import threadpool_limits  # noqa: E402

from cmlm_tf.runtime import tf_logs  # noqa: E402
from tests.fixtures.disk import fill_disk  # noqa: E402
from tests.fixtures.exports import (  # noqa: E402
    COMPOSITIONS,
    TINY_EXPORT_SEQ_LENGTH,
    built_once,
    cosines,
    preprocessor_ids,
)
from tests.fixtures.models import (  # noqa: E402
    TINY_WORDS,
    check_vocab_format,
    tiny_encoder_config,
    write_bundled_pairs,
    write_tiny_vocab,
)
from tests.fixtures.paths import REPO_DIR, SHARED_DATA, TESTS_DIR  # noqa: E402
from tests.fixtures.processes import (  # noqa: E402
    cli_env,
    imported_modules,
    load_script,
    one_error_line,
    run_child,
    sigint_as_in_a_terminal,
    subprocess_env,
)
from tests.fixtures.tasks import (  # noqa: E402
    MOCO_VOCAB_SIZE,
    TINY_CMLM_OVERRIDES,
    TINY_TRAIN,
    moco_batch,
    random_token_inputs,
    tiny_cmlm_config,
    tiny_moco_task,
    tiny_train_command,
    validation_scalars,
    write_byte_lines,
    write_corpus,
    write_tiny_bitext,
)

# The fixture modules: each defines fixtures (found by name) besides its helpers. They are
# imported before `pytest_configure`: nothing in them may start TensorFlow's devices.
pytest_plugins = ["tests.fixtures.models", "tests.fixtures.exports", "tests.fixtures.tasks",
                  "tests.fixtures.processes", "tests.fixtures.disk"]

# The helpers the tests import from here, besides `FakeClock`.
__all__ = [
    "COMPOSITIONS", "MOCO_VOCAB_SIZE", "REPO_DIR", "SHARED_DATA", "TESTS_DIR",
    "TINY_CMLM_OVERRIDES", "TINY_EXPORT_SEQ_LENGTH", "TINY_TRAIN", "TINY_WORDS", "FakeClock",
    "built_once", "check_vocab_format", "cli_env", "cosines", "fill_disk", "imported_modules",
    "load_script", "moco_batch", "one_error_line", "preprocessor_ids", "random_token_inputs",
    "run_child", "sigint_as_in_a_terminal", "subprocess_env", "tiny_cmlm_config",
    "tiny_encoder_config", "tiny_moco_task", "tiny_train_command", "validation_scalars",
    "write_bundled_pairs", "write_byte_lines", "write_corpus", "write_tiny_bitext",
    "write_tiny_vocab",
]

# tests/mteb_extra needs the `mteb` extra, tests/onnx_extra sentence-transformers' ONNX
# backend (Optimum); CI runs each in a venv of its own (.ci/run).
collect_ignore = ([] if importlib.util.find_spec("mteb") else ["mteb_extra"]) + (
    [] if importlib.util.find_spec("optimum") else ["onnx_extra"])


@pytest.fixture
def one_blas_thread():
    """NumPy's and scikit-learn's BLAS on one thread for the test: a tiny fit on several
    threads only contends for the cores (30 times slower on 2 busy cores)."""
    with threadpool_limits(1):
        yield


class FakeClock:
    """A clock for code that takes one (`clock=`): returns `now`, which the test moves."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def pytest_configure(config):
    """Two logical CPU devices for the whole session, split before TensorFlow places anything:
    the `two_replicas` fixture is a MirroredStrategy over them, so two-replica tests run in
    this process. Everything else places on the first one (the default strategy, and the
    driver's strategy for `mirrored` without GPUs, name /cpu:0 alone). pytest-xdist's
    controller runs no test and leaves the devices alone. Listing them logs CUDA's spurious
    `failed call to cuInit` where there is no GPU, before pytest captures anything: the
    line is dropped here, as the package drops it (`tf_logs`)."""
    if getattr(config.option, "numprocesses", None) and "PYTEST_XDIST_WORKER" not in os.environ:
        return
    with tf_logs.filtered_cpp_logs(min_level=3):
        tf.config.set_logical_device_configuration(
            tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration()] * 2)


@pytest.fixture(scope="session")
def two_replicas():
    """A MirroredStrategy over the two logical CPU devices."""
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
