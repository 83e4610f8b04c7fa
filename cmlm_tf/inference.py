"""`cmlm_tf.load(export_dir).encode(texts)`: fast batched sentence embeddings in Python.

The fast path: texts are tokenised with the export's own tokenizer, sorted by token count,
batched, and each batch is padded only to its length bucket (`bucket_length`), not to
`seq_length`. Each (rows, bucket) shape runs one traced graph, built once and reused across
calls, of `cmlm_tf.fast_encoder.LeanEncoder`: the exported encoder's arithmetic rebuilt from
its variables, XLA-compiled in float32 and with bfloat16 matmuls in `precision="bfloat16"`.
"""

import json
import logging
import os
import sys
import warnings
from typing import Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

METADATA_FILE = "cmlm_tf_export.json"
FORMAT_VERSION = 1

TextInput = Union[str, bytes, Sequence[Union[str, bytes]]]

PRECISIONS = ("float32", "bfloat16")
# Texts are tokenised this many batches at a time, then sorted by token count.
_TOKENIZE_BATCHES = 16


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


def apply_thread_settings(intra_op_threads: Optional[int],
                          inter_op_threads: Optional[int]) -> Dict[str, object]:
    """Sets TensorFlow's thread pools if its runtime has not started yet.

    Returns `{"intra_op_threads", "inter_op_threads", "applied"}`. TensorFlow fixes its pools
    when it first runs an op; after that a different request cannot take effect: it is logged
    as a warning and reported with `applied=False` (a request equal to the current setting
    counts as applied).
    """
    import tensorflow as tf

    settings = {"intra_op_threads": intra_op_threads, "inter_op_threads": inter_op_threads,
                "applied": True}
    threading = tf.config.threading
    setters = (
        (intra_op_threads, threading.get_intra_op_parallelism_threads,
         threading.set_intra_op_parallelism_threads),
        (inter_op_threads, threading.get_inter_op_parallelism_threads,
         threading.set_inter_op_parallelism_threads),
    )
    for value, getter, setter in setters:
        if value is None:
            continue
        if value < 0:
            raise ValueError(f"thread counts must be >= 0 (0 = TensorFlow's default), "
                             f"got {value}")
        if getter() == value:
            continue
        try:
            setter(int(value))
        except RuntimeError:
            settings["applied"] = False
    if not settings["applied"]:
        message = (f"cmlm_tf.load: thread settings intra_op_threads={intra_op_threads}, "
                   f"inter_op_threads={inter_op_threads} not applied: TensorFlow's runtime "
                   "has already started in this process (pass them to the first load(), "
                   "before any other TensorFlow work)")
        logging.getLogger(__name__).warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    return settings


def _as_text(item, index: int) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, (bytes, bytearray)):
        return bytes(item).decode("utf-8", errors="replace")
    if isinstance(item, np.str_):
        return str(item)
    raise TypeError(f"texts[{index}] is {type(item).__name__}, expected str or bytes")


class SentenceEncoderModel:
    """An exported cmlm_tf encoder, ready to embed text.

    Attributes:
        dim: embedding size.
        seq_length: texts are truncated to this many tokens, `[CLS]` and `[SEP]` included.
        metadata: the export's `cmlm_tf_export.json`.
        precision: `float32` or `bfloat16` (matmuls and the feed-forward activation in
            bfloat16; LayerNorm, softmax, residual additions and pooling in float32).
        jit_compile: whether the per-bucket graphs are XLA-compiled.
        fast_path: False when the export's encoder layout is not one `LeanEncoder` knows;
            `encode` then calls the exported `encode` function batch by batch.
        threads: the thread settings asked of `load` and whether they took effect.
    """

    def __init__(self, export_dir: str, metadata: dict, serving, precision: str = "float32",
                 jit_compile: Optional[bool] = None,
                 threads: Optional[Dict[str, object]] = None):
        from cmlm_tf.fast_encoder import LeanEncoder

        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.export_dir = export_dir
        self.metadata = metadata
        self.dim = int(metadata["dim"])
        self.seq_length = int(metadata["seq_length"])
        self.precision = precision
        self.threads = threads or {"intra_op_threads": None, "inter_op_threads": None,
                                   "applied": True}
        self._serving = serving
        self._encode_fn = serving.encode
        self._lean = LeanEncoder.from_module(serving.encoder, metadata.get("encoder", {}),
                                             precision)
        self.fast_path = self._lean is not None
        if not self.fast_path and precision != "float32":
            raise ValueError(f"{export_dir}: precision={precision!r} needs the BertEncoderV2 "
                             "layout that export.export_tfhub writes; this export's encoder "
                             "is different, load it with precision='float32'")
        # XLA fuses the float32 elementwise work; for bfloat16 matmuls TensorFlow's own
        # oneDNN kernels (AMX) beat XLA's CPU backend (docs/results.md, "Performance").
        self.jit_compile = (precision == "float32") if jit_compile is None else jit_compile
        self._graphs = {}
        self.pcr = None

    def set_pcr(self, components) -> None:
        """Attaches principal-component-removal components for `encode(..., language=...)`.

        Args:
            components: a `cmlm_tf.evaluation.pcr.PCRComponents`, the path of a file saved
                with `python -m cmlm_tf.evaluate ... --pcr --save_pcr F` (or the `pcr`
                task), or None to detach.
        """
        from cmlm_tf.evaluation.pcr import PCRComponents

        if isinstance(components, (str, os.PathLike)):
            components = PCRComponents.load(os.fspath(components))
        if components is not None and not isinstance(components, PCRComponents):
            raise TypeError(f"components is {type(components).__name__}, expected "
                            "PCRComponents, a file path or None")
        if components is not None and components.dim not in (None, self.dim):
            raise ValueError(f"PCR components have dim {components.dim} but the model "
                             f"embeds to {self.dim}")
        self.pcr = components

    def _pcr_for(self, language: Optional[str], pcr):
        """The components to apply for `language`, checked before any encoding."""
        if language is None:
            if pcr is not None:
                raise ValueError("pcr= needs language= to pick the component to remove")
            return None
        components = pcr if pcr is not None else self.pcr
        if components is None:
            raise ValueError(f"language={language!r} needs PCR components: call "
                             "set_pcr(...) first or pass pcr=")
        components.component(language)
        return components

    def encode(self, texts: TextInput, batch_size: int = 64, normalize: bool = True,
               show_progress: Optional[bool] = None, language: Optional[str] = None,
               pcr=None) -> np.ndarray:
        """Embeds `texts`; returns float32 [n, dim] in input order (one string: [dim]).

        Texts are sorted by token count before batching and each batch is padded to its
        length bucket, so batches pad little and reuse one traced graph per bucket. Texts
        longer than `seq_length` tokens are truncated. `bytes` are decoded as UTF-8 with
        replacement; any other item type raises TypeError naming its index.
        `show_progress=None` shows a progress bar when stderr is a terminal and the input
        spans many batches.

        With `language`, the texts are taken to be in that language and its principal
        component is removed (CMLM paper §5): from the attached components (`set_pcr`) or
        from `pcr` (a `PCRComponents`). The vectors are L2-normalised again when `normalize`;
        without `normalize`, the component is removed from the raw pooled vectors.
        """
        import tensorflow as tf

        components = self._pcr_for(language, pcr)

        single = isinstance(texts, (str, bytes, bytearray))
        items: Iterable = [texts] if single else texts
        if items is None:
            raise TypeError("texts is None, expected str, bytes or a list of them")
        try:
            strings: List[str] = [_as_text(item, i) for i, item in enumerate(items)]
        except TypeError as e:
            if "texts[" in str(e):
                raise
            raise TypeError(f"texts is {type(texts).__name__}, expected str, bytes or a list "
                            "of them") from None
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        output = np.zeros([len(strings), self.dim], np.float32)
        if not strings:
            return output
        order = np.argsort([-len(s) for s in strings], kind="stable")
        starts = range(0, len(strings), batch_size)
        if show_progress is None:
            show_progress = sys.stderr.isatty() and len(starts) >= 8
        progress = None
        if show_progress:
            from tqdm.auto import tqdm

            progress = tqdm(total=len(strings), desc="encode", unit="sentence")
        if self.fast_path:
            for index, pooled in self._fast_batches(strings, order, batch_size):
                output[index] = pooled
                if progress is not None:
                    progress.update(len(index))
            if normalize:
                # As tf.math.l2_normalize(epsilon=1e-12) in the exported signatures.
                squares = np.maximum((output * output).sum(axis=1, keepdims=True), 1e-12)
                output /= np.sqrt(squares)
        else:
            key = "embeddings" if normalize else "pooled_output"
            for start in starts:
                index = order[start:start + batch_size]
                batch = tf.constant([strings[i].encode("utf-8") for i in index], tf.string)
                output[index] = self._encode_fn(batch)[key].numpy()
                if progress is not None:
                    progress.update(len(index))
        if progress is not None:
            progress.close()
        if components is not None:
            output = components.apply(output, language, renormalize=normalize)
        return output[0] if single else output

    def _fast_batches(self, strings: List[str], order: np.ndarray, batch_size: int):
        """Yields (indices into `strings`, float32 pooled [len(indices), dim]) per batch."""
        import tensorflow as tf

        chunk = batch_size * _TOKENIZE_BATCHES
        for chunk_start in range(0, len(strings), chunk):
            chunk_index = order[chunk_start:chunk_start + chunk]
            tokens = self._serving.tokenize(tf.constant(
                [strings[i].encode("utf-8") for i in chunk_index], tf.string))
            arrays = [tokens[key].numpy()
                      for key in ("input_word_ids", "input_mask", "input_type_ids")]
            lengths = arrays[1].sum(axis=1)
            by_length = np.argsort(-lengths, kind="stable")
            for start in range(0, len(chunk_index), batch_size):
                rows = by_length[start:start + batch_size]
                length = bucket_length(int(lengths[rows].max()), self.seq_length)
                padded_rows = bucket_rows(len(rows), batch_size)
                batch = []
                for array in arrays:
                    padded = np.zeros([padded_rows, length], np.int32)
                    width = min(length, array.shape[1])
                    padded[:len(rows), :width] = array[rows, :width]
                    batch.append(padded)
                pooled = self._graph(padded_rows, length)(*batch).numpy()
                yield chunk_index[rows], pooled[:len(rows)]

    def _graph(self, rows: int, length: int):
        """The traced (and, with `jit_compile`, XLA-compiled) forward for one bucket."""
        key = (rows, length)
        if key not in self._graphs:
            import tensorflow as tf

            spec = tf.TensorSpec([rows, length], tf.int32)
            function = tf.function(self._lean.__call__, jit_compile=self.jit_compile)
            self._graphs[key] = function.get_concrete_function(spec, spec, spec)
        return self._graphs[key]

    def __repr__(self):
        return (f"SentenceEncoderModel({self.export_dir!r}, dim={self.dim}, "
                f"seq_length={self.seq_length}, precision={self.precision!r})")


def load(export_dir: str, precision: str = "float32", intra_op_threads: Optional[int] = None,
         inter_op_threads: Optional[int] = None,
         jit_compile: Optional[bool] = None) -> SentenceEncoderModel:
    """Loads a folder written by `python -m export.export_tfhub`.

    Args:
        export_dir: the export folder.
        precision: `float32` (default) or `bfloat16`: matmuls and the feed-forward
            activation in bfloat16 (fast on CPUs with AMX / AVX512-BF16, GPUs and TPUs),
            LayerNorm, softmax and pooling in float32. all-MiniLM-L6-v2's STS-B dev Spearman
            stays within 0.0001 of float32 (docs/results.md).
        intra_op_threads, inter_op_threads: TensorFlow thread pools (None: leave as is).
            Applied only if TensorFlow has not run anything yet in this process; otherwise
            a warning is logged and `model.threads["applied"]` is False.
        jit_compile: XLA-compile the per-bucket graphs (None: on for float32, off for
            bfloat16, whichever measured faster).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    meta_path = os.path.join(export_dir, METADATA_FILE)
    if not os.path.isdir(export_dir):
        raise FileNotFoundError(f"{export_dir}: export directory not found")
    if not os.path.exists(meta_path):
        raise FileNotFoundError(
            f"{meta_path}: not found; is {export_dir} written by export.export_tfhub?")
    try:
        with open(meta_path, encoding="utf-8") as f:
            metadata = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{meta_path}: cannot read export metadata ({e})") from None
    if metadata.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{meta_path}: unsupported format_version "
                         f"{metadata.get('format_version')!r} (expected {FORMAT_VERSION})")
    threads = apply_thread_settings(intra_op_threads, inter_op_threads)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    serving_dir = os.path.join(export_dir, "serving", "1")
    if not os.path.exists(os.path.join(serving_dir, "saved_model.pb")):
        raise FileNotFoundError(f"{serving_dir}/saved_model.pb: not found")
    return SentenceEncoderModel(export_dir, metadata, tf.saved_model.load(serving_dir),
                                precision=precision, jit_compile=jit_compile, threads=threads)
