"""Linear probe: separable embeddings score 1, random labels score chance, C selection, errors."""

import numpy as np
import pytest

from cmlm_tf.evaluation import classify

# Tiny classifier fits: more BLAS threads only contend for the cores.
pytestmark = pytest.mark.usefixtures("one_blas_thread")


def _clusters(rng, per_label, *, labels=("neg", "pos"), dim=4, spread=0.3):
    centres = {label: 3.0 * np.eye(dim)[i] for i, label in enumerate(labels)}
    y = np.repeat(labels, per_label)
    x = np.stack([centres[label] for label in y]) + rng.normal(0, spread, (len(y), dim))
    return x.astype(np.float32), list(y)


def test_separable_embeddings_are_classified_perfectly():
    rng = np.random.default_rng(0)
    train_x, train_y = _clusters(rng, 10)
    test_x, test_y = _clusters(rng, 15)
    result = classify.probe_accuracy(train_x, train_y, test_x, test_y)
    assert result["accuracy"] == 1.0
    assert result["selection"] == "cv" and result["selection_accuracy"] == 1.0
    # Every C is perfect: ties go to the strongest regularisation (the smallest C).
    assert result["c"] == min(classify.C_GRID)
    assert (result["num_train"], result["num_test"], result["num_labels"]) == (20, 30, 2)


def test_random_labels_score_near_chance():
    rng = np.random.default_rng(1)
    train_x, test_x = rng.normal(size=(60, 8)), rng.normal(size=(400, 8))
    train_y, test_y = rng.integers(0, 2, 60), rng.integers(0, 2, 400)
    result = classify.probe_accuracy(train_x, train_y, test_x, test_y)
    # Labels independent of the features: accuracy ~ Binomial(400, 0.5) / 400 (sd 0.025).
    assert 0.4 < result["accuracy"] < 0.6


def test_a_dev_set_chooses_c_by_its_accuracy():
    rng = np.random.default_rng(2)
    labels = ("a", "b", "c")
    train_x, train_y = _clusters(rng, 6, labels=labels)
    test_x, test_y = _clusters(rng, 6, labels=labels)
    dev_x, dev_y = _clusters(rng, 4, labels=labels)
    dev_y[0] = "c"  # one dev label no C can get right: dev accuracy 11/12 at best
    result = classify.probe_accuracy(train_x, train_y, test_x, test_y, dev_x=dev_x, dev_y=dev_y,
                                     c_grid=(4.0, 1.0))
    assert result["selection"] == "dev" and result["num_labels"] == 3
    assert result["selection_accuracy"] == pytest.approx(11 / 12)
    assert result["c"] == 1.0 and result["accuracy"] == 1.0


def test_training_sets_the_probe_cannot_use_are_errors():
    x = np.zeros((4, 2))
    with pytest.raises(ValueError, match="at least 2 distinct labels"):
        classify.probe_accuracy(x, [1, 1, 1, 1], x, [1, 1, 1, 1])
    # One example of label 2: no stratified fold split without a dev set ...
    with pytest.raises(ValueError, match="give a --dev file"):
        classify.probe_accuracy(np.eye(4), [0, 0, 0, 2], np.eye(4), [0, 0, 0, 2])
    # ... which a dev set makes unnecessary.
    result = classify.probe_accuracy(np.eye(4), [0, 0, 0, 2], np.eye(4), [0, 0, 0, 2],
                                     dev_x=np.eye(4), dev_y=[0, 0, 0, 2])
    assert result["selection"] == "dev"
