"""Cached-gradient training for in-batch contrastive losses (GradCache).

A contrastive loss such as the translation ranking of `margin_softmax` couples every row of
the batch with every other, so its batch cannot simply be split into accumulation steps. It
depends on the encoder's weights only through the embeddings, though, so its gradient can be
assembled in three passes that each hold one chunk's activations at a time:

1. embed the batch chunk by chunk, without a tape (no activations kept);
2. compute the loss over all embeddings (gathered across replicas as the loss itself does)
   and its gradient with respect to the embeddings, g;
3. embed each chunk again under a tape and back-propagate the chunk's slice of g into the
   weights, summing over chunks.

With the same dropout masks in passes 1 and 3 (`cmlm_tf.training.seeded_dropout`) the sum is
exactly the gradient of the uncached step, while memory grows with the chunk size instead of
the batch size: the price is a second forward pass per chunk.
"""

from typing import Any, Callable, Dict, List, Sequence, Tuple

import tensorflow as tf


def chunk(batch: Any, index: tf.Tensor, num_chunks: int) -> Any:
    """Chunk `index` of `num_chunks` equal chunks of every tensor in the nested `batch`.

    Each tensor's leading axis must be a static multiple of `num_chunks`; a tensor with k
    rows per example (hard negatives) keeps its k consecutive rows together. The chunk is
    gathered from a [num_chunks, rows, ...] view rather than sliced with tensor bounds, so
    its shape is static, as XLA (TPU, `jit_compile`) needs.

    Args:
        batch: nested structure of tensors with leading axes that `num_chunks` divides.
        index: int32 scalar (may be a tensor) in [0, num_chunks).
        num_chunks: how many chunks the batch is split into.
    """
    def take(value):
        rows = value.shape[0]
        if rows is None or rows % num_chunks:
            raise ValueError(f"a batch of {rows} rows cannot be split into {num_chunks} "
                             "equal chunks")
        return tf.gather(tf.reshape(value, [num_chunks, rows // num_chunks]
                                    + value.shape[1:].as_list()), index)

    return tf.nest.map_structure(take, batch)


def cached_gradients(
    embed: Callable[[tf.Tensor], Dict[str, tf.Tensor]],
    num_chunks: int,
    loss_fn: Callable[[Dict[str, tf.Tensor]], Dict[str, tf.Tensor]],
    variables: Sequence[tf.Variable],
    scale_loss: Callable[[tf.Tensor], tf.Tensor] = lambda loss: loss,
) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor], List[tf.Tensor]]:
    """The losses, the embeddings and the weights' gradients of a cached step.

    Args:
        embed: chunk index (int32 scalar tensor) -> dict of float [rows, dim] embeddings of
            that chunk; it must be deterministic for a given index (seeded dropout), and
            every chunk must give the same row counts.
        num_chunks: how many chunks the batch has.
        loss_fn: dict of the whole batch's embeddings (chunks concatenated in order) -> dict
            of losses with the scalar `loss`; may all-gather across replicas.
        variables: the weights to differentiate.
        scale_loss: what is differentiated, from `loss` (e.g. divided by the number of
            replicas, times a loss scale).

    Returns:
        (the losses of `loss_fn`, the embeddings, the gradients in `variables` order).
    """
    def embed_without_tape(index):
        return {key: tf.stop_gradient(value) for key, value in embed(index).items()}

    first = embed_without_tape(tf.constant(0))
    keys = sorted(first)
    if num_chunks > 1:
        rest = tf.map_fn(lambda i: embed_without_tape(i), tf.range(1, num_chunks),
                         fn_output_signature={k: tf.TensorSpec(first[k].shape, first[k].dtype)
                                              for k in keys},
                         parallel_iterations=1)
        embeddings = {k: tf.concat([first[k], tf.reshape(rest[k], [-1, first[k].shape[-1]])],
                                   0) for k in keys}
    else:
        embeddings = first
    with tf.GradientTape() as tape:
        tape.watch([embeddings[k] for k in keys])
        losses = loss_fn(embeddings)
        differentiated = scale_loss(losses["loss"])
    embedding_grads = dict(zip(keys, tape.gradient(differentiated,
                                                   [embeddings[k] for k in keys])))
    # [num_chunks, rows, dim], so each chunk's slice is a gather with a static shape (XLA).
    chunk_grads = {k: tf.reshape(embedding_grads[k], [num_chunks] + first[k].shape.as_list())
                   for k in keys}

    def backward_chunk(index, accumulated):
        with tf.GradientTape() as chunk_tape:
            chunk = embed(index)
            surrogate = tf.add_n([
                tf.reduce_sum(tf.cast(chunk[k], tf.float32) * tf.cast(
                    tf.gather(chunk_grads[k], index), tf.float32))
                for k in keys])
        grads = chunk_tape.gradient(surrogate, variables)
        return index + 1, [total + _dense(grad, variable) for total, grad, variable in
                           zip(accumulated, grads, variables)]

    zeros = [tf.zeros(variable.shape, variable.dtype) for variable in variables]
    _, grads = tf.while_loop(lambda index, _: index < num_chunks, backward_chunk,
                             (tf.constant(0), zeros), parallel_iterations=1)
    return losses, embeddings, grads


def _dense(grad, variable):
    if grad is None:
        return tf.zeros(variable.shape, variable.dtype)
    return tf.convert_to_tensor(grad)
