"""Cached-gradient training for in-batch contrastive losses (GradCache).

A contrastive loss such as the translation ranking of `margin_softmax` couples every row of
the batch with every other, so its batch cannot simply be split into accumulation steps. It
depends on the encoder's weights only through the embeddings, though, so its gradient can be
assembled in three passes that each hold one chunk's activations at a time:

1. embed the batch chunk by chunk, without a tape (no activations kept): `embed_in_chunks`;
2. compute the loss over all embeddings (gathered across replicas as the loss itself does)
   and its gradient with respect to the embeddings, g: the train step does this, under the
   tape that also differentiates the rest of the model's outputs, so the loss is computed
   once;
3. embed each chunk again under a tape and back-propagate the chunk's slice of g into the
   weights, summing over chunks: `chunk_gradients`.

With the same dropout masks in passes 1 and 3 (`cmlm_tf.training.seeded_dropout`) the sum is
exactly the gradient of the uncached step, while memory grows with the chunk size instead of
the batch size: the price is a second forward pass per chunk.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence

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


def embed_in_chunks(embed: Callable[[tf.Tensor], Dict[str, tf.Tensor]],
                    num_chunks: int) -> Dict[str, tf.Tensor]:
    """Pass 1: every chunk's embeddings, computed without a tape and concatenated in order.

    Args:
        embed: chunk index (int32 scalar tensor) -> dict of float [rows, dim] embeddings of
            that chunk; it must be deterministic for a given index (seeded dropout), and
            every chunk must give the same row counts.
        num_chunks: how many chunks the batch has.
    """
    def embed_without_tape(index):
        return {key: tf.stop_gradient(value) for key, value in embed(index).items()}

    first = embed_without_tape(tf.constant(0))
    if num_chunks == 1:
        return first
    keys = sorted(first)
    rest = tf.map_fn(embed_without_tape, tf.range(1, num_chunks),
                     fn_output_signature={k: tf.TensorSpec(first[k].shape, first[k].dtype)
                                          for k in keys},
                     parallel_iterations=1)
    return {k: tf.concat([first[k], tf.reshape(rest[k], [-1, first[k].shape[-1]])], 0)
            for k in keys}


def chunk_gradients(embed: Callable[[tf.Tensor], Dict[str, tf.Tensor]], num_chunks: int,
                    embedding_grads: Dict[str, Optional[tf.Tensor]],
                    variables: Sequence[tf.Variable]) -> List[tf.Tensor]:
    """Pass 3: the weights' gradients, each chunk embedded again under a tape and its slice
    of `embedding_grads` (pass 2: the differentiated loss's gradient with respect to the
    output of `embed_in_chunks`, None for an embedding the loss does not read) back-propagated,
    summed over the chunks. Returns dense gradients in `variables` order."""
    keys = sorted(k for k, grad in embedding_grads.items() if grad is not None)
    # [num_chunks, rows, dim], so each chunk's slice is a gather with a static shape (XLA).
    chunk_grads = {k: tf.reshape(embedding_grads[k],
                                 [num_chunks, -1, embedding_grads[k].shape[-1]])
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
    return grads


def _dense(grad, variable):
    if grad is None:
        return tf.zeros(variable.shape, variable.dtype)
    return tf.convert_to_tensor(grad)
