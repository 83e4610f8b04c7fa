"""MTEB 2.x for cmlm_tf exports: a loaded model as an MTEB encoder (`MTEBEncoder`), and the
runner of `python -m cmlm_tf.evaluate mteb`.

MTEB calls `model.encode(DataLoader, task_metadata=, hf_split=, hf_subset=, prompt_type=,
batch_size=, show_progress_bar=)`. `MTEBEncoder` wraps a `SentenceEncoderModel`
(`cmlm_tf.load(path)`): its `encode` hands such a call to `loader_texts`, which gathers the
loader's texts; they are then embedded by the model like any list (sorted by length,
L2-normalised), so MTEB scores the vectors `encode(texts)` gives. The wrapper adds the rest of
MTEB's `EncoderProtocol`: `mteb_model_meta` (the export's name, dimension and maximum length)
and `similarity_pairwise`.

MTEB, torch and sentence-transformers are the optional extra `pip install 'cmlm_tf[mteb]'`:
nothing here imports them until MTEB itself is in use.
"""

import functools
import inspect
import logging
import os
import sys
from typing import Dict, List, Sequence

import numpy as np

from cmlm_tf.evaluation import sts

INSTALL_HINT = "pip install 'cmlm_tf[mteb]'"
# MTEB's name of an export is `cmlm_tf/<export folder name>` (it wants `organization/name`).
NAME_PREFIX = "cmlm_tf/"
# The keyword arguments of MTEB's encoder protocol besides its encode options: they choose
# prompts, and these encoders take none.
PROTOCOL_KEYWORDS = ("task_metadata", "hf_split", "hf_subset", "prompt_type")


def import_mteb():
    """The `mteb` module; ImportError with the install line when it is missing."""
    try:
        import mteb
    except ImportError as error:
        raise ImportError(f"MTEB is not installed ({error}); {INSTALL_HINT}") from None
    return mteb


def is_data_loader(inputs) -> bool:
    """Whether `inputs` is a torch DataLoader (checked without importing torch)."""
    data = sys.modules.get("torch.utils.data")
    return data is not None and isinstance(inputs, data.DataLoader)


def loader_texts(inputs, **call) -> List[str]:
    """The texts of an MTEB encode call, in the loader's order.

    Args:
        inputs: MTEB's `DataLoader[BatchedInput]`; each batch a mapping whose `text` is a
            list of strings (a retrieval corpus has its title and body joined there already).
        **call: the protocol's `task_metadata`, `hf_split`, `hf_subset`, `prompt_type` (they
            pick prompts, and these encoders take none, so a text embeds the same way for
            any of them) and `precision`, sentence-transformers' output quantisation: only
            float32 (or None) is produced. Other names (a newer MTEB's options) are ignored
            with a warning, once. Without a loader or a protocol keyword this is no MTEB
            call: any keyword is a TypeError, as for any function.

    Returns:
        list of str, one per row of the loader.
    """
    if not is_data_loader(inputs) and not set(call) & set(PROTOCOL_KEYWORDS):
        raise TypeError(f"encode() got unexpected keyword arguments: {', '.join(sorted(call))}")
    precision = call.pop("precision", None)
    if precision not in (None, "float32"):
        raise ValueError(f"precision={precision!r}: cmlm_tf encoders give float32 embeddings "
                         "only; leave precision out of MTEB's encode_kwargs")
    unknown = tuple(sorted(set(call) - set(PROTOCOL_KEYWORDS)))
    if unknown:
        warn_ignored_once(unknown)
    texts = []
    for number, batch in enumerate(inputs):
        if not hasattr(batch, "keys") or "text" not in batch:
            keys = sorted(batch) if hasattr(batch, "keys") else type(batch).__name__
            raise ValueError(f"MTEB batch {number} has no 'text' field (it has {keys}): "
                             "cmlm_tf encoders embed text only")
        texts.extend(batch["text"])
    return texts


def model_name(export_dir: str) -> str:
    """MTEB's `organization/name` for an export: `cmlm_tf/<folder name>`."""
    return NAME_PREFIX + os.path.basename(os.path.normpath(os.path.abspath(export_dir)))


def model_meta(model):
    """The `mteb.models.ModelMeta` of a `SentenceEncoderModel`.

    Name `cmlm_tf/<export folder>`; revision: the first 12 hex digits of the exported
    checkpoint's SHA-256 (so MTEB's result folders keep different exports of one folder
    apart); `embed_dim` and `max_tokens` from the SavedModel; cosine similarity.
    """
    from mteb.models import ModelMeta

    source = model.metadata.get("source") or {}
    digest = source.get("checkpoint_sha256") if isinstance(source, dict) else None
    exported = str(model.metadata.get("exported_at") or "")[:10] or None
    return ModelMeta(
        loader=None, name=model_name(model.export_dir),
        revision=digest[:12] if isinstance(digest, str) and digest else None,
        release_date=exported, languages=None, n_parameters=None, memory_usage_mb=None,
        max_tokens=model.seq_length, embed_dim=model.dim, license=None, open_weights=None,
        public_training_code=None, public_training_data=None, framework=["TensorFlow"],
        similarity_fn_name="cosine", use_instructions=False, training_datasets=None,
        modalities=["text"], model_type=["dense"])


class MTEBEncoder:
    """A loaded export as MTEB's encoder: `mteb.evaluate(MTEBEncoder(cmlm_tf.load(path)),
    tasks)`.

    Args:
        model: a `SentenceEncoderModel`; its `export_dir`, `metadata`, `dim` and `seq_length`
            name and describe it to MTEB.
    """

    def __init__(self, model):
        self.model = model

    def encode(self, inputs, **call):
        """The model's `encode` of MTEB's `DataLoader` (its texts, `loader_texts`), or of texts.

        Keywords of the model's `encode` (`batch_size`, `show_progress_bar`, ...) go to it;
        the others are MTEB's protocol keywords, read by `loader_texts`.
        """
        own = inspect.signature(self.model.encode).parameters
        options = {name: call.pop(name) for name in list(call) if name in own}
        if call or is_data_loader(inputs):
            inputs = loader_texts(inputs, **call)
        return self.model.encode(inputs, **options)

    def similarity(self, a, b) -> np.ndarray:
        """Cosine similarities float32 [len(a), len(b)] (the model's `similarity`)."""
        return self.model.similarity(a, b)

    @property
    def mteb_model_meta(self):
        """`mteb.models.ModelMeta`: name, dimension and maximum length (`model_meta`).
        Without MTEB installed there is none: AttributeError, so `hasattr` says False."""
        try:
            import_mteb()
        except ImportError:
            raise AttributeError("mteb_model_meta needs MTEB, which is not installed: "
                                 f"{INSTALL_HINT}") from None
        return model_meta(self.model)

    def similarity_pairwise(self, embeddings1, embeddings2) -> np.ndarray:
        """Cosine similarity of row i of `embeddings1` [n, dim] with row i of
        `embeddings2` [n, dim]: float32 [n]."""
        first, second = (np.atleast_2d(np.asarray(x, np.float32))
                         for x in (embeddings1, embeddings2))
        return sts.cosine_pairs(first, second).astype(np.float32)


def resolve_tasks(names: Sequence[str]):
    """MTEB tasks by name; `names` may hold comma-separated lists. A name MTEB does not
    know raises ValueError naming it."""
    mteb = import_mteb()
    wanted = [name.strip() for value in names for name in value.split(",") if name.strip()]
    if not wanted:
        raise ValueError("--tasks: no task name given (e.g. --tasks STSBenchmark)")
    try:
        return list(mteb.get_tasks(tasks=wanted))
    except KeyError as error:
        raise ValueError(f"--tasks: {str(error.args[0]) if error.args else error} "
                         "(see `mteb.get_tasks()` for the names)") from None


def evaluate_encoder(encoder: MTEBEncoder, tasks: Sequence, output_folder: str,
                     *, batch_size: int = 64, overwrite: bool = False) -> Dict[str, object]:
    """Runs MTEB tasks on a loaded export and writes MTEB's result files.

    Args:
        encoder: the export loaded and wrapped, `MTEBEncoder(cmlm_tf.load(export_dir))`.
        tasks: MTEB task objects (`resolve_tasks`, or a task defined in code).
        output_folder: MTEB's result cache; the results land in
            `<output_folder>/results/cmlm_tf__<folder>/<revision>/<Task>.json`.
        batch_size: texts per forward call.
        overwrite: run again even where the folder already holds results (by default MTEB
            reuses them).

    Returns:
        {"scores": {task: {split: {metric, or subset.metric: main score}}}, "files": the
        result files}: each task's main score per split (and per subset, where a task has
        several).
    """
    mteb = import_mteb()
    tasks = list(tasks)
    cache = mteb.ResultCache(output_folder)
    result = mteb.evaluate(encoder, tasks, cache=cache, encode_kwargs={"batch_size": batch_size},
                           overwrite_strategy="always" if overwrite else "only-missing",
                           show_progress_bar=False)
    main_scores = {task.metadata.name: task.metadata.main_score for task in tasks}
    meta = encoder.mteb_model_meta
    scores, files = {}, []
    for task_result in result.task_results:
        name = task_result.task_name
        metric = main_scores[name]
        files.append(str(cache.get_task_result_path(task_name=name, model_name=meta)))
        for split, entries in task_result.scores.items():
            for entry in entries:
                subset = entry.get("hf_subset", "default")
                key = metric if subset == "default" else f"{subset}.{metric}"
                scores.setdefault(name, {}).setdefault(split, {})[key] = float(
                    entry["main_score"])
    return {"scores": scores, "files": files}


@functools.cache
def warn_ignored_once(options: tuple) -> None:
    """Logs that MTEB passed `options`, which these encoders ignore: once per process for
    each set of options."""
    logging.getLogger(__name__).warning(
        "MTEB passed encode options this encoder does not use, ignored: %s", ", ".join(options))
