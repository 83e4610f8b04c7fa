"""STS and bitext-retrieval dev metrics during training, for any Model Garden task.

With `task.dev_sts_file` and/or `task.dev_retrieval_files` set, every evaluation of
`--mode=train_and_eval` or `--mode=eval` also encodes those files with the task model's
sentence encoder and reports, next to the task's own validation metrics (logs, TensorBoard
`validation/` summaries, the driver's returned eval logs):

- `dev_sts_spearman`, `dev_sts_pearson` for `dev_sts_file` (the STS-B layout, or
  `sentence1<TAB>sentence2<TAB>score`);
- `dev_retrieval_<name>_src2tgt_accuracy`, `dev_retrieval_<name>_tgt2src_accuracy` for each
  `dev_retrieval_files` entry, a `source<TAB>target` bitext; `<name>` is the file name
  without extension (non-alphanumerics become `_`).

The numbers come from `cmlm_tf.evaluation.suite`, the same code as `python -m
cmlm_tf.evaluate`, applied to L2-normalised sentence vectors (the encoder's `default` output
normalised, so training-time numbers match the exported model's).
"""

import os
import re
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from cmlm_tf.evaluation import readers, suite
from cmlm_tf.text import batching, packing, tokenization
from cmlm_tf.vectors import l2_normalize

DEV_BATCH_SIZE = 64


def retrieval_metric_name(path: str) -> str:
    """`dev_retrieval_<name>` for a dev bitext file: its base name, sanitised."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return "dev_retrieval_" + (re.sub(r"[^0-9A-Za-z]+", "_", stem).strip("_") or "file")


def sentence_encoder_of(model):
    """The model's sentence encoder: `checkpoint_items["encoder"]`, else `.encoder`."""
    items = getattr(model, "checkpoint_items", None) or {}
    if "encoder" in items:
        return items["encoder"]
    if hasattr(model, "encoder"):
        return model.encoder
    raise ValueError(f"{type(model).__name__} exposes no sentence encoder (expected "
                     "checkpoint_items['encoder'] or .encoder) for dev metrics")


class _DevSets:
    """The dev files, read once: STS pairs and named retrieval bitexts."""

    def __init__(self, sts_file: str, retrieval_files: List[str]):
        self.sts: Optional[Tuple[List[str], List[str], np.ndarray]] = None
        if sts_file:
            self.sts = readers.read_sts(sts_file, "auto")
        self.retrieval: Dict[str, Tuple[List[str], List[str]]] = {}
        for path in retrieval_files:
            name = retrieval_metric_name(path)
            if name in self.retrieval:
                name = f"{name}_{len(self.retrieval) + 1}"
            self.retrieval[name] = readers.read_bitext_tsv(path)

    def __bool__(self):
        return self.sts is not None or bool(self.retrieval)


class _DevMetricsState:
    """Eval-loop state: wraps the task's own aggregated logs so the reduce step always runs."""

    def __init__(self, inner=None):
        self.inner = inner


class _ModelRef:
    """Holds the model outside TensorFlow's attribute tracking of the task."""

    model = None


class DevMetricsMixin:
    """Adds `dev_sts_*` and `dev_retrieval_*` metrics to a Model Garden `base_task.Task`.

    Use it as the first base: `class MyTask(dev_metrics.DevMetricsMixin, base_task.Task)`.

    The task must provide:
    - a config with the `SentenceTaskConfig` fields `dev_sts_file`, `dev_retrieval_files`,
      `model.tokenizer` and `train_data.seq_length` (texts are cut to that many tokens, as
      the exporter does by default);
    - a model (from `build_model`) that exposes its sentence encoder as
      `checkpoint_items["encoder"]` (the cmlm_tf convention) or as `.encoder`: a
      `SentenceEncoder`, which takes the TF Hub input dict (`input_word_ids`, `input_mask`,
      `input_type_ids`) and returns a dict with `default` [batch, dim].

    The mixin implements `validation_step` (remembers the model, then calls the next class's
    `validation_step`), `aggregate_logs` and `reduce_aggregated_logs` (both wrap the next
    class's, so a task's own aggregation keeps working). A task that overrides these three
    itself must call `super()` in each. The dev files are read and checked when the task is
    built, so a bad file stops the run before training. Dev metrics are computed once per
    evaluation, eagerly on the host, after the validation steps. They need the trainer's
    reduce step, so `trainer.eval_tf_while_loop` must stay false (the default).
    """

    def __init__(self, params, logging_dir: Optional[str] = None, name: Optional[str] = None):
        super().__init__(params, logging_dir=logging_dir, name=name)
        self._dev_sets = _DevSets(params.dev_sts_file, list(params.dev_retrieval_files))
        self._dev_model_ref = _ModelRef()
        self._dev_encode_fn = None

    def validation_step(self, inputs, model, metrics=None):
        self._dev_model_ref.model = model
        return super().validation_step(inputs, model, metrics=metrics)

    def aggregate_logs(self, state=None, step_outputs=None):
        if not self._dev_sets:
            return super().aggregate_logs(state, step_outputs)
        if state is None:
            state = _DevMetricsState()
        state.inner = super().aggregate_logs(state.inner, step_outputs)
        return state

    def reduce_aggregated_logs(self, aggregated_logs, global_step=None):
        if not isinstance(aggregated_logs, _DevMetricsState):
            return super().reduce_aggregated_logs(aggregated_logs, global_step)
        logs = {}
        if aggregated_logs.inner is not None:
            logs.update(super().reduce_aggregated_logs(aggregated_logs.inner, global_step))
        logs.update(self.dev_metrics())
        return logs

    def dev_metrics(self) -> Dict[str, float]:
        """Encodes the dev files with the remembered model; returns the `dev_*` metrics."""
        if not self._dev_sets:
            return {}
        if self._dev_model_ref.model is None:
            logging.warning("dev metrics skipped: no validation step has run yet")
            return {}
        encode = self._dev_encoder()
        metrics = {}
        if self._dev_sets.sts is not None:
            first, second, gold = self._dev_sets.sts
            scores = suite.run_sts(encode, first, second, gold)
            metrics["dev_sts_spearman"] = scores["spearman"]
            metrics["dev_sts_pearson"] = scores["pearson"]
        for name, (src, tgt) in self._dev_sets.retrieval.items():
            scores, _ = suite.run_retrieval(encode, src, tgt)
            metrics[f"{name}_src2tgt_accuracy"] = scores["src2tgt_accuracy"]
            metrics[f"{name}_tgt2src_accuracy"] = scores["tgt2src_accuracy"]
        logging.info("dev metrics: %s", ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        return metrics

    def _dev_encoder(self):
        """texts -> float32 [n, dim] L2-normalised, through one traced graph."""
        if self._dev_encode_fn is not None:
            return self._dev_encode_fn
        encoder = sentence_encoder_of(self._dev_model_ref.model)
        tokenizer = tokenization.build_tokenizer(self.task_config.model.tokenizer)
        special = tokenization.special_token_ids(tokenizer)
        seq_length = self.task_config.train_data.seq_length

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def embed(sentences):
            inputs = packing.tokenize_and_pack(tokenizer, special, sentences, seq_length)
            return l2_normalize(encoder(inputs, training=False)["default"], tf.float32)

        def encode(texts):
            return batching.encode_sorted(texts, lambda batch: embed(tf.constant(batch)).numpy(),
                                           DEV_BATCH_SIZE)

        self._dev_encode_fn = encode
        return encode
