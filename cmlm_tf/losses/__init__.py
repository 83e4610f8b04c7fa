"""Training losses, one file per idea, each docstring a small user page.

- `masked_lm`: cross-entropy over masked positions (CMLM, MLM, TLM);
- `margin_softmax`: bidirectional additive-margin softmax (translation ranking, LaBSE);
- `info_nce`: InfoNCE against a queue (dual momentum contrast);
- `pair_classification`: NLI cross-entropy over [u, v, |u − v|, u ∗ v] logits;
- `gaussian_kl`, `sequence_nll`: the KL and reconstruction / translation terms of BGT.

The all-gather behind global-batch negatives is `cmlm_tf.distributed`, a floor below: no loss
imports `cmlm_tf.training`.
"""
