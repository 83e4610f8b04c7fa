"""Principal component removal (`cmlm_tf.evaluation.pcr`): the removed direction, files, bias.

The embeddings are hashed character-trigram counts of real sentences
(`tests/evaluation/conftest.ngram_vectors`), compared with brute-force NumPy/SciPy
computations.
"""

import numpy as np
import pytest

from cmlm_tf.evaluation import bias, pcr, readers
from tests.evaluation.conftest import ngram_vectors, shared_file, unit


def test_pcr_removes_exactly_the_first_singular_direction():
    texts = readers.read_sentences(str(shared_file("udhr", "spa.txt")))
    matrix = unit(ngram_vectors(texts, dim=64))
    component = pcr.first_singular_vector(matrix)
    eigenvalues, eigenvectors = np.linalg.eigh(matrix.T @ matrix)  # uncentred Gram matrix
    assert abs(component @ eigenvectors[:, -1]) == pytest.approx(1.0, abs=1e-10)
    removed = pcr.remove_component(matrix, component, renormalize=False)
    np.testing.assert_allclose(removed, matrix - np.outer(matrix @ component, component),
                               atol=1e-12)
    np.testing.assert_allclose(removed @ component, 0.0, atol=1e-12)
    before = np.linalg.svd(matrix, compute_uv=False)
    after = np.linalg.svd(removed, compute_uv=False)
    np.testing.assert_allclose(after[:-1], before[1:], atol=1e-10)  # the rest is untouched
    assert after[-1] == pytest.approx(0.0, abs=1e-10)
    assert before[0] ** 2 == pytest.approx(eigenvalues[-1])
    renormalised = pcr.remove_component(matrix, component)
    np.testing.assert_allclose(np.linalg.norm(renormalised, axis=1), 1.0)


def test_pcr_components_save_load_and_apply(tmp_path):
    rng = np.random.default_rng(3)
    fitted = pcr.PCRComponents.fit({"en": rng.normal(size=(20, 8)) + 2,
                                    "es": rng.normal(size=(30, 8)) - 1})
    path = tmp_path / "pcr.json"
    fitted.save(str(path))
    loaded = pcr.PCRComponents.load(str(path))
    assert loaded.languages == ["en", "es"] and loaded.dim == 8
    for lang in ("en", "es"):
        np.testing.assert_array_equal(loaded.component(lang), fitted.component(lang))
    vectors = rng.normal(size=(5, 8)).astype(np.float32)
    applied = loaded.apply(vectors, "es")
    assert applied.dtype == np.float32
    np.testing.assert_allclose(applied @ loaded.component("es"), 0.0, atol=1e-6)
    with pytest.raises(ValueError, match="no PCR component for language 'de'"):
        loaded.apply(vectors, "de")
    with pytest.raises(ValueError, match="dim 8"):
        loaded.apply(np.ones([2, 4]), "en")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="bad.json: not a PCR file"):
        pcr.PCRComponents.load(str(tmp_path / "bad.json"))


def test_pcr_lowers_same_language_bias_on_udhr():
    languages = ["eng", "spa", "fra", "ita"]
    texts = readers.read_multiway(str(shared_file("udhr")), languages)
    vectors = {lang: unit(ngram_vectors(texts[lang])) for lang in languages}
    before = bias.same_language_share(vectors, k=5)["overall"]
    after = bias.same_language_share(pcr.PCRComponents.fit(vectors).apply_all(vectors),
                                     k=5)["overall"]
    assert after < before
