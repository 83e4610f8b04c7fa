"""What makes an embeddings folder trustworthy: finite unit vectors, and fingerprints of the
texts and the model it was made from.

An embeddings folder (`cmlm_tf.scale.embedding_files`) is only worth mining while its texts
are the ones it embedded: a line changed or inserted after `embed_corpus` puts the old vector
beside the new text, or shifts every pair by a line. So the manifest records

    "files": {SOURCE: {"size": bytes, "mtime_ns": int, "sha256": hex}}  per input file,
                                         hashed before the pipeline reads it
    "model_identity": {"checkpoint_sha256": hex or null, "source": {...}, "dim": int}
                                         from the export's cmlm_tf_export.json

and `check_texts` compares a file with its record: the same size and modification time pass
at once; a different size is refused; the same size at another time is hashed, and passes
only with the same SHA-256 (a copy that kept its bytes). `check_same_model` refuses two
folders whose models differ. Manifests written before fingerprints existed have neither
field: they are read with one warning (`missing_fingerprints`).

`first_bad_vector` finds a vector that is not finite or not of unit norm (± `NORM_TOLERANCE`):
one NaN would make every margin score NaN, and bytes damaged inside a shard can decode to
huge values.
"""

import hashlib
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from cmlm_tf.export import export_metadata
from cmlm_tf.scale import folders

# How far from 1 the norm of a stored vector may be (float32 rounding is about 1e-7).
NORM_TOLERANCE = 1e-3
FILES_FIELD = "files"
MODEL_FIELD = "model_identity"
_READ_BYTES = 1 << 20


class EmbeddingsMismatch(ValueError):
    """Embeddings that no longer match their texts, or two folders of different models
    (one line, naming the file or the folders)."""


def first_bad_vector(vectors: np.ndarray) -> Optional[Tuple[int, str]]:
    """(row, what is wrong) of the first row of float [n, dim] `vectors` that holds a NaN or
    an infinity, or whose norm is not 1 ± `NORM_TOLERANCE`; None when every row is sound."""
    finite = np.isfinite(vectors).all(axis=1)
    norms = np.linalg.norm(np.where(finite[:, None], vectors, 0).astype(np.float64), axis=1)
    bad = np.flatnonzero(~finite | (np.abs(norms - 1) > NORM_TOLERANCE))
    if not len(bad):
        return None
    row = int(bad[0])
    if not finite[row]:
        return row, "a vector that is not finite (NaN or infinity)"
    return row, f"a vector of norm {norms[row]:.6g}, not 1"


def bad_row(table, dim: int) -> Optional[str]:
    """What is wrong with the first unsound vector of a shard's Arrow table (columns source,
    line, embedding of width `dim`), naming its row and source line; None if none is."""
    values = table.column("embedding").combine_chunks().flatten()
    found = first_bad_vector(values.to_numpy(zero_copy_only=False).reshape(-1, dim))
    if found is None:
        return None
    row, what = found
    return (f"row {row} ({table.column('source')[row]} line {table.column('line')[row]}) "
            f"holds {what}; the shard is damaged, or the model gave it: embed the text again")


def _stat(path: str) -> Tuple[int, int]:
    """(size in bytes, modification time in ns) of a local or remote file."""
    if not folders.is_remote(path):
        status = os.stat(path)
        return status.st_size, status.st_mtime_ns
    from apache_beam.io.filesystems import FileSystems

    metadata = FileSystems.match([path])[0].metadata_list[0]
    return metadata.size_in_bytes, int(metadata.last_updated_in_seconds * 1e9)


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with folders.open_file(path) as f:
        while chunk := f.read(_READ_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint(path: str) -> dict:
    """{"size", "mtime_ns", "sha256"} of the file `path` (its bytes as stored)."""
    size, mtime_ns = _stat(path)
    return {"size": size, "mtime_ns": mtime_ns, "sha256": _sha256(path)}


def fingerprint_files(paths: Sequence[str]) -> Dict[str, dict]:
    """{path: fingerprint} of each file, under the path the rows name it by."""
    return {path: fingerprint(path) for path in paths}


def manifest_fields(paths: Sequence[str], export_dir: str, dim: int) -> dict:
    """The manifest's fingerprints: `files` (of `paths`, hashed now) and `model_identity`."""
    return {FILES_FIELD: fingerprint_files(paths), MODEL_FIELD: model_identity(export_dir, dim)}


def model_identity(export_dir: str, dim: int) -> dict:
    """What names the weights of an export: the exported checkpoint's SHA-256 and the
    `source` its `cmlm_tf_export.json` records, with the vectors' `dim`."""
    with folders.open_file(folders.join(export_dir, export_metadata.METADATA_FILE)) as f:
        source = json.loads(f.read().decode("utf-8")).get("source") or {}
    digest = source.get("checkpoint_sha256") if isinstance(source, dict) else None
    return {"checkpoint_sha256": digest, "source": source, "dim": int(dim)}


def changed(path: str, recorded: dict) -> Optional[str]:
    """How the file `path` differs from its `recorded` fingerprint, or None if it does not:
    size and modification time first, the SHA-256 only when the size is the same and the
    time is not."""
    try:
        size, mtime_ns = _stat(path)
    except (OSError, IndexError):
        return "it is gone"
    if size != recorded.get("size"):
        return f"{recorded.get('size')} bytes then, {size} now"
    if mtime_ns == recorded.get("mtime_ns") or _sha256(path) == recorded.get("sha256"):
        return None
    return "the same size but other bytes (SHA-256 differs)"


def check_texts(manifest: dict, folder: str) -> None:
    """Refuses, naming the file, embeddings whose text files changed since they were
    embedded (`changed`). A manifest without fingerprints passes (`missing_fingerprints`)."""
    for path, recorded in sorted((manifest.get(FILES_FIELD) or {}).items()):
        difference = changed(path, recorded)
        if difference is not None:
            raise EmbeddingsMismatch(
                f"{path}: changed after it was embedded into {folder} ({difference}); its "
                "vectors no longer match its lines: embed it again "
                "(python -m cmlm_tf.embed_corpus --overwrite)")


def check_unchanged(fingerprints: Dict[str, dict]) -> None:
    """Refuses files that changed while they were being embedded."""
    for path, recorded in fingerprints.items():
        difference = changed(path, recorded)
        if difference is not None:
            raise EmbeddingsMismatch(f"{path}: changed while it was being embedded "
                                     f"({difference}); embed it again once it is written")


def missing_fingerprints(manifest: dict, folder: str) -> Optional[str]:
    """The warning for a manifest written before fingerprints existed, or None."""
    if FILES_FIELD in manifest and MODEL_FIELD in manifest:
        return None
    return (f"{folder} records no fingerprints of its texts and model (embedded by an older "
            "cmlm_tf): a text changed since, or another model, would not be noticed; embed "
            "it again to have them checked")


def _same_model(first: dict, second: dict) -> bool:
    if first.get("checkpoint_sha256") and second.get("checkpoint_sha256"):
        return first["checkpoint_sha256"] == second["checkpoint_sha256"]
    return first.get("source") == second.get("source") and first.get("dim") == second.get("dim")


def check_same_model(manifests: Sequence[dict], names: Sequence[str]) -> None:
    """Refuses folders (`names`, how the user gave them) embedded by different models, where
    both manifests name theirs."""
    identities: List[dict] = [manifest.get(MODEL_FIELD) for manifest in manifests]
    if any(identity is None for identity in identities):
        return
    if not _same_model(identities[0], identities[1]):
        raise EmbeddingsMismatch(
            f"{names[0]} was embedded by {manifests[0].get('model')} and {names[1]} by "
            f"{manifests[1].get('model')}, another model (checkpoint "
            f"{str(identities[0].get('checkpoint_sha256'))[:12]} vs "
            f"{str(identities[1].get('checkpoint_sha256'))[:12]}): their vectors are not "
            "comparable; pass --allow_different_models if they share one space")
