"""Load: 8 threads on one `encode()` and on one `serving_default`, each vector equal to the
one the same sentence gets alone in one thread."""

import concurrent.futures

import numpy as np
import tensorflow as tf

import cmlm_tf

THREADS = 8
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
    import tensorflow_text  # noqa: F401  (the serving model's tokenizer ops)

    signature = tf.saved_model.load(str(tiny_export / "serving" / "1")).signatures[
        "serving_default"]

    def embed(texts):
        return signature(sentences=tf.constant(texts))["embeddings"].numpy()

    _check_threads(embed, _alone(embed))
