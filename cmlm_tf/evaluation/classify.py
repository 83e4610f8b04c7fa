"""Linear probe on frozen embeddings (the SentEval transfer protocol).

A logistic-regression classifier is trained on the embeddings of the training texts; its
inverse regularisation strength C is chosen from `C_GRID` by accuracy on a dev set when one is
given, else by stratified k-fold cross-validation on the training set; the chosen model,
refitted on the whole training set, is scored on the test set.
"""

from typing import Dict, Optional, Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_score

C_GRID = tuple(2.0**power for power in range(-2, 5))


def _classifier(c: float):
    return LogisticRegression(C=c, max_iter=2000)


def _folds(labels: np.ndarray, max_folds: int) -> int:
    _, counts = np.unique(labels, return_counts=True)
    folds = min(max_folds, int(counts.min()))
    if folds < 2:
        raise ValueError("cross-validation needs at least 2 training examples of every "
                         "label; give a --dev file instead")
    return folds


def probe_accuracy(train_x: np.ndarray, train_y: Sequence, test_x: np.ndarray,
                   test_y: Sequence, *, dev_x: Optional[np.ndarray] = None,
                   dev_y: Optional[Sequence] = None, c_grid: Sequence[float] = C_GRID,
                   cv_folds: int = 5, seed: int = 0) -> Dict[str, object]:
    """Test accuracy of a logistic-regression probe with C chosen on dev or by CV.

    Args:
        train_x, test_x, dev_x: float [n, dim] embeddings.
        train_y, test_y, dev_y: labels (any hashable values).
        c_grid: candidate values of C.
        cv_folds: folds of the cross-validation used when there is no dev set.

    Returns:
        {"accuracy": test accuracy, "c": chosen C, "selection": "dev" | "cv",
         "selection_accuracy": dev or mean CV accuracy of the chosen C,
         "num_train", "num_test", "num_labels"}.
    """
    train_y, test_y = np.asarray(train_y), np.asarray(test_y)
    if len(np.unique(train_y)) < 2:
        raise ValueError("the training set needs at least 2 distinct labels")
    scores = {}
    if dev_x is not None:
        dev_y = np.asarray(dev_y)
        for c in c_grid:
            scores[c] = float(np.mean(_classifier(c).fit(train_x, train_y).predict(dev_x)
                                      == dev_y))
        selection = "dev"
    else:
        folds = StratifiedKFold(_folds(train_y, cv_folds), shuffle=True, random_state=seed)
        for c in c_grid:
            scores[c] = float(np.mean(cross_val_score(_classifier(c), train_x, train_y,
                                                      cv=folds)))
        selection = "cv"
    best_c = max(c_grid, key=lambda c: (scores[c], -c))
    model = _classifier(best_c).fit(train_x, train_y)
    return {"accuracy": float(np.mean(model.predict(test_x) == test_y)), "c": best_c,
            "selection": selection, "selection_accuracy": scores[best_c],
            "num_train": int(len(train_y)), "num_test": int(len(test_y)),
            "num_labels": int(len(np.unique(train_y)))}
