"""The train and validation steps of every task, and their XLA compilation.

One train step serves every objective. A task hands it the forward pass of its model and,
where its loss ranks every row of the batch against every other (translation ranking), that
part separately as a `RankedPart`: those rows are embedded in chunks of the size the task
configures with cached gradients (`gradient_cache`), so memory
follows the chunk and not the batch, and the update stays the one of a single tape. Without
a chunk size the ranked rows form one chunk, which is embedded once under the step's own
tape: the ordinary step.

Per replica, the step differentiates the task's `loss` plus `model.losses` (weight
penalties), divided by the number of replicas; gradients are summed across replicas by the
optimizer, and a `LossScaleOptimizer` (mixed precision) scales and unscales them.
"""

import dataclasses
from typing import Any, Callable, Dict, Optional

import tensorflow as tf
import tf_keras

from cmlm_tf.training import gradient_cache, recompute, seeded_dropout


@dataclasses.dataclass(frozen=True)
class RankedPart:
    """Rows of a batch whose loss couples each with every other, embedded apart.

    Attributes:
        features: the nested rows (e.g. the `source`, `target` and `hard_negatives` input
            dicts of a bitext batch); every tensor's leading axis is a static multiple of
            `batch_size`.
        embed: a chunk of `features` (same structure, fewer rows) -> dict of float
            [rows, dim] embeddings, in training mode.
        batch_size: the examples per replica in `features`.
        chunk_size: examples per chunk; 0 (or `batch_size`) embeds them in one chunk.
        field: the task's config field of `chunk_size`, for errors.
    """

    features: Any
    embed: Callable[[Any], Dict[str, tf.Tensor]]
    batch_size: int
    chunk_size: int
    field: str

    @property
    def num_chunks(self) -> int:
        size = self.chunk_size or self.batch_size
        if size < 0 or self.batch_size % size:
            raise ValueError(f"{self.field} must be positive and divide the per-replica batch "
                             f"size {self.batch_size}, got {self.chunk_size}")
        return self.batch_size // size


def _scale(loss: tf.Tensor, optimizer) -> tf.Tensor:
    """What a replica differentiates: its share of the global loss, loss-scaled if needed."""
    scaled = loss / tf.distribute.get_strategy().num_replicas_in_sync
    if isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
        scaled = optimizer.get_scaled_loss(scaled)
    return scaled


def dense_gradient(grad):
    """`grad` as a dense tensor where it is a `tf.IndexedSlices` (the gradient of an embedding
    lookup), else as it is.

    Handed sparse gradients, Keras optimizers first sum the rows of repeated ids with
    `tf.unique`, which XLA lowers to two sorts and a serial loop over every token id of the
    batch: cheap on a CPU, but 94 % of a MiniLM-size step on a GPU. Summing the rows into the
    dense table is one scatter-add, parallel on every device, and Adam-style optimizers
    update every row of the table either way (their moments decay everywhere), so the update
    is the same.
    """
    if isinstance(grad, tf.IndexedSlices):
        return tf.convert_to_tensor(grad)
    return grad


def _add(grad, other):
    if grad is None:
        return other
    if other is None:
        return grad
    return tf.convert_to_tensor(grad) + tf.convert_to_tensor(other)


# The steps have no Python control flow on tensors: AutoGraph would convert them and every
# Keras layer they call at each trace, seconds before every first step (and twice as long
# on busy cores).
@tf.autograph.experimental.do_not_convert
def train_step(task, inputs, model: tf_keras.Model, optimizer, *, metrics=None,
               forward: Optional[Callable[[], Any]],
               ranked: Optional[RankedPart],
               assemble: Callable[[Any, Any], Any]) -> Dict[str, tf.Tensor]:
    """One update of `model` from `inputs`; returns `{task.loss: the replica's loss}`.

    Args:
        task: computes `compute_losses(inputs, outputs)` (a dict with the scalar `loss`) and
            `update_metrics(metrics, inputs, outputs, losses)`.
        forward: () -> the model's outputs except the ranked part's, in training mode;
            None when the ranked part is the whole forward pass.
        ranked: the rows embedded apart (chunked when its `chunk_size` asks), or None.
        assemble: (forward's outputs or None, the ranked embeddings or None) -> the outputs
            `compute_losses` takes (the task's `assemble_outputs`).
    """
    chunks = ranked.num_chunks if ranked is not None else 1
    # Attention cores and feed-forward activations recompute their largest intermediates in
    # the backward pass instead of keeping them (`recompute`).
    recompute.make_lean(model)
    with tf.GradientTape() as tape:
        other = forward() if forward is not None else None
        embeddings = None
        if ranked is not None and chunks == 1:
            embeddings = ranked.embed(ranked.features)
        # Read after the forward pass, which builds the layers of a model not called before
        # (a CMLM head's projections): all of them train.
        variables = model.trainable_variables
        if chunks > 1:
            # Cached gradients: the chunks are embedded without this tape, which watches
            # their embeddings instead; their gradient is back-propagated chunk by chunk
            # after it (`gradient_cache`), and adds to the one through the other outputs.
            embed_chunk = _replayable_chunks(ranked, model, optimizer, chunks)
            with tape.stop_recording():
                embeddings = gradient_cache.embed_in_chunks(embed_chunk, chunks)
            tape.watch(embeddings)
        outputs = assemble(other, embeddings)
        losses = task.compute_losses(inputs, outputs)
        loss = losses["loss"]
        if model.losses:
            loss += tf.add_n(model.losses)
        scaled = _scale(loss, optimizer)
    if chunks > 1:
        grads, embedding_grads = tape.gradient(scaled, (variables, embeddings))
        cached_grads = gradient_cache.chunk_gradients(embed_chunk, chunks, embedding_grads,
                                                      variables)
        grads = [_add(grad, cached) for grad, cached in zip(grads, cached_grads)]
    else:
        grads = tape.gradient(scaled, variables)
    grads = [dense_gradient(grad) for grad in grads]
    if isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(list(zip(grads, variables)))
    if metrics:
        task.update_metrics(metrics, inputs, outputs, losses)
    return {task.loss: loss}


def _replayable_chunks(ranked: RankedPart, model: tf_keras.Model, optimizer, chunks: int):
    """chunk index -> the chunk's embeddings, with dropout masks that both passes of the
    cached gradient draw alike: one seed per (step, replica, chunk)."""
    replay = seeded_dropout.make_replayable(model)
    context = tf.distribute.get_replica_context()
    step = tf.cast(optimizer.iterations, tf.int64)
    first_chunk = tf.cast(context.replica_id_in_sync_group * chunks, tf.int64)

    def embed(index):
        seed = tf.stack([step, first_chunk + tf.cast(index, tf.int64)])
        with replay.seeded(seed):
            return ranked.embed(gradient_cache.chunk(ranked.features, index, chunks))

    return embed


@tf.autograph.experimental.do_not_convert
def validation_step(task, inputs, model: tf_keras.Model, metrics=None) -> Dict[str, tf.Tensor]:
    """The task's losses on `inputs` in inference mode; updates `metrics`."""
    outputs = model(inputs, training=False)
    losses = task.compute_losses(inputs, outputs)
    if metrics:
        task.update_metrics(metrics, inputs, outputs, losses)
    return {task.loss: losses["loss"]}


def compile_steps(task, runtime=None) -> None:
    """Makes `task`'s train and validation steps XLA-compiled (`runtime.enable_xla`).

    Model Garden's trainer compiles the train step only, and only on GPUs; a TPU compiles
    both steps whole, so this runs that code path on any device: each step becomes one
    `tf.function(jit_compile=True)`, traced inside the trainer's replica function. The
    inputs must have static shapes (`cmlm_tf.data.pipeline.batch_and_featurize`).

    Where the trainer compiles the train step itself (`runtime.enable_xla` with
    `runtime.num_gpus > 0`), only the validation step is compiled here, so the train step is
    wrapped and traced once.
    """
    if not trainer_compiles_train_step(runtime):
        task.train_step = tf.function(task.train_step, jit_compile=True)
    task.validation_step = tf.function(task.validation_step, jit_compile=True)


def trainer_compiles_train_step(runtime) -> bool:
    """Whether Model Garden's `base_trainer.Trainer` wraps `task.train_step` in
    `tf.function(jit_compile=True)` itself under `runtime` (a `RuntimeConfig`)."""
    return bool(runtime is not None and runtime.enable_xla and runtime.num_gpus > 0)

