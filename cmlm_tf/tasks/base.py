"""What every cmlm_tf task shares: warm starts, the run's SentencePiece model, a train step
that computes losses once, and the cached-gradient step of translation ranking."""

import os
from typing import Callable, Dict, Iterable, Mapping, Optional, Tuple

import tensorflow as tf
import tf_keras
from absl import logging
from official.core import base_task

from cmlm_tf import tokenization
from cmlm_tf.losses import gradient_cache
from cmlm_tf.modeling import dual_encoder, seeded_dropout, sentence_encoder
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


def data_field(data_config) -> str:
    """Where a task's `build_inputs` config sits, for error messages: `task.train_data` or
    `task.validation_data`."""
    return "task.train_data" if data_config.is_training else "task.validation_data"


def with_run_sentencepiece(task_config, model_dir: Optional[str]):
    """`task_config` using the SentencePiece model its run learned, when it names none.

    With `task.model.tokenizer.type: sentencepiece`, an empty `sp_model_file` and a
    `MODEL_DIR/sp.model` (written by the driver's `cmlm_tf.train.prepare_vocabulary`), returns
    a copy that names that file and sets `task.model.encoder.vocab_size` to its piece count;
    otherwise `task_config` itself. Reads only: nothing is trained or written.
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


def compile_steps(task: base_task.Task) -> None:
    """Makes `task`'s train and validation steps XLA-compiled (`runtime.enable_xla`).

    Model Garden's trainer compiles the train step only, and only on GPUs; a TPU compiles
    both steps whole, so this runs that code path on any device: each step becomes one
    `tf.function(jit_compile=True)`, traced inside the trainer's replica function. The
    inputs must have static shapes (`cmlm_tf.data.pipeline.batch_and_featurize`).
    """
    task.train_step = tf.function(task.train_step, jit_compile=True)
    task.validation_step = tf.function(task.validation_step, jit_compile=True)


def cached_ranking_train_step(
    task: "SentenceTask", inputs, model: tf_keras.Model, optimizer, metrics, size: int, *,
    pairs: Mapping, embed_pairs: Callable[[Mapping], Dict[str, tf.Tensor]],
    assemble: Callable[[Optional[Dict], Dict[str, tf.Tensor]], Dict],
    other_forward: Optional[Callable[[], Dict]] = None,
):
    """A train step whose translation-ranking part runs with cached gradients
    (`cmlm_tf.losses.gradient_cache`) over chunks of `size` pairs; the same update as the
    plain step (`task.margin_softmax.mini_batch_size`).

    Args:
        task: computes the losses from (inputs, outputs) and updates the metrics.
        pairs: the bitext batch inside `inputs` (`source`, `target` [, `hard_negatives`]).
        embed_pairs: a chunk of `pairs` -> its embeddings, in training mode.
        assemble: (the other part's outputs or None, the pairs' embeddings) -> the outputs
            that `task.compute_losses` takes.
        other_forward: the rest of a multitask's forward pass (e.g. CMLM's), differentiated
            with an ordinary tape; None when translation ranking is the whole objective.
    """
    batch = pairs["source"]["input_word_ids"].shape[0]
    if size < 0 or batch % size:
        raise ValueError(f"task.margin_softmax.mini_batch_size must be positive and divide "
                         f"the per-replica batch size {batch}, got {size}")
    seeded_dropout.make_replayable(model)
    context = tf.distribute.get_replica_context()
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    chunks = batch // size
    # One seed per (step, replica, chunk): both passes over a chunk drop the same units.
    step = tf.cast(optimizer.iterations, tf.int64)
    first_chunk = tf.cast(context.replica_id_in_sync_group * chunks, tf.int64)

    def embed(index):
        part = dual_encoder.chunk_of_pairs(pairs, index, size)
        seed = tf.stack([step, first_chunk + tf.cast(index, tf.int64)])
        with seeded_dropout.dropout_seed(seed):
            return embed_pairs(part)

    def scale_loss(loss):
        scaled = loss / replicas
        if isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
            scaled = optimizer.get_scaled_loss(scaled)
        return scaled

    if other_forward is None:
        variables = model.trainable_variables
        losses, embeddings, grads = gradient_cache.cached_gradients(
            embed, chunks, lambda emb: task.compute_losses(inputs, assemble(None, emb)),
            variables, scale_loss)
        other = None
    else:
        # The whole loss is differentiated twice: through the pairs' embeddings with the
        # other outputs held constant (cached), and through the other outputs with the
        # embeddings held constant (one tape); the two gradients add up to the full one.
        with tf.GradientTape() as tape:
            other = other_forward()
            # Read after the other part's forward pass, which builds the layers of a model
            # not called before (a CMLM head's projections): all of them train.
            variables = model.trainable_variables
            with tape.stop_recording():
                held = tf.nest.map_structure(tf.stop_gradient, other)
                losses, embeddings, grads = gradient_cache.cached_gradients(
                    embed, chunks, lambda emb: task.compute_losses(inputs, assemble(held, emb)),
                    variables, scale_loss)
            total = task.compute_losses(
                inputs, assemble(other, tf.nest.map_structure(tf.stop_gradient, embeddings)))
            scaled = scale_loss(total["loss"])
        grads = [grad if other_grad is None else grad + tf.convert_to_tensor(other_grad)
                 for grad, other_grad in zip(grads, tape.gradient(scaled, variables))]
    if isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(list(zip(grads, variables)))
    if metrics:
        task.update_metrics(metrics, inputs, assemble(other, embeddings), losses)
    return {task.loss: losses["loss"]}


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

    A SentencePiece tokenizer without `sp_model_file` uses the run's `MODEL_DIR/sp.model`
    (`with_run_sentencepiece`); a task that can learn one says from what text in
    `sentencepiece_corpus`, and the driver learns it before the run starts.
    """

    def __init__(self, params, logging_dir: Optional[str] = None, name: Optional[str] = None):
        super().__init__(with_run_sentencepiece(params, logging_dir), logging_dir=logging_dir,
                         name=name)

    @classmethod
    def sentencepiece_corpus(cls, task_config) -> Optional[Tuple[Iterable[str], int]]:
        """What to learn the run's SentencePiece model from when `task_config` names none:
        (the training sentences, the most pieces), or None when this task learns none."""
        return None
