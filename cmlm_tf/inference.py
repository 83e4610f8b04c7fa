"""`cmlm_tf.load(export_dir).encode(texts)`: fast batched sentence embeddings in Python."""

import json
import os
import sys
from typing import Iterable, List, Optional, Sequence, Union

import numpy as np

METADATA_FILE = "cmlm_tf_export.json"
FORMAT_VERSION = 1

TextInput = Union[str, bytes, Sequence[Union[str, bytes]]]


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
    """

    def __init__(self, export_dir: str, metadata: dict, serving):
        self.export_dir = export_dir
        self.metadata = metadata
        self.dim = int(metadata["dim"])
        self.seq_length = int(metadata["seq_length"])
        self._serving = serving
        self._encode_fn = serving.encode
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

        Texts are sorted by length before batching so each batch pads little, and batches
        reuse one traced graph. Texts longer than `seq_length` tokens are truncated. `bytes`
        are decoded as UTF-8 with replacement; any other item type raises TypeError naming
        its index. `show_progress=None` shows a progress bar when stderr is a terminal and the
        input spans many batches.

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

    def __repr__(self):
        return (f"SentenceEncoderModel({self.export_dir!r}, dim={self.dim}, "
                f"seq_length={self.seq_length})")


def load(export_dir: str) -> SentenceEncoderModel:
    """Loads a folder written by `python -m export.export_tfhub`."""
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
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    serving_dir = os.path.join(export_dir, "serving", "1")
    if not os.path.exists(os.path.join(serving_dir, "saved_model.pb")):
        raise FileNotFoundError(f"{serving_dir}/saved_model.pb: not found")
    return SentenceEncoderModel(export_dir, metadata, tf.saved_model.load(serving_dir))
