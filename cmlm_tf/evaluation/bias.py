"""Same-language bias of a multilingual embedding space (CMLM paper §5).

The sentences of all languages of a multi-way parallel set are pooled. For each query, its k
nearest neighbours in the pool (by cosine, the query itself excluded, ties to the lower
index) are found, and the share of them that are in the query's own language is counted. A
language-agnostic space puts a query's translations first, so the share is low; a space that
clusters by language puts same-language sentences first, so it is high.
"""

from typing import Dict, Mapping

import numpy as np

from cmlm_tf.evaluation import knn
from cmlm_tf.vectors import unit_rows


def same_language_share(embeddings: Mapping[str, np.ndarray], k: int = 10,
                        block_bytes: int = knn.DEFAULT_BLOCK_BYTES) -> Dict[str, object]:
    """Share of each query's k nearest pooled neighbours that share its language.

    Args:
        embeddings: language → float [n_lang, dim]; languages may differ in size.
        k: neighbours per query, at most the pool size minus one.

    Returns:
        {"per_language": {lang: mean share over that language's queries},
         "overall": mean share over all queries, "k": k, "num_sentences": pool size}.
    """
    if len(embeddings) < 2:
        raise ValueError(f"bias needs at least 2 languages, got {len(embeddings)}")
    languages = list(embeddings)
    pool = unit_rows(np.concatenate([np.asarray(embeddings[lang]) for lang in languages]))
    language_of = np.repeat(np.arange(len(languages)),
                            [len(embeddings[lang]) for lang in languages])
    _, neighbours = knn.top_k(pool, pool, k, exclude_self=True, block_bytes=block_bytes)
    share = np.mean(language_of[neighbours] == language_of[:, None], axis=1)
    per_language = {lang: float(share[language_of == i].mean())
                    for i, lang in enumerate(languages)}
    return {"per_language": per_language, "overall": float(share.mean()), "k": int(k),
            "num_sentences": int(pool.shape[0])}
