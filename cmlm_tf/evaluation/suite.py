"""Encode-then-score pipelines, one per evaluation task.

Each takes `encode`, any function from a list of texts to float [n, dim] embeddings (for an
export, `cmlm_tf.load(dir).encode`; during training, the task model's encoder), so the command
line and training-time validation compute every number with the same code.

PCR (`cmlm_tf.evaluation.pcr`) is controlled by two arguments: `fit_pcr=True` fits one
component per language on the evaluated sentences and returns it; `pcr=components` applies
previously fitted components (every language evaluated must have one).
"""

from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from cmlm_tf.evaluation import bias, classify, mining, retrieval, sts
from cmlm_tf.evaluation.pcr import PCRComponents

Encode = Callable[[Sequence[str]], np.ndarray]


def embed_languages(encode: Encode, parts: Sequence[Tuple[str, Sequence[str]]],
                    *, fit_pcr: bool = False, pcr: Optional[PCRComponents] = None
                    ) -> Tuple[List[np.ndarray], Optional[PCRComponents]]:
    """Encodes each (language, texts) part, with optional PCR.

    Parts in the same language share one component, fitted on all their sentences together.

    Returns:
        (one float [n_part, dim] matrix per part, the fitted components or None).
    """
    if fit_pcr and pcr is not None:
        raise ValueError("fit_pcr and pcr are exclusive: fit components or apply given ones")
    vectors = [np.asarray(encode(list(texts))) for _, texts in parts]
    return remove_components([language for language, _ in parts], vectors, fit_pcr=fit_pcr, pcr=pcr)


def remove_components(languages: Sequence[str], vectors: Sequence[np.ndarray],
                      *, fit_pcr: bool = False, pcr: Optional[PCRComponents] = None
                      ) -> Tuple[List[np.ndarray], Optional[PCRComponents]]:
    """PCR on vectors already computed: `vectors[i]` is in `languages[i]`; as
    `embed_languages` after its encoding."""
    if fit_pcr and pcr is not None:
        raise ValueError("fit_pcr and pcr are exclusive: fit components or apply given ones")
    parts = list(zip(languages, vectors))
    vectors = list(vectors)
    fitted = None
    if fit_pcr:
        by_language: Dict[str, List[np.ndarray]] = {}
        for (language, _), matrix in zip(parts, vectors):
            by_language.setdefault(language, []).append(matrix)
        fitted = PCRComponents.fit({lang: np.concatenate(matrices)
                                    for lang, matrices in by_language.items()})
    components = fitted or pcr
    if components is not None:
        vectors = [components.apply(matrix, language)
                   for (language, _), matrix in zip(parts, vectors)]
    return vectors, fitted


def run_sts(encode: Encode, first: Sequence[str], second: Sequence[str],
            gold: np.ndarray) -> Dict[str, float]:
    """{"spearman", "pearson", "num_pairs"} of cosine vs gold."""
    return sts.sts_correlations(np.asarray(encode(list(first))),
                                np.asarray(encode(list(second))), gold)


def run_retrieval(encode: Encode, src: Sequence[str], tgt: Sequence[str],
                  *, src_lang: str = "src", tgt_lang: str = "tgt", fit_pcr: bool = False,
                  pcr: Optional[PCRComponents] = None
                  ) -> Tuple[Dict[str, float], Optional[PCRComponents]]:
    """Top-1 retrieval accuracy both ways on aligned sentence lists."""
    (src_vectors, tgt_vectors), fitted = embed_languages(
        encode, [(src_lang, src), (tgt_lang, tgt)], fit_pcr=fit_pcr, pcr=pcr)
    return retrieval.retrieval_accuracy(src_vectors, tgt_vectors), fitted


def mine_texts(encode: Encode, src: Sequence[str], tgt: Sequence[str], *, k: int = 4,
               margin: str = "ratio", src_lang: str = "src", tgt_lang: str = "tgt",
               fit_pcr: bool = False, pcr: Optional[PCRComponents] = None,
               search: Optional[mining.Search] = None
               ) -> Tuple[mining.MinedPairs, Optional[PCRComponents]]:
    """Margin-scored 1-to-1 pairs (indices into `src` and `tgt`), best first; `search` as in
    `mining.margin_candidates` (default exact)."""
    (src_vectors, tgt_vectors), fitted = embed_languages(
        encode, [(src_lang, src), (tgt_lang, tgt)], fit_pcr=fit_pcr, pcr=pcr)
    return mining.mine(src_vectors, tgt_vectors, k=k, kind=margin, search=search), fitted


def run_mining(encode: Encode, src_ids: Sequence[str], src: Sequence[str],
               tgt_ids: Sequence[str], *, tgt: Sequence[str], gold: Sequence[Tuple[str, str]],
               k: int = 4, margin: str = "ratio", threshold: Optional[float] = None,
               src_lang: str = "src", tgt_lang: str = "tgt", fit_pcr: bool = False,
               pcr: Optional[PCRComponents] = None
               ) -> Tuple[Dict[str, float], Optional[PCRComponents]]:
    """BUCC: mine, then precision/recall/F1 against gold `(src_id, tgt_id)` pairs.

    Without `threshold`, the threshold with the best F1 is chosen on these pairs (the
    protocol's optimistic setting on a split with gold).
    """
    pairs, fitted = mine_texts(encode, src, tgt, k=k, margin=margin, src_lang=src_lang,
                               tgt_lang=tgt_lang, fit_pcr=fit_pcr, pcr=pcr)
    gold_set = set(gold)
    src_ids, tgt_ids = np.asarray(src_ids, object), np.asarray(tgt_ids, object)
    correct = np.array([(s, t) in gold_set for s, t in zip(src_ids[pairs.src_indices],
                                                          tgt_ids[pairs.tgt_indices])], bool)
    if threshold is None:
        threshold, metrics = mining.best_f1_threshold(pairs.scores, correct, len(gold_set))
        chosen = "best_f1"
    else:
        metrics = mining.metrics_at_threshold(pairs.scores, correct, len(gold_set), threshold)
        chosen = "given"
    metrics.update(threshold=float(threshold), threshold_choice=chosen,
                   num_candidates=len(pairs), num_gold=len(gold_set), k=k, margin=margin)
    return metrics, fitted


def run_bias(encode: Encode, texts: Mapping[str, Sequence[str]], *, k: int = 10,
             fit_pcr: bool = False, pcr: Optional[PCRComponents] = None
             ) -> Tuple[Dict[str, object], Optional[PCRComponents]]:
    """Same-language share of the k nearest pooled neighbours, per language and overall."""
    languages = list(texts)
    vectors, fitted = embed_languages(encode, [(lang, texts[lang]) for lang in languages],
                                      fit_pcr=fit_pcr, pcr=pcr)
    return bias.same_language_share(dict(zip(languages, vectors)), k=k), fitted


def run_classify(encode: Encode, train: Tuple[Sequence[str], Sequence[str]],
                 test: Tuple[Sequence[str], Sequence[str]],
                 dev: Optional[Tuple[Sequence[str], Sequence[str]]] = None
                 ) -> Dict[str, object]:
    """Logistic-regression probe accuracy; each split is (texts, labels)."""
    dev_x = dev_y = None
    if dev is not None:
        dev_x, dev_y = np.asarray(encode(list(dev[0]))), dev[1]
    return classify.probe_accuracy(np.asarray(encode(list(train[0]))), train[1],
                                   np.asarray(encode(list(test[0]))), test[1], dev_x=dev_x,
                                   dev_y=dev_y)
