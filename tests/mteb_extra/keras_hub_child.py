"""KerasHub presets written by `cmlm_tf.export.keras_hub_preset`, used as their users use them:
in a fresh interpreter that imports keras-hub, never cmlm_tf, on the Keras backend its
environment names (`KERAS_BACKEND`). Run as `python -m tests.mteb_extra.keras_hub_child
PAYLOAD_JSON OUT_JSON`, the payload `{"texts": [...], "presets": {name: {"path",
"vector_lines"}}}`, the vector lines those of the preset's model card (from the backbone and
the preprocessor's `inputs` to `vectors`).

Writes, per preset: the classes `from_preset` built, the token ids of the preset's
preprocessor (padding dropped), the sentence vectors (the card's lines on the backbone)
and, where the preset has a `task.json`, the largest difference between those and
`TextEmbedder.from_preset(...).predict` on the first texts; and `imported`: whether the
process loaded cmlm_tf (it must not).
"""

import json
import os
import sys


def _ids(preprocessor, texts: list) -> list:
    import numpy as np

    ids = []
    for start in range(0, len(texts), 64):
        packed = preprocessor(texts[start:start + 64])
        for row, mask in zip(np.asarray(packed["token_ids"]), np.asarray(packed["padding_mask"])):
            ids.append(row[mask.astype(bool)].tolist())
    return ids


def _vectors(backbone, preprocessor, texts: list, preset: dict, *, batch_size: int = 32):
    """The card's vector lines on the backbone, batches of texts of similar length trimmed of
    the columns that are padding in every row."""
    import keras
    import numpy as np

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vectors = [None] * len(texts)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        packed = preprocessor([texts[i] for i in rows])
        width = int(np.asarray(packed["padding_mask"]).sum(axis=1).max())
        scope = {"np": np, "os": os, "keras": keras, "preset": preset["path"],
                 "backbone": backbone,
                 "inputs": {key: value[:, :width] for key, value in packed.items()}}
        exec("\n".join(preset["vector_lines"]), scope)
        for row, vector in zip(rows, scope["vectors"]):
            vectors[row] = vector.tolist()
    return vectors


def encode(payload_file: str, out_file: str) -> dict:
    import keras
    import keras_hub
    import numpy as np

    with open(payload_file, encoding="utf-8") as f:
        payload = json.load(f)
    texts, results = payload["texts"], {}
    for name, preset in payload["presets"].items():
        backbone = keras_hub.models.Backbone.from_preset(preset["path"])
        tokenizer = keras_hub.models.Tokenizer.from_preset(preset["path"])
        preprocessor = keras_hub.models.TextEmbedderPreprocessor.from_preset(preset["path"])
        vectors = _vectors(backbone, preprocessor, texts, preset)
        result = {"classes": [type(part).__name__ for part in (backbone, tokenizer,
                                                                preprocessor)],
                  "vocabulary_sizes": [tokenizer.vocabulary_size(),
                                       backbone.vocabulary_size],
                  "ids": _ids(preprocessor, texts), "vectors": vectors}
        if os.path.isfile(os.path.join(preset["path"], "task.json")):
            embedder = keras_hub.models.TextEmbedder.from_preset(preset["path"])
            predicted = keras.ops.convert_to_numpy(embedder.predict(texts[:8], verbose=0))
            result["embedder_difference"] = float(np.abs(predicted - vectors[:8]).max())
        results[name] = result
    return {"backend": keras.backend.backend(), "presets": results}


if __name__ == "__main__":
    output = encode(*sys.argv[1:])
    output["imported"] = sorted(name for name in ("cmlm_tf",) if name in sys.modules)
    with open(sys.argv[-1], "w", encoding="utf-8") as f:
        json.dump(output, f)
