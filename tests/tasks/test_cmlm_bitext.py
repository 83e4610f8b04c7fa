"""The CMLM + bitext multitask (`cmlm_tf/cmlm_bitext`): the weighted losses, the cached ranking
step, and stage two restoring stage one."""

import numpy as np
import tensorflow as tf
import tf_keras

from cmlm_tf import configs
from cmlm_tf.tasks import bitext as bitext_task
from cmlm_tf.tasks import cmlm, cmlm_bitext
from tests.conftest import tiny_cmlm_config, write_corpus, write_tiny_bitext


def _as_multitask(cmlm_config):
    config = cmlm_bitext.CMLMBitextTaskConfig()
    config.override(cmlm_config.as_dict())
    return config


def test_alpha_weights_the_two_losses(tmp_path, tiny_vocab):
    corpus = write_corpus(tmp_path / "c.txt", [["the dog", "a cat", "a man"]] * 8)
    config = _as_multitask(tiny_cmlm_config(tiny_vocab, corpus))
    config.bitext_data.override(dict(input_path=str(write_tiny_bitext(tmp_path / "bitext.tsv")),
                                     global_batch_size=8, seq_length=8, seed=1))
    values = {}
    for alpha in (0.2, 0.5):
        config.bitext_weight = alpha
        task = cmlm_bitext.CMLMBitextTask(config)
        tf_keras.utils.set_random_seed(0)
        model = task.build_model()
        batch = next(iter(task.build_inputs(config.train_data)))
        losses = task.compute_losses(batch, model(batch, training=False))
        values[alpha] = {k: float(losses[k]) for k in ("loss", "mlm_loss", "ranking_loss")}
        np.testing.assert_allclose(values[alpha]["loss"], values[alpha]["mlm_loss"]
                                   + alpha * values[alpha]["ranking_loss"], rtol=1e-6)
    assert values[0.2]["ranking_loss"] > 0 and values[0.2]["mlm_loss"] > 0
    np.testing.assert_allclose(values[0.5]["loss"] - values[0.2]["loss"],
                               0.3 * values[0.2]["ranking_loss"], rtol=1e-5)


def test_cached_ranking_in_the_multitask_gives_the_same_update(tmp_path, tiny_vocab):
    """cmlm_tf/cmlm_bitext with `mini_batch_size`: the ranking part with cached gradients
    over chunks of 2 pairs, the CMLM part with a tape; the loss and the weight update (SGD,
    learning rate 1) equal the plain step's, and the step computes the losses once. Dropout
    off, so both steps see the same model."""
    corpus = write_corpus(tmp_path / "c.txt", [["the dog", "a cat", "a man"]] * 8)
    config = _as_multitask(tiny_cmlm_config(tiny_vocab, corpus))
    config.bitext_data.override(dict(input_path=str(write_tiny_bitext(tmp_path / "bitext.tsv")),
                                     global_batch_size=8, seq_length=8, seed=1))
    config.margin_softmax.override({"margin": 0.3, "scale": 20.0})
    batch = next(iter(cmlm_bitext.CMLMBitextTask(config).build_inputs(config.train_data)))
    results = {}
    for size in (0, 2):
        config.margin_softmax.mini_batch_size = size
        task = cmlm_bitext.CMLMBitextTask(config)
        calls = {"step": 0, "compute_losses": 0}  # while the step is traced
        compute_losses, train_step = task.compute_losses, task.train_step

        def counted(name, function, calls=calls):
            def call(*args, **kwargs):
                calls[name] += 1
                return function(*args, **kwargs)
            return call

        task.compute_losses = counted("compute_losses", compute_losses)
        tf_keras.utils.set_random_seed(0)
        model = task.build_model()
        model(batch, training=False)
        before = [v.numpy() for v in model.trainable_variables]
        optimizer = tf_keras.optimizers.SGD(learning_rate=1.0)
        metrics = task.build_metrics(training=True)
        step = tf.function(counted("step", train_step))
        loss = float(step(batch, model, optimizer, metrics)["loss"])
        update = [b - v.numpy() for b, v in zip(before, model.trainable_variables)]
        assert calls["compute_losses"] == calls["step"] >= 1, (size, calls)
        results[size] = loss, update, {m.name: float(m.result()) for m in metrics}
    (plain_loss, plain_update, plain_metrics), (loss, update, metrics) = results[0], results[2]
    assert abs(loss - plain_loss) <= 1e-5 * abs(plain_loss)
    scale = max(float(np.abs(u).max()) for u in plain_update)
    assert scale > 1e-4  # the step moved the weights
    for cached, plain in zip(update, plain_update):
        np.testing.assert_allclose(cached, plain, atol=1e-5 * scale + 1e-7)
    for name, value in plain_metrics.items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-5, err_msg=name)


def test_stage_two_restores_stage_one(tmp_path, tiny_vocab):
    """CMLM → CMLM+BR restores encoder, projection and head; CMLM → BR the encoder."""
    corpus = write_corpus(tmp_path / "c.txt", [["the dog", "a cat"]] * 4)
    stage_1 = tiny_cmlm_config(tiny_vocab, corpus)

    tf_keras.utils.set_random_seed(7)
    donor = cmlm.CMLMTask(stage_1).build_model()
    for variable in donor.trainable_variables:  # make them differ from any fresh init
        variable.assign_add(tf.fill(variable.shape, 0.01))
    prefix = tf.train.Checkpoint(**donor.checkpoint_items).save(str(tmp_path / "run" / "ckpt"))

    stage_2 = _as_multitask(stage_1)
    stage_2.init_checkpoint = str(tmp_path / "run")
    task = cmlm_bitext.CMLMBitextTask(stage_2)
    model = task.build_model()
    task.initialize(model)
    for name in ("encoder", "projection", "mlm_head"):
        for a, b in zip(donor.checkpoint_items[name].weights,
                        model.checkpoint_items[name].weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())

    br = bitext_task.BitextTaskConfig()
    br.model = configs.SentenceModelConfig(encoder=stage_1.model.encoder,
                                           tokenizer=stage_1.model.tokenizer)
    br.init_checkpoint = prefix
    br_task = bitext_task.BitextTask(br)
    dual = br_task.build_model()
    br_task.initialize(dual)
    for a, b in zip(donor.encoder.weights, dual.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
