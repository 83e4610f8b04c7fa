"""Texts in batches of similar length: what `encode()` and the dev metrics share.

Sorting texts by length before batching keeps the padding of each batch small (as
sentence-transformers does); `encode_sorted` gives the rows back in input order. A batch that
runs a graph built for its shape is padded to a few shapes only: its length bucket
(`bucket_length`) and row count (`bucket_rows`). NumPy only.
"""

from typing import Callable, List, Sequence

import numpy as np


def bucket_length(num_tokens: int, seq_length: int) -> int:
    """The padded length of a batch whose longest text has `num_tokens` tokens.

    Multiples of 8 up to 64, of 16 up to 128, then of 32; never above `seq_length`. Few
    buckets keep the number of traced (and XLA-compiled) graphs small; the rounding wastes
    at most a few padding positions per batch.
    """
    step = 8 if num_tokens <= 64 else 16 if num_tokens <= 128 else 32
    return int(min(max(-(-num_tokens // step) * step, step), seq_length))


def bucket_rows(num_rows: int, batch_size: int) -> int:
    """Rows a batch is padded to: the next power of two, at most `batch_size`."""
    rows = 1
    while rows < num_rows:
        rows *= 2
    return min(rows, batch_size)


def sorted_batches(lengths: Sequence[int], batch_size: int) -> List[np.ndarray]:
    """Index arrays of consecutive batches of the positions sorted by decreasing length
    (stable: ties keep input order); together they cover every position once."""
    order = np.argsort(-np.asarray(lengths, np.int64), kind="stable")
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def encode_sorted(texts: Sequence, embed_batch: Callable[[list], np.ndarray],
                  batch_size: int) -> np.ndarray:
    """Embeds `texts` in batches of similar length; returns the rows in input order.

    `embed_batch(list of texts) -> float [len, dim]`. Sorting by length keeps the padding of
    each batch small (as sentence-transformers does); the one batching loop of `encode()`'s
    callers that hold a live model (dev metrics during training).
    """
    batches = sorted_batches([len(text) for text in texts], batch_size)
    vectors = [embed_batch([texts[i] for i in index]) for index in batches]
    output = np.empty((len(texts),) + vectors[0].shape[1:], vectors[0].dtype) if vectors \
        else np.zeros((0, 0), np.float32)
    for index, rows in zip(batches, vectors):
        output[index] = rows
    return output
