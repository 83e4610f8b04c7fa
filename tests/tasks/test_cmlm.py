"""CMLM: projection, conditioning, warm start, resume, strategies, batch sizes. (The driver in
subprocesses: tests/driver/test_train_cmlm.py.)"""


import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from cmlm_tf import configs
from cmlm_tf.data import bitext, mlm_tlm, nli, sentence_pairs
from cmlm_tf.driver import train_lib
from cmlm_tf.modeling import sentence_encoder
from cmlm_tf.tasks import cmlm
from tests.conftest import (
    REPO_DIR,
    TINY_CMLM_OVERRIDES,
    TINY_WORDS,
    tiny_cmlm_config,
    write_corpus,
)


def test_every_reader_rejects_a_non_positive_batch_size(tmp_path, tiny_vocab):
    corpus = write_corpus(tmp_path / "c.txt", [["one two", "three four"]])
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a dog\tthe cat\n", encoding="utf-8")
    examples = tmp_path / "nli.tsv"
    examples.write_text("a dog\tthe cat\tneutral\n", encoding="utf-8")
    tokenizer = configs.TokenizerConfig(vocab_file=str(tiny_vocab))
    readers = [
        lambda: sentence_pairs.cmlm_dataset(sentence_pairs.CMLMDataConfig(
            input_path=str(corpus), global_batch_size=0), tokenizer),
        lambda: mlm_tlm.mlm_tlm_dataset(mlm_tlm.MLMTLMDataConfig(
            input_path=str(corpus), global_batch_size=0, tlm_fraction=0.0), None, tokenizer),
        lambda: bitext.bitext_dataset(bitext.BitextDataConfig(
            input_path=str(pairs), global_batch_size=0), tokenizer),
        lambda: nli.nli_dataset(nli.NLIDataConfig(
            input_path=str(examples), global_batch_size=0), tokenizer),
    ]
    for build in readers:
        with pytest.raises(ValueError, match="task.train_data.global_batch_size must be "
                                             "positive, got 0"):
            build()


def test_conditioning_is_used(tmp_path, tiny_vocab):
    """s2 is one word equal to s1's: only the conditioning vectors can reveal it."""
    words = TINY_WORDS[:16]
    corpus = write_corpus(tmp_path / "copy.txt", [[w, w] for w in words] * 20)
    config = tiny_cmlm_config(tiny_vocab, corpus)
    tf_keras.utils.set_random_seed(0)
    task = cmlm.CMLMTask(config)
    model = task.build_model()
    optimizer = tf_keras.optimizers.Adam(3e-3)
    metrics = task.build_metrics()
    batches = iter(task.build_inputs(config.train_data))

    @tf.function
    def step(batch):
        return task.train_step(batch, model, optimizer, metrics)["loss"]

    for _ in range(250):
        step(next(batches))
    true_losses, shuffled_losses = [], []
    for _ in range(5):
        batch = next(batches)
        true_losses.append(float(task.build_losses(batch, model(batch, training=False))))
        shuffled = dict(batch, sentence1=tf.nest.map_structure(
            lambda t: tf.roll(t, 1, axis=0), batch["sentence1"]))
        shuffled_losses.append(float(task.build_losses(shuffled, model(shuffled,
                                                                       training=False))))
    assert np.mean(true_losses) < 0.5 * np.mean(shuffled_losses), (true_losses,
                                                                   shuffled_losses)
    assert np.mean(shuffled_losses) > 1.0


def test_warm_start_restores_encoder_into_cmlm(tmp_path, tiny_vocab):
    corpus = write_corpus(tmp_path / "c.txt", [["the dog", "a cat"]] * 4)
    config = tiny_cmlm_config(tiny_vocab, corpus)
    donor = sentence_encoder.build_sentence_encoder(config.model.encoder)
    config.init_checkpoint = sentence_encoder.write_encoder_checkpoint(donor, str(tmp_path))
    task = cmlm.CMLMTask(config)
    model = task.build_model()
    task.initialize(model)
    for a, b in zip(donor.weights, model.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_mirrored_strategy_over_two_cpu_devices(tmp_path, two_replicas):
    params = train_lib.build_params("cmlm_tf/cmlm", [str(REPO_DIR / "configs/cmlm_tiny.yaml")],
                                    TINY_CMLM_OVERRIDES + ",trainer.train_steps=10")
    train_lib.run(params, str(tmp_path / "run"), "train", strategy=two_replicas)
    assert two_replicas.num_replicas_in_sync == 2
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith("ckpt-10")


def _batches(dataset, count):
    return [tf.nest.map_structure(lambda t: t.numpy(), batch)
            for batch in dataset.take(count)]


def test_a_resumed_pipeline_continues_where_the_run_stopped(tmp_path, tiny_vocab):
    """Built with `resume_step=step`, a seeded training pipeline yields what an
    uninterrupted one yields from batch `step` on: the same pairs and the same masks."""
    words = [f"{a} {b}" for a in TINY_WORDS[:8] for b in TINY_WORDS[8:13]]
    corpus = write_corpus(tmp_path / "c.txt", [[w, " ".join(w.split()[::-1])] for w in words])
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{w}\t{w.upper()}\n" for w in words), encoding="utf-8")
    tokenizer = configs.TokenizerConfig(vocab_file=str(tiny_vocab))
    builders = [
        lambda step: sentence_pairs.cmlm_dataset(sentence_pairs.CMLMDataConfig(
            input_path=str(corpus), global_batch_size=4, seq_length=8,
            max_predictions_per_seq=2, shuffle_buffer_size=16, seed=5, is_training=True),
            tokenizer, resume_step=step),
        lambda step: bitext.bitext_dataset(bitext.BitextDataConfig(
            input_path=str(pairs), global_batch_size=4, seq_length=8,
            shuffle_buffer_size=16, seed=5, is_training=True), tokenizer, resume_step=step),
    ]
    for build in builders:
        fresh = _batches(build(0), 7)
        resumed = _batches(build(3), 4)
        tf.nest.map_structure(np.testing.assert_array_equal, resumed, fresh[3:])
        # ... and not what the head of the stream holds.
        assert not np.array_equal(resumed[0]["target" if "target" in resumed[0] else
                                             "sentence2"]["input_word_ids"],
                                  fresh[0]["target" if "target" in fresh[0] else
                                           "sentence2"]["input_word_ids"])


