"""Evaluation metrics for sentence embeddings: plain NumPy/SciPy/scikit-learn, no TensorFlow.

One home per protocol:

- `knn` — exact chunked top-k cosine neighbours (memory O(N·k + chunk·N), never N×N);
- `sts` — Spearman and Pearson correlation of cosine similarity with gold scores;
- `retrieval` — top-1 translation retrieval accuracy in both directions (Tatoeba);
- `mining` — LASER margin scoring, 1-to-1 `max` retrieval and the best-F1 threshold (BUCC);
- `bias` — share of a query's nearest neighbours that are in its own language;
- `classify` — logistic-regression probe on frozen embeddings (SentEval transfer);
- `pcr` — per-language principal component removal (CMLM paper §5);
- `readers` — the file layouts of each task, with errors naming file and line;
- `suite` — encode-then-score pipelines shared by `cmlm_tf.evaluate` and training-time
  validation (`cmlm_tf.evaluation.dev_metrics`); they take any `encode(texts) -> vectors` function;
- `mteb_adapter` — a loaded export as an MTEB 2.x encoder, and `python -m cmlm_tf.evaluate
  mteb` (the optional extra `cmlm_tf[mteb]`).
"""
