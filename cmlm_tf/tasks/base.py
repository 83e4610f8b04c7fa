"""What every cmlm_tf task shares: warm starts and a train step that computes losses once."""

from typing import Dict, Mapping, Optional

import tensorflow as tf
import tf_keras
from absl import logging
from official.core import base_task

from cmlm_tf.modeling import sentence_encoder
from cmlm_tf.tasks import dev_eval


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

    def train_step(self, inputs, model: tf_keras.Model, optimizer, metrics=None):
        with tf.GradientTape() as tape:
            outputs = model(inputs, training=True)
            losses = self.compute_losses(inputs, outputs)
            loss = losses["loss"]
            if model.losses:
                loss += tf.add_n(model.losses)
            scaled_loss = loss / tf.distribute.get_strategy().num_replicas_in_sync
            if isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
                scaled_loss = optimizer.get_scaled_loss(scaled_loss)
        variables = model.trainable_variables
        grads = tape.gradient(scaled_loss, variables)
        if isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
            grads = optimizer.get_unscaled_gradients(grads)
        optimizer.apply_gradients(list(zip(grads, variables)))
        if metrics:
            self.update_metrics(metrics, inputs, outputs, losses)
        return {self.loss: loss}

    def validation_step(self, inputs, model: tf_keras.Model, metrics=None):
        outputs = model(inputs, training=False)
        losses = self.compute_losses(inputs, outputs)
        if metrics:
            self.update_metrics(metrics, inputs, outputs, losses)
        return {self.loss: losses["loss"]}

    def build_metrics(self, training: Optional[bool] = None):
        return []


class SentenceTask(dev_eval.DevEvalMixin, _SentenceSteps):
    """A Model Garden task whose losses come as a dict, computed once per step.

    Subclasses implement `compute_losses(inputs, outputs) -> dict` with a scalar `loss`
    (this replica's mean; the step divides by the number of replicas) plus any per-example
    or scalar terms their metrics read: `build_metrics` names the metrics, and each is
    updated with the entry of its name (or of `metric_sources[name]`); a subclass that needs
    more overrides `update_metrics`. Cross-replica losses may all-gather inside
    `compute_losses`: both steps call it in the replica context. Evaluations also report
    the `task.dev_sts_file` / `task.dev_retrieval_files` metrics (`dev_eval`).
    """
