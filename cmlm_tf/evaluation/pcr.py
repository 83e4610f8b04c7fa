"""Principal component removal (PCR), per language (CMLM paper §5).

For language l with embedding matrix M_l [n, d], c_l is the first right singular vector of M_l
(no centring, as in the paper) and every vector v of that language becomes

    v̂ = v − (v·c_l) c_l

(then L2-normalised again when the vectors were normalised). Similarity is the cosine of the
v̂'s. The direction c_l carries what that language's sentences share, so removing it reduces
the same-language bias of cross-lingual retrieval.

Fitted components are saved as a small JSON file:
`{"format": "cmlm_tf_pcr", "version": 1, "dim": d, "components": {lang: [d floats]}}`.
"""

import json
import os
from typing import Dict, Iterable, Mapping, Optional

import numpy as np

from cmlm_tf.vectors import l2_normalize_array

FILE_FORMAT = "cmlm_tf_pcr"
FILE_VERSION = 1


def first_singular_vector(embeddings: np.ndarray) -> np.ndarray:
    """The first right singular vector of `embeddings` [n, d] (not centred), unit length.

    Its sign is fixed so that its largest-magnitude entry is positive, which makes saved
    files reproducible (the removal itself does not depend on the sign).
    """
    matrix = np.asarray(embeddings, np.float64)
    if matrix.ndim != 2 or matrix.shape[0] < 1:
        raise ValueError(f"PCR needs a non-empty [n, dim] matrix, got shape {matrix.shape}")
    _, _, right = np.linalg.svd(matrix, full_matrices=False)
    component = right[0]
    return component if component[np.argmax(np.abs(component))] >= 0 else -component


def remove_component(embeddings: np.ndarray, component: np.ndarray,
                     *, renormalize: bool = True) -> np.ndarray:
    """v − (v·c) c for every row v; rows re-normalised to unit length with `renormalize`.

    Keeps the dtype of `embeddings` (float32 stays float32).
    """
    vectors = np.asarray(embeddings)
    dtype = vectors.dtype if vectors.dtype in (np.float32, np.float64) else np.float32
    component = np.asarray(component, np.float64)
    projected = vectors.astype(np.float64) @ component
    removed = vectors.astype(np.float64) - projected[..., None] * component
    if renormalize:
        removed = l2_normalize_array(removed)
    return removed.astype(dtype)


class PCRComponents:
    """Fitted PCR directions, one per language.

    Usage:
        components = PCRComponents.fit({"en": en_vectors, "es": es_vectors})
        components.save("pcr.json")
        es_clean = PCRComponents.load("pcr.json").apply(es_vectors, "es")
    """

    def __init__(self, components: Mapping[str, np.ndarray]):
        self.components: Dict[str, np.ndarray] = {}
        dims = set()
        for language, vector in components.items():
            vector = np.asarray(vector, np.float64)
            if vector.ndim != 1:
                raise ValueError(f"PCR component for {language!r} must be a vector, got "
                                 f"shape {vector.shape}")
            self.components[str(language)] = vector
            dims.add(vector.shape[0])
        if len(dims) > 1:
            raise ValueError(f"PCR components differ in size: {sorted(dims)}")
        self.dim: Optional[int] = dims.pop() if dims else None

    @classmethod
    def fit(cls, embeddings: Mapping[str, np.ndarray]) -> "PCRComponents":
        """One component per language from language → float [n, dim]."""
        return cls({lang: first_singular_vector(vectors)
                    for lang, vectors in embeddings.items()})

    @property
    def languages(self) -> Iterable[str]:
        return list(self.components)

    def component(self, language: str) -> np.ndarray:
        if language not in self.components:
            available = ", ".join(sorted(self.components)) or "none"
            raise ValueError(f"no PCR component for language {language!r} "
                           f"(available: {available})")
        return self.components[language]

    def apply(self, embeddings: np.ndarray, language: str,
              *, renormalize: bool = True) -> np.ndarray:
        """Removes `language`'s component from `embeddings` [..., dim]."""
        component = self.component(language)
        if np.shape(embeddings)[-1] != component.shape[0]:
            raise ValueError(f"embeddings have dim {np.shape(embeddings)[-1]} but the PCR "
                             f"component for {language!r} has dim {component.shape[0]}")
        return remove_component(embeddings, component, renormalize=renormalize)

    def apply_all(self, embeddings: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """`apply` for each language of a language → vectors mapping."""
        return {lang: self.apply(vectors, lang) for lang, vectors in embeddings.items()}

    def merged(self, other: "PCRComponents") -> "PCRComponents":
        """These components plus `other`'s; `other` wins for a language in both."""
        return PCRComponents({**self.components, **other.components})

    def save(self, path: str) -> None:
        data = {"format": FILE_FORMAT, "version": FILE_VERSION, "dim": self.dim,
                "components": {lang: vector.tolist()
                               for lang, vector in self.components.items()}}
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f)
            f.write("\n")

    @classmethod
    def load(cls, path: str) -> "PCRComponents":
        """Reads a file written by `save`; errors name the file."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise ValueError(f"{path}: PCR file not found") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a PCR file ({e})") from None
        if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
            raise ValueError(f"{path}: not a PCR file (expected \"format\": \"{FILE_FORMAT}\")")
        if data.get("version") != FILE_VERSION:
            raise ValueError(f"{path}: unsupported PCR file version {data.get('version')!r}")
        components = data.get("components")
        if not isinstance(components, dict) or not components:
            raise ValueError(f"{path}: \"components\" must map languages to vectors")
        try:
            return cls({lang: np.asarray(vector, np.float64)
                        for lang, vector in components.items()})
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None

    def __repr__(self):
        return f"PCRComponents(languages={self.languages}, dim={self.dim})"
