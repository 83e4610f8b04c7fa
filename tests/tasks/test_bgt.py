"""BGT: the KL terms, the decoders' targets, deterministic encoding, training and export."""

import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
import yaml

from cmlm_tf import configs
from cmlm_tf.losses import gaussian_kl
from cmlm_tf.losses.sequence_nll import sequence_nll
from cmlm_tf.modeling import bgt
from tests.conftest import REPO_DIR, write_bundled_pairs

TINY_OVERRIDES = {
    "task": {
        "model": {"encoder": {"hidden_size": 32, "num_layers": 1, "num_attention_heads": 2,
                              "intermediate_size": 64, "max_position_embeddings": 32,
                              "projection_size": 16}},
        "sp_vocab_size": 20000,  # far more than 300 pairs hold: the vocabulary adapts down
        "bgt": {"kl_anneal_steps": 20},
        "train_data": {"global_batch_size": 16, "seq_length": 24, "shuffle_buffer_size": 300},
        "validation_data": {"global_batch_size": 16, "seq_length": 24},
    },
    "trainer": {"train_steps": 80, "steps_per_loop": 40, "summary_interval": 40,
                "checkpoint_interval": 80, "optimizer_config": {
                    "learning_rate": {"power": {"initial_learning_rate": 0.02}},
                    "warmup": {"linear": {"warmup_steps": 10}}}},
}


def tiny_config(vocab_size: int = 50) -> configs.EncoderConfig:
    return configs.EncoderConfig(
        vocab_size=vocab_size, hidden_size=16, num_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, projection_size=8,
        dropout_rate=0.1, attention_dropout_rate=0.1)


def sentences(first_ids, length: int = 6):
    """A batch packed like `BitextFeaturizer` output: `[CLS]` = 2, `[SEP]` = 3, pad 0."""
    rows = []
    for first in first_ids:
        rows.append([2] + [first + i for i in range(length - 3)] + [3, 0])
    ids = tf.constant(rows, tf.int32)
    return {"input_word_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32),
            "input_type_ids": tf.zeros_like(ids)}


def test_kl_weight_rises_linearly_then_stays_at_one():
    values = [float(gaussian_kl.kl_weight(step, 400)) for step in (0, 100, 200, 400, 10_000)]
    assert values == pytest.approx([0.0, 0.25, 0.5, 1.0, 1.0])
    assert float(gaussian_kl.kl_weight(7, 0)) == 1.0


def test_gaussian_kl_equals_closed_form():
    # N((2, 0), diag(1, 4)) against N(0, I): 1/2 * 2^2 + 1/2 * (4 - 1 - log 4).
    mean = tf.constant([[2.0, 0.0], [0.0, 0.0]])
    log_variance = tf.constant([[0.0, math.log(4.0)], [0.0, 0.0]])
    kl = gaussian_kl.gaussian_kl(mean, log_variance).numpy()
    np.testing.assert_allclose(kl, [2.0 + 0.5 * (3.0 - math.log(4.0)), 0.0], rtol=1e-6)
    # And a Monte-Carlo estimate of E_q[log q - log p] agrees.
    rng = np.random.default_rng(0)
    std = np.array([1.0, 2.0])
    z = np.array([2.0, 0.0]) + std * rng.standard_normal((200_000, 2))
    log_q = -0.5 * (((z - [2.0, 0.0]) / std) ** 2) - np.log(std)
    log_p = -0.5 * z ** 2
    assert abs((log_q - log_p).sum(axis=1).mean() - kl[0]) < 0.02


def test_label_smoothing_and_active_units():
    logits = tf.math.log(tf.constant([[[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3]]]))
    targets, weights = tf.constant([[0, 2]]), tf.constant([[1.0, 0.0]])
    np.testing.assert_allclose(sequence_nll(logits, targets, weights), [math.log(2.0)],
                               rtol=1e-6)
    smoothed = 0.9 * math.log(2.0) + 0.1 * (math.log(2.0) + 2 * math.log(4.0)) / 3
    np.testing.assert_allclose(sequence_nll(logits, targets, weights, 0.1), [smoothed],
                               rtol=1e-6)
    means = tf.constant([[0.0, 1.0, 5.0], [0.0, -1.0, 5.05], [0.0, 1.0, 5.0]])
    assert float(bgt.active_units(means, 0.01)) == 1.0


def test_decoders_predict_their_own_language_from_the_intended_latents():
    tf.random.set_seed(0)
    model = bgt.build_bgt(tiny_config())
    source, target = sentences([10, 11]), sentences([30, 31])
    outputs = model({"source": source, "target": target}, training=False)
    decoders = outputs["decoders"]
    assert set(decoders) == set(bgt.RECONSTRUCTION_DECODERS + bgt.TRANSLATION_DECODERS)
    source_next = source["input_word_ids"][:, 1:].numpy()
    target_next = target["input_word_ids"][:, 1:].numpy()
    for name in ("source_reconstruction", "target_to_source"):
        np.testing.assert_array_equal(decoders[name]["targets"], source_next)
    for name in ("target_reconstruction", "source_to_target"):
        np.testing.assert_array_equal(decoders[name]["targets"], target_next)
    np.testing.assert_array_equal(decoders["source_to_target"]["weights"],
                                  target["input_mask"][:, 1:])
    assert outputs["semantic_from_source"].numpy().tolist() == [True, False]

    # Another Spanish side, same English: the English reconstruction of row 0 (z_sem from
    # English) is unchanged, row 1's (z_sem from Spanish) moves; English -> Spanish
    # translation reads its latent from English only, so only its decoder input changed.
    other = model({"source": source, "target": sentences([40, 41])}, training=False)
    logits = decoders["source_reconstruction"]["logits"].numpy()
    moved = other["decoders"]["source_reconstruction"]["logits"].numpy()
    np.testing.assert_allclose(moved[0], logits[0], atol=1e-6)
    assert np.abs(moved[1] - logits[1]).max() > 1e-4
    np.testing.assert_allclose(other["semantic"]["source"]["mean"],
                               outputs["semantic"]["source"]["mean"], atol=1e-6)
    # Another English side: the English -> Spanish decoder (same Spanish input) changes.
    third = model({"source": sentences([20, 21]), "target": target}, training=False)
    assert np.abs(third["decoders"]["source_to_target"]["logits"].numpy()
                  - decoders["source_to_target"]["logits"].numpy()).max() > 1e-4


def test_ablations_drop_what_they_say():
    tf.random.set_seed(0)
    pair = {"source": sentences([10, 11]), "target": sentences([30, 31])}
    no_language = bgt.build_bgt(tiny_config(), language_variables=False)(pair)
    assert "language" not in no_language and "language_source" not in no_language["kl"]
    translation_only = bgt.build_bgt(tiny_config(), reconstruction=False)(pair)
    assert set(translation_only["decoders"]) == set(bgt.TRANSLATION_DECODERS)
    with pytest.raises(ValueError, match="projection_size"):
        bgt.build_bgt(tiny_config().replace(projection_size=0))


def test_encoding_is_deterministic_at_inference_and_sampled_in_training():
    tf.random.set_seed(0)
    model = bgt.build_bgt(tiny_config())
    pair = {"source": sentences([10, 11]), "target": sentences([30, 31])}
    first, second = model.encode(pair["source"]), model.encode(pair["source"])
    np.testing.assert_array_equal(first, second)
    eval_outputs = model(pair, training=False)
    np.testing.assert_allclose(eval_outputs["semantic"]["source"]["mean"], first, atol=1e-6)
    # Outside training the decoders read the posterior means: two passes agree exactly.
    for name, decoder in eval_outputs["decoders"].items():
        np.testing.assert_array_equal(
            decoder["logits"], model(pair, training=False)["decoders"][name]["logits"])
    # The exported item is the semantic encoder with its mean head.
    exported = model.checkpoint_items["encoder"](pair["source"], training=False)
    np.testing.assert_allclose(exported["pooled_output"], first, atol=1e-6)
    np.testing.assert_allclose(tf.norm(exported["default"], axis=-1), 1.0, rtol=1e-5)
    # Training samples z: two training passes decode from different latents.
    a = model(pair, training=True)["decoders"]["source_to_target"]["logits"]
    b = model(pair, training=True)["decoders"]["source_to_target"]["logits"]
    assert np.abs(a.numpy() - b.numpy()).max() > 1e-4


@pytest.fixture(scope="module")
def tiny_bgt_run(tmp_path_factory):
    """`cmlm_tf/bgt` trained through the driver for 80 steps on 300 bundled pairs."""
    from cmlm_tf import train

    folder = tmp_path_factory.mktemp("bgt")
    pairs = write_bundled_pairs(folder / "pairs.tsv", 300)
    params = train.build_params("cmlm_tf/bgt", [str(REPO_DIR / "configs" / "bgt_tiny.yaml")])
    params = params.replace(**TINY_OVERRIDES)
    params.override({"task": {"train_data": {"input_path": str(pairs)},
                              "validation_data": {"input_path": str(pairs)}}})
    params.lock()
    model_dir = folder / "run"
    tf_keras.utils.set_random_seed(1)
    model, _ = train.run(params, str(model_dir), mode="train")
    return params, model_dir, model


def test_tiny_bgt_loss_falls_on_real_pairs(tiny_bgt_run):
    from official.core import task_factory

    params, model_dir, trained = tiny_bgt_run
    # The vocabulary was trained at start-up, adapted down, and recorded for export.
    recorded = yaml.safe_load((model_dir / "params.yaml").read_text())["task"]["model"]
    assert recorded["tokenizer"]["sp_model_file"] == str(model_dir / "sp.model")
    assert (model_dir / "sp.model").exists()
    assert 50 < recorded["encoder"]["vocab_size"] < 20000

    task = task_factory.get_task(params.task, logging_dir=str(model_dir))
    assert task.task_config.model.encoder.vocab_size == recorded["encoder"]["vocab_size"]
    batch = next(iter(task.build_inputs(task.task_config.validation_data)))
    tf_keras.utils.set_random_seed(1)
    untrained = task.build_model()
    before = task.compute_losses(batch, untrained(batch, training=False))
    after = task.compute_losses(batch, trained(batch, training=False))
    for name in ("loss", "reconstruction_loss", "translation_loss"):
        assert float(after[name]) < 0.8 * float(before[name]), name
    assert float(after["kl_weight"]) == 1.0  # evaluation reports the full ELBO


def test_tiny_bgt_exports_its_posterior_mean(tiny_bgt_run, tmp_path):
    import tensorflow_hub as hub
    import tensorflow_text  # noqa: F401

    import cmlm_tf
    from cmlm_tf.export import export_lib

    _, model_dir, trained = tiny_bgt_run
    export_dir = export_lib.export(str(tmp_path / "bgt"), model_dir=str(model_dir))
    preprocessor = hub.KerasLayer(f"{export_dir}/preprocessor")
    encoder = hub.KerasLayer(f"{export_dir}/encoder")
    texts = ["In the beginning was the Word.", "En el principio era el Verbo."]
    inputs = preprocessor(tf.constant(texts))
    outputs = encoder(inputs)
    np.testing.assert_allclose(outputs["pooled_output"], trained.encode(inputs), atol=1e-5)
    np.testing.assert_allclose(tf.norm(outputs["default"], axis=-1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(encoder(inputs)["default"], outputs["default"])
    vectors = cmlm_tf.load(export_dir).encode(texts)
    np.testing.assert_allclose(vectors, outputs["default"], atol=1e-5)


def test_building_the_task_learns_and_writes_nothing(tmp_path):
    from cmlm_tf.tasks import bgt as bgt_task

    config = bgt_task.BgtTaskConfig()
    config.model.tokenizer.type = "sentencepiece"
    config.train_data.input_path = str(write_bundled_pairs(tmp_path / "pairs.tsv", 50))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    task = bgt_task.BgtTask(config, logging_dir=str(run_dir))
    assert list(run_dir.iterdir()) == []  # the driver's vocabulary step learns sp.model
    assert task.task_config.model.tokenizer.sp_model_file == ""


def test_a_resumed_run_reuses_its_sentencepiece_model(tmp_path, tiny_sp_model):
    import shutil

    from cmlm_tf import train

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(tiny_sp_model, run_dir / "sp.model")
    params = train.build_params("cmlm_tf/bgt", [str(REPO_DIR / "configs" / "bgt_tiny.yaml")],
                                f"task.train_data.input_path={tmp_path / 'missing.tsv'}")
    prepared = train.prepare_vocabulary(params, str(run_dir))  # no data read: nothing learned
    tokenizer = prepared.task.model.tokenizer
    assert tokenizer.sp_model_file == str(run_dir / "sp.model")
    assert 8 <= prepared.task.model.encoder.vocab_size <= 200
    assert params.task.model.tokenizer.sp_model_file == ""  # the caller's params unchanged
    assert train.prepare_vocabulary(prepared, str(run_dir)) is prepared


def test_sentencepiece_errors_name_the_field(tmp_path):
    from cmlm_tf import tokenization

    with pytest.raises(ValueError, match="sp_model_file is empty"):
        tokenization.build_tokenizer(configs.TokenizerConfig(type="sentencepiece"))
    with pytest.raises(FileNotFoundError, match="task.model.tokenizer.sp_model_file"):
        tokenization.build_tokenizer(configs.TokenizerConfig(
            type="sentencepiece", sp_model_file=str(tmp_path / "missing.model")))
