"""`cmlm_tf.load(export_dir).encode(texts)`: fast batched sentence embeddings in Python.

`load` opens the export's `serving/1` model and calls the functions the exporter saved in it
(`cmlm_tf.export.serving.ServingModule`): `tokenize`, and the inference forward that
`serving_default` also runs (`bucketed_*`, or the plain `pooled_*`). What stays in Python
is the batching (`cmlm_tf.text.batching`): texts are tokenised, sorted by token count and batched.
Each batch runs `bucketed_float32` / `bucketed_bfloat16`, which sort it again inside the graph
and run it in sub-batches padded only to their own longest text, as `serving_default` does.
With `jit_compile=True` each batch is instead padded to its length bucket (`bucket_length`)
and row count (`bucket_rows`) and runs the plain forward XLA-compiled, one graph per shape,
built once and reused (off by default: the saved graphs ran faster, docs/results.md). The
machine's side (bfloat16 support, thread pools) is `cmlm_tf.runtime.host`; MTEB's encoder over a
loaded model is `cmlm_tf.evaluation.mteb_adapter.MTEBEncoder`.
"""

import numbers
import os
import sys
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
from tqdm.auto import tqdm

from cmlm_tf.evaluation.pcr import PCRComponents
from cmlm_tf.export.export_metadata import (  # noqa: F401  (the others: read here by callers)
    FORMAT_VERSION,
    METADATA_FILE,
    PRECISIONS,
    check_metadata,
    read_metadata,
    serving_model_dir,
)
from cmlm_tf.runtime.host import (
    apply_thread_settings,
    int8_matmul_runs,
    warn_if_bfloat16_is_emulated,
)
from cmlm_tf.text.batching import bucket_length, bucket_rows, sorted_batches
from cmlm_tf.vectors import l2_normalize_array

TextInput = Union[str, bytes, Sequence[Union[str, bytes]]]

# Texts are tokenised this many batches at a time, then sorted by token count.
TOKENIZE_BATCHES = 16


def as_texts(texts) -> List[bytes]:
    """`encode`'s input as UTF-8 byte strings, checked.

    `str` items are encoded with lone surrogates kept as (invalid) bytes, which tokenisation
    replaces with U+FFFD like any other invalid UTF-8; `bytes` pass as they are. A mapping or
    a set (no order) and any other item type raise TypeError naming the problem.
    """
    if texts is None:
        raise TypeError("texts is None, expected str, bytes or a list of them")
    if isinstance(texts, (dict, set, frozenset)) or hasattr(texts, "keys"):
        raise TypeError(f"texts is a {type(texts).__name__}, which has no order of rows: "
                        "pass a list of str")
    if isinstance(texts, np.ndarray) and texts.ndim != 1:
        raise TypeError(f"texts is an array of shape {texts.shape}, expected one dimension")
    try:
        items = list(texts)
    except TypeError:
        raise TypeError(f"texts is {type(texts).__name__}, expected str, bytes or a list "
                        "of them") from None
    strings = []
    for index, item in enumerate(items):
        if isinstance(item, str):  # np.str_ too
            strings.append(item.encode("utf-8", errors="surrogatepass"))
        elif isinstance(item, (bytes, bytearray)):
            strings.append(bytes(item))
        else:
            raise TypeError(f"texts[{index}] is {type(item).__name__}, expected str or bytes")
    return strings


def _check_batch_size(batch_size) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
        raise TypeError(f"batch_size must be an int, got {type(batch_size).__name__} "
                        f"{batch_size!r}")
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    return int(batch_size)


class SentenceEncoderModel:
    """An exported cmlm_tf encoder, ready to embed text.

    The names sentence-transformers users know work too: `encode(...,
    normalize_embeddings=, show_progress_bar=, convert_to_numpy=, convert_to_tensor=)`,
    `similarity(a, b)`, `get_sentence_embedding_dimension()` and `max_seq_length`. For MTEB
    2.x, wrap it: `mteb.evaluate(mteb_adapter.MTEBEncoder(model), tasks)`
    (`cmlm_tf.evaluation.mteb_adapter`).

    Attributes:
        dim: embedding size (read from the SavedModel).
        seq_length: texts are truncated to this many tokens, `[CLS]` and `[SEP]` included.
        metadata: the export's `cmlm_tf_export.json`.
        precision: `float32`, `bfloat16` or `int8` (see `load`).
        jit_compile: whether the per-bucket graphs are XLA-compiled.
        threads: the thread settings asked of `load` and whether they took effect.
    """

    def __init__(self, export_dir: str, metadata: dict, serving, *, precision: str = "float32",
                 jit_compile: Optional[bool] = None,
                 threads: Optional[Dict[str, object]] = None):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.export_dir = export_dir
        self.metadata = metadata
        self.precision = precision
        self.threads = threads or {"intra_op_threads": None, "inter_op_threads": None,
                                   "applied": True}
        self._serving = serving
        self._pooled = getattr(serving, f"pooled_{precision}", None)
        # Exports written before the length buckets have only the plain forward.
        self._bucketed = getattr(serving, f"bucketed_{precision}", None)
        if self._pooled is None:
            raise ValueError(f"{export_dir}: the export has no {precision} forward "
                             f"(it has {metadata.get('precisions')})")
        described = {key: value.numpy() for key, value in serving.describe().items()}
        self.dim = int(described["dim"])
        self.seq_length = int(described["seq_length"])
        check_metadata(export_dir, metadata, described)
        # The saved float32 graphs ran faster than their XLA compilation (docs/results.md,
        # "`encode()` against sentence-transformers, plain graphs against XLA").
        self.jit_compile = bool(jit_compile)
        self._graphs = {}
        self.pcr = None

    @property
    def max_seq_length(self) -> int:
        """Texts are truncated to this many tokens (sentence-transformers' name)."""
        return self.seq_length

    def get_sentence_embedding_dimension(self) -> int:
        """The embedding size (sentence-transformers' name)."""
        return self.dim

    def set_pcr(self, components) -> None:
        """Attaches principal-component-removal components for `encode(..., language=...)`.

        Args:
            components: a `cmlm_tf.evaluation.pcr.PCRComponents`, the path of a file saved
                with `python -m cmlm_tf.evaluate ... --pcr --save_pcr F` (or the `pcr`
                task), or None to detach.
        """
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

    def encode(self, texts: TextInput, *, batch_size: int = 64, normalize: Optional[bool] = None,
               show_progress: Optional[bool] = None, language: Optional[str] = None,
               pcr=None, normalize_embeddings: Optional[bool] = None,
               show_progress_bar: Optional[bool] = None, convert_to_numpy: bool = True,
               convert_to_tensor: bool = False):
        """Embeds `texts`; returns float32 [n, dim] in input order (one string: [dim]).

        Texts are sorted by token count before batching, and each batch runs in
        sub-batches padded to their own longest text (with `jit_compile`: padded to its
        length bucket, one compiled graph per bucket), so batches pad little. Texts longer
        than `seq_length` tokens are truncated. `bytes` are decoded as UTF-8 with
        replacement (invalid bytes and lone surrogates become U+FFFD); another item type, a
        dict or a set raises TypeError. `show_progress=None` shows a progress bar when
        stderr is a terminal and the input spans many batches.

        Args:
            texts: a str or bytes, or a sequence of them.
            batch_size: texts per forward call.
            normalize: L2-normalise the vectors (default True); `normalize_embeddings` is
                the same switch under sentence-transformers' name.
            show_progress: progress bar on or off (`show_progress_bar`, the same).
            language: the texts' language, to remove its principal component (CMLM paper
                §5) with the attached components (`set_pcr`) or `pcr`; the vectors are
                L2-normalised again when `normalize`.
            pcr: a `PCRComponents` for this call.
            convert_to_numpy: return a NumPy array (the default); False gives a list of
                [dim] arrays, as sentence-transformers does.
            convert_to_tensor: return a `tf.Tensor` instead.
        """
        normalize = _either("normalize", normalize, "normalize_embeddings",
                            normalize_embeddings, default=True)
        show_progress = _either("show_progress", show_progress, "show_progress_bar",
                                show_progress_bar, default=None)
        batch_size = _check_batch_size(batch_size)
        components = self._pcr_for(language, pcr)
        single = isinstance(texts, (str, bytes, bytearray))
        strings = as_texts([texts] if single else texts)
        output = np.zeros([len(strings), self.dim], np.float32)
        if strings:
            if show_progress is None:
                show_progress = sys.stderr.isatty() and len(strings) >= 8 * batch_size
            progress = None
            if show_progress:
                progress = tqdm(total=len(strings), desc="encode", unit="sentence")
            for index, pooled in self._batches(strings, batch_size):
                output[index] = pooled
                if progress is not None:
                    progress.update(len(index))
            if progress is not None:
                progress.close()
            if normalize:
                output = l2_normalize_array(output)
            if components is not None:
                output = components.apply(output, language, renormalize=normalize)
        result = output[0] if single else output
        if convert_to_tensor:
            import tensorflow as tf

            return tf.constant(result)
        if not convert_to_numpy:
            return list(result) if not single else result
        return result

    def similarity(self, a, b) -> np.ndarray:
        """Cosine similarities float32 [len(a), len(b)] of two sets of vectors (or of texts,
        encoded first). A single vector or text counts as one row; an empty list, none (so
        `similarity([], [])` is [0, 0])."""
        a, b = self._rows("a", a), self._rows("b", b)
        if a.shape[1] != b.shape[1]:
            raise ValueError(f"a has vectors of dim {a.shape[1]} and b of dim {b.shape[1]}; "
                             "compare vectors of one model")
        return l2_normalize_array(a) @ l2_normalize_array(b).T

    def _rows(self, name: str, x) -> np.ndarray:
        """`similarity`'s argument as float32 [rows, dim]: texts encoded, a vector one row."""
        if _is_text_input(x):
            return np.atleast_2d(self.encode(x))
        vectors = np.asarray(x, np.float32)
        if vectors.ndim == 1 and vectors.size == 0:
            return np.zeros([0, self.dim], np.float32)
        if vectors.ndim > 2:
            raise ValueError(f"{name} has the shape {list(vectors.shape)}; pass texts, one "
                             "vector [dim] or vectors [n, dim]")
        return np.atleast_2d(vectors)

    def _batches(self, strings: List[bytes], batch_size: int):
        """Yields (indices into `strings`, float32 pooled [len(indices), dim]) per batch."""
        import tensorflow as tf

        # Texts are tokenised a chunk of batches at a time (by character length), then each
        # chunk is batched by token count.
        for chunk_index in sorted_batches([len(s) for s in strings],
                                          batch_size * TOKENIZE_BATCHES):
            tokens = self._serving.tokenize(tf.constant([strings[i] for i in chunk_index]))
            arrays = [tokens[key].numpy()
                      for key in ("input_word_ids", "input_mask", "input_type_ids")]
            lengths = arrays[1].sum(axis=1)
            for rows in sorted_batches(lengths, batch_size):
                length, padded_rows = int(lengths[rows].max()), len(rows)
                if self.jit_compile or self._bucketed is None:
                    # One graph per shape (XLA; an older export's plain forward): few shapes.
                    length = bucket_length(length, self.seq_length)
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
        """The forward for one bucket: the saved length-bucketed function, or the plain
        forward XLA-compiled for this shape."""
        if not self.jit_compile:
            return self._bucketed or self._pooled
        key = (rows, length)
        if key not in self._graphs:
            import tensorflow as tf

            spec = tf.TensorSpec([rows, length], tf.int32)
            function = tf.function(self._pooled, jit_compile=True)
            self._graphs[key] = function.get_concrete_function(spec, spec, spec)
        return self._graphs[key]

    def __repr__(self):
        return (f"SentenceEncoderModel({self.export_dir!r}, dim={self.dim}, "
                f"seq_length={self.seq_length}, precision={self.precision!r})")


def _either(name: str, value, alias: str, alias_value, *, default):
    if value is not None and alias_value is not None and value != alias_value:
        raise ValueError(f"{name}={value!r} and {alias}={alias_value!r} disagree; pass one")
    if value is not None:
        return value
    return alias_value if alias_value is not None else default


def _is_text_input(x) -> bool:
    if isinstance(x, (str, bytes)):
        return True
    return isinstance(x, (list, tuple)) and bool(x) and isinstance(x[0], (str, bytes))


def load(export_dir: str, *, precision: str = "float32", intra_op_threads: Optional[int] = None,
         inter_op_threads: Optional[int] = None,
         jit_compile: Optional[bool] = None) -> SentenceEncoderModel:
    """Loads a folder written by `python -m cmlm_tf.export`.

    Args:
        export_dir: the export folder.
        precision: `float32` (default), `bfloat16` or `int8`, each run by the graph TF
            Serving runs for it: `serving/1`, `serving_bf16/1` (exported with `--bf16`;
            exports without it run the bfloat16 functions of `serving/1`) and
            `serving_int8/1` (exported with `--int8`). bfloat16 is fast on CPUs with AMX /
            AVX512-BF16, GPUs and TPUs; on a CPU without native bfloat16 (and no GPU) it is
            emulated and slower: a warning says so, once. int8 runs oneDNN's int8 matmuls
            (VNNI, AMX). What each costs in STS-B Spearman: docs/results.md.
        intra_op_threads, inter_op_threads: TensorFlow thread pools (None: leave as is).
            Applied only if TensorFlow has not run anything yet in this process; otherwise
            a warning is logged and `model.threads["applied"]` is False.
        jit_compile: XLA-compile the per-bucket graphs (default off: the plain graphs
            measured faster, docs/results.md).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    metadata = read_metadata(export_dir)
    # From the files, before TensorFlow starts: a precision the export lacks is said at once.
    serving_dir = serving_model_dir(export_dir, metadata, precision)
    if not os.path.exists(os.path.join(serving_dir, "saved_model.pb")):
        raise FileNotFoundError(f"{serving_dir}/saved_model.pb: not found")
    threads = apply_thread_settings(intra_op_threads, inter_op_threads)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    if precision == "bfloat16":
        warn_if_bfloat16_is_emulated()
    if precision == "int8" and not int8_matmul_runs():
        raise ValueError(f"{export_dir}: precision='int8' needs TensorFlow's oneDNN int8 "
                         "matmul, which does not run here (is TF_ENABLE_ONEDNN_OPTS=0 set, or "
                         "is this not an x86-64 build?); use precision='float32'")
    try:
        serving = tf.saved_model.load(serving_dir)
    except (tf.errors.OpError, ValueError, IndexError, OSError) as e:
        text = " ".join(str(e).split())[:300] or type(e).__name__
        raise ValueError(f"{serving_dir}: cannot load the SavedModel (a damaged or truncated "
                         f"saved_model.pb or variables/ file? {type(e).__name__}: {text})"
                         ) from None
    return SentenceEncoderModel(export_dir, metadata, serving, precision=precision,
                                jit_compile=jit_compile, threads=threads)
