"""`cmlm_tf.load(...).encode(...)` and `serving_default` on 8 threads: each vector equal to the one
the same sentence gets alone in one thread (in bfloat16 and int8: the one its request gets in
one thread); an int8 vector the same alone and inside a batch."""

import concurrent.futures

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the serving model's tokenizer ops)

import cmlm_tf

THREADS = 8
# An int8 vector alone against the same sentence inside a batch, on the tiny export: 9e-8
# with calibrated ranges, 8.4e-5 when the ranges were measured per request.
INT8_BATCH_ATOL = 1e-5
SENTENCES = ["", "a", "the dog runs", "x" * 10_000, "le chat noir dort sur le tapis",
             "the man is playing a guitar . " * 40, "I love pizza 🍕!", "这是一个测试句子。",
             "   ", "hello\tworld\n", "zebra quokka axolotl", "one two three four five"]


def _requests(seed: int, count: int = 6):
    """`count` requests of 1 to 7 sentences each, drawn from SENTENCES."""
    rng = np.random.default_rng(seed)
    return [[SENTENCES[i] for i in rng.integers(0, len(SENTENCES), size=rng.integers(1, 8))]
            for _ in range(count)]


def _alone(embed):
    return {text: embed([text])[0] for text in SENTENCES}


def _check_threads(embed, alone):
    def work(seed):
        return [(request, embed(request)) for request in _requests(seed)]

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        results = [item for items in pool.map(work, range(THREADS * 4)) for item in items]
    assert len(results) == THREADS * 4 * 6
    worst = 0.0
    for request, vectors in results:
        assert vectors.shape == (len(request), len(alone[""]))
        for text, vector in zip(request, vectors):
            worst = max(worst, float(np.abs(vector - alone[text]).max()))
    assert worst < 1e-5, worst


def test_eight_threads_on_one_encode_give_each_sentence_its_own_vector(tiny_export):
    model = cmlm_tf.load(str(tiny_export))

    def embed(texts):
        return model.encode(texts, batch_size=4)

    _check_threads(embed, _alone(embed))


def test_eight_threads_on_serving_default_give_each_sentence_its_own_vector(tiny_export):
    signature = tf.saved_model.load(str(tiny_export / "serving" / "1")).signatures[
        "serving_default"]

    def embed(texts):
        return signature(sentences=tf.constant(texts))["embeddings"].numpy()

    _check_threads(embed, _alone(embed))


@pytest.mark.parametrize("precision,folder", [("bfloat16", "serving_bf16/1"),
                                              ("int8", "serving_int8/1")])
def test_eight_threads_in_low_precision_give_each_request_its_one_thread_vectors(
        precision_export, precision, folder):
    """bfloat16 and int8 kernels are constants that oneDNN reorders once and shares between
    requests: each request of 8 threads must give what it gives in one thread."""
    model = cmlm_tf.load(str(precision_export), precision=precision)
    signature = tf.saved_model.load(str(precision_export / folder)).signatures[
        "serving_default"]
    for embed in (lambda texts: model.encode(texts, batch_size=4),
                  lambda texts: signature(sentences=tf.constant(texts))["embeddings"].numpy()):
        def work(seed, embed=embed):
            return [embed(request) for request in _requests(seed)]

        seeds = range(THREADS * 2)
        alone = {seed: work(seed) for seed in seeds}
        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            together = dict(zip(seeds, pool.map(work, seeds)))
        worst = max(float(np.abs(a - b).max()) for seed in seeds
                    for a, b in zip(alone[seed], together[seed]))
        assert worst < 1e-5, (precision, worst)


def test_an_int8_vector_is_the_same_alone_and_inside_a_batch(precision_export):
    """int8 activations are quantized over ranges calibrated at export, not measured on
    the request: a sentence's vector does not depend on the sentences beside it (beyond
    float rounding in the float32 parts, which can move a value across a uint8 step)."""
    model = cmlm_tf.load(str(precision_export), precision="int8")
    signature = tf.saved_model.load(str(precision_export / "serving_int8" / "1")).signatures[
        "serving_default"]
    for embed in (lambda texts: model.encode(texts, batch_size=len(texts)),
                  lambda texts: signature(sentences=tf.constant(texts))["embeddings"].numpy()):
        together = embed(SENTENCES)
        worst = max(float(np.abs(embed([text])[0] - vector).max())
                    for text, vector in zip(SENTENCES, together))
        assert worst < INT8_BATCH_ATOL, worst
