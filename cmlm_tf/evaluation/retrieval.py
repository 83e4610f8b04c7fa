"""Translation retrieval (the Tatoeba protocol of LASER and XTREME).

Line i of the source and line i of the target are translations. For each source sentence
the target with the highest cosine is retrieved (ties go to the lower index); accuracy is
the share retrieved at the right line. Both directions are reported.
"""

from typing import Dict

import numpy as np

from cmlm_tf.evaluation import knn
from cmlm_tf.vectors import unit_rows


def top1_accuracy(queries: np.ndarray, keys: np.ndarray) -> float:
    """Share of rows i whose nearest key (cosine, ties → lower index) is key i."""
    if queries.shape[0] != keys.shape[0]:
        raise ValueError(f"{queries.shape[0]} queries but {keys.shape[0]} keys; retrieval "
                         "needs aligned sets")
    _, nearest = knn.top_k(unit_rows(queries), unit_rows(keys), k=1)
    return float(np.mean(nearest[:, 0] == np.arange(queries.shape[0])))


def retrieval_accuracy(src: np.ndarray, tgt: np.ndarray) -> Dict[str, float]:
    """{"src2tgt_accuracy", "tgt2src_accuracy", "num_pairs"} for aligned [n, dim] sets."""
    return {"src2tgt_accuracy": top1_accuracy(src, tgt),
            "tgt2src_accuracy": top1_accuracy(tgt, src),
            "num_pairs": int(src.shape[0])}
