"""NLI finetuning: the moco multitask, the recipes. (The MNLI/XNLI converter:
tests/commands/test_convert_nli.py; the driver on a generated task:
tests/driver/test_train_nli.py.)"""


import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf.driver import train_lib
from cmlm_tf.modeling import pair_classifier
from tests.conftest import (
    REPO_DIR,
    moco_batch,
    tiny_moco_task,
    write_byte_lines,
)


def _nli_batch(rows, seed):
    pairs = moco_batch(rows, seed)
    return {"premise": pairs["source"], "hypothesis": pairs["target"],
            "label": tf.constant(np.arange(rows) % 3, tf.int32)}


def test_multitask_loss_is_moco_plus_alpha_nli(tmp_path):
    nli_file = write_byte_lines(tmp_path / "nli.tsv", [b"a\tb\tneutral"])
    task = tiny_moco_task(queue_size=12)
    task.task_config.nli_data.input_path = nli_file
    assert task.task_config.nli_weight == 0.1
    assert task.task_config.nli_data.global_batch_size == 128
    assert task.task_config.nli_head.hidden_sizes == [256]
    model = task.build_model()
    assert "nli_head" in model.checkpoint_items
    inputs = dict(moco_batch(4, seed=1), nli=_nli_batch(6, seed=2))
    outputs = model(inputs, training=False)
    losses = task.compute_losses(inputs, outputs)

    logits = outputs["nli_logits"].numpy().astype(np.float64)
    labels = inputs["nli"]["label"].numpy()
    log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    expected_nli = -log_probs[np.arange(6), labels].mean()
    np.testing.assert_allclose(losses["nli_loss"].numpy(), expected_nli, rtol=1e-5)
    without_nli = task.compute_losses(
        inputs, {k: v for k, v in outputs.items() if k != "nli_logits"})
    np.testing.assert_allclose(losses["contrastive_loss"].numpy(),
                               without_nli["loss"].numpy(), rtol=1e-6)
    np.testing.assert_allclose(losses["loss"].numpy(),
                               without_nli["loss"].numpy() + 0.1 * expected_nli, rtol=1e-5)

    # The NLI term trains the shared query encoder and the head, not the key encoder.
    with tf.GradientTape() as tape:
        nli_only = task.compute_losses(inputs, model(inputs, training=False))["nli_loss"]
    grads = tape.gradient(nli_only, model.encoder.trainable_variables
                          + model.pair_head.trainable_variables)
    assert all(g is not None for g in grads)
    assert not model.key_encoder.trainable_variables

    task.task_config.nli_weight = 0.0
    with pytest.raises(ValueError, match="task.nli_weight must be positive"):
        task.build_model()


def test_recipes_load_and_config_errors_name_the_field():
    moco = train_lib.build_params("cmlm_tf/moco", [str(REPO_DIR / "configs/moco_bert_base.yaml"),
                                               str(REPO_DIR / "configs/moco_nli.yaml")])
    assert (moco.task.nli_weight, moco.task.nli_data.global_batch_size) == (0.1, 128)
    assert moco.task.nli_head.hidden_sizes == [256]
    crossed = train_lib.build_params("cmlm_tf/nli",
                                     [str(REPO_DIR / "configs/nli_cross_lingual_base.yaml")])
    assert crossed.task.train_data.cross_lingual and not crossed.task.nli_head.hidden_sizes
    with pytest.raises(ValueError, match="task.nli_head.dropout_rate must be in"):
        pair_classifier.build_head(pair_classifier.NLIHeadConfig(dropout_rate=1.5))
