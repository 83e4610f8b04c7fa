"""The task contract every cmlm_tf task shares: losses computed once per step as a dict,
metrics read from that dict, warm starts and the run's SentencePiece model. How a step turns
the losses into an update lives in `cmlm_tf.training.steps`."""

import os
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple

import tensorflow as tf
import tf_keras
from absl import logging
from official.core import base_task

from cmlm_tf.evaluation import dev_metrics
from cmlm_tf.modeling import sentence_encoder
from cmlm_tf.text import tokenization
from cmlm_tf.training import steps


def checkpoint_has(prefix: str, item: str) -> bool:
    """Whether the checkpoint at `prefix` holds an object named `item` at its root."""
    return any(name.startswith(item + "/") for name, _ in tf.train.list_variables(prefix))


def warm_start(model: tf_keras.Model, path: str) -> None:
    """Restores `model.checkpoint_items` from `path` (a prefix or a run directory).

    The encoder must be there and fit exactly; every other item (a CMLM head, a projection)
    is restored when the checkpoint holds it, so a later training stage continues the
    objective the earlier stage trained.
    """
    if not path:
        return
    prefix = sentence_encoder.resolve_checkpoint(path)
    items = model.checkpoint_items
    extra = {k: v for k, v in items.items() if k != "encoder" and checkpoint_has(prefix, k)}
    sentence_encoder.restore_encoder(items["encoder"], prefix, extra_items=extra)
    logging.info("Warm-started from %s (encoder%s)", prefix, "".join(", " + k for k in extra))


def data_field(data_config) -> str:
    """Where a task's `build_inputs` config sits, for error messages: `task.train_data` or
    `task.validation_data`."""
    return "task.train_data" if data_config.is_training else "task.validation_data"


def margin_ranked_pairs(task_config, pairs: Dict, embed: Callable) -> steps.RankedPart:
    """`pairs` (`source` and `target` inputs) as the rows the margin softmax ranks each
    against every other: embedded by `embed`, in chunks of `task.margin_softmax.mini_batch_size`
    with cached gradients when it is set."""
    return steps.RankedPart(pairs, embed, batch_size=pairs["source"]["input_word_ids"].shape[0],
                            chunk_size=task_config.margin_softmax.mini_batch_size,
                            field="task.margin_softmax.mini_batch_size")


def with_run_sentencepiece(task_config, model_dir: Optional[str]):
    """`task_config` using the SentencePiece model its run learned, when it names none.

    With `task.model.tokenizer.type: sentencepiece`, an empty `sp_model_file` and a
    `MODEL_DIR/sp.model` (written by the driver's `cmlm_tf.driver.train_lib.prepare_vocabulary`),
    returns a copy that names that file and sets `task.model.encoder.vocab_size` to its piece
    count; otherwise `task_config` itself. Reads only: nothing is trained or written.
    """
    tokenizer = task_config.model.tokenizer
    if tokenizer.type != "sentencepiece" or tokenizer.sp_model_file or not model_dir:
        return task_config
    sp_model_file = os.path.join(os.path.abspath(model_dir), tokenization.SP_MODEL_FILE)
    if not tf.io.gfile.exists(sp_model_file):
        return task_config
    vocab_size = tokenization.special_token_ids(tokenization.build_tokenizer(
        tokenizer.replace(sp_model_file=sp_model_file)))["vocab_size"]
    if vocab_size != task_config.model.encoder.vocab_size:
        logging.info("task.model.encoder.vocab_size: %d -> %d (the SentencePiece model's)",
                     task_config.model.encoder.vocab_size, vocab_size)
    task_config = task_config.replace(model={"tokenizer": {"sp_model_file": sp_model_file},
                                             "encoder": {"vocab_size": vocab_size}})
    task_config.lock()
    return task_config


class _SentenceSteps(base_task.Task):
    """Train and validation steps around `compute_losses`; see `SentenceTask`."""

    # Metric name -> the `compute_losses` entry it averages, where the two names differ.
    metric_sources: Mapping[str, str] = {}

    def initialize(self, model: tf_keras.Model):
        warm_start(model, self.task_config.init_checkpoint)

    def compute_losses(self, inputs, outputs) -> Dict[str, tf.Tensor]:
        raise NotImplementedError

    def update_metrics(self, metrics, inputs, outputs, losses: Dict[str, tf.Tensor]):
        """Updates each metric with the `losses` entry of its name (or `metric_sources`')."""
        for metric in metrics:
            source = self.metric_sources.get(metric.name, metric.name)
            if source in losses:
                metric.update_state(losses[source])

    def build_losses(self, labels, model_outputs, aux_losses=None) -> tf.Tensor:
        loss = self.compute_losses(labels, model_outputs)["loss"]
        if aux_losses:
            loss += tf.add_n(aux_losses)
        return loss

    def process_metrics(self, metrics, labels, model_outputs, **kwargs):
        self.update_metrics(metrics, labels, model_outputs,
                            self.compute_losses(labels, model_outputs))

    def ranked_part(self, inputs, model: tf_keras.Model) -> Optional[steps.RankedPart]:
        """The rows of `inputs` whose loss ranks each against every other (translation
        ranking), for the train step to embed apart: in chunks with cached gradients when
        the part's `chunk_size` asks (the same update, with memory that follows the chunk).
        None (the default): no such part."""
        return None

    def forward_pass(self, inputs, model: tf_keras.Model, optimizer,
                     ranked: Optional[steps.RankedPart]) -> Optional[Callable[[], Any]]:
        """() -> the training outputs other than `ranked`'s embeddings, in training mode; None
        when `ranked` is the whole forward pass. Default: the model on `inputs` without a
        ranked part, None with one."""
        if ranked is not None:
            return None
        return lambda: model(inputs, training=True)

    def assemble_outputs(self, other, embeddings):
        """The outputs `compute_losses` takes, from `forward_pass`'s outputs and the ranked
        part's embeddings (each None where there is none). Default: the one there is."""
        return embeddings if other is None else other

    def train_step(self, inputs, model: tf_keras.Model, optimizer, metrics=None):
        """One update, the same for every task: `steps.train_step` over this task's
        `forward_pass`, `ranked_part` and `assemble_outputs`. Tasks override those hooks,
        not this."""
        ranked = self.ranked_part(inputs, model)
        return steps.train_step(self, inputs, model, optimizer, metrics=metrics,
                                forward=self.forward_pass(inputs, model, optimizer, ranked),
                                ranked=ranked, assemble=self.assemble_outputs)

    def validation_step(self, inputs, model: tf_keras.Model, metrics=None):
        return steps.validation_step(self, inputs, model, metrics)

    def build_metrics(self, training: Optional[bool] = None):
        return []


class SentenceTask(dev_metrics.DevMetricsMixin, _SentenceSteps):
    """A Model Garden task whose losses come as a dict, computed once per step.

    Subclasses implement `compute_losses(inputs, outputs) -> dict` with a scalar `loss`
    (this replica's mean; the step divides by the number of replicas) plus any per-example
    or scalar terms their metrics read: `build_metrics` names the metrics, and each is
    updated with the entry of its name (or of `metric_sources[name]`); a subclass that needs
    more overrides `update_metrics`. Cross-replica losses may all-gather inside
    `compute_losses`: both steps call it in the replica context. Evaluations also report
    the `task.dev_sts_file` / `task.dev_retrieval_files` metrics (`dev_metrics`).

    A SentencePiece tokenizer without `sp_model_file` uses the run's `MODEL_DIR/sp.model`
    (`with_run_sentencepiece`); a task that can learn one says from what text in
    `sentencepiece_corpus`, and the driver learns it before the run starts.

    `resume_step`: the step of the checkpoint a resumed run restores (the driver passes it);
    `build_inputs` hands it to its readers, whose training pipelines start after the batches
    of the steps before it. `malformed_reports`: the readers' counts of the records they
    skipped (`data.records`), which the driver logs and summarises when training ends.
    """

    def __init__(self, params, logging_dir: Optional[str] = None, name: Optional[str] = None,
                 resume_step: int = 0):
        super().__init__(with_run_sentencepiece(params, logging_dir), logging_dir=logging_dir,
                         name=name)
        self.resume_step = int(resume_step)
        self.malformed_reports: list = []

    @classmethod
    def sentencepiece_corpus(cls, task_config) -> Optional[Tuple[Iterable[str], int]]:
        """What to learn the run's SentencePiece model from when `task_config` names none:
        (the training sentences, the most pieces), or None when this task learns none."""
        return None
