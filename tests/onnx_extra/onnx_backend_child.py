"""An exported sentence-transformers folder's ONNX models, used as their users use them:
`SentenceTransformer(folder, backend="onnx")` (Optimum and ONNX Runtime) in a fresh
interpreter that imports neither cmlm_tf nor TensorFlow. Run as
`python -m tests.onnx_extra.onnx_backend_child FOLDER TEXTS_JSON OUT_JSON`; writes the
vectors of the texts by each model (`float32`: the default `onnx/model.onnx`; `int8`: chosen
with `model_kwargs={"file_name": ...}`), the class that ran them, and `imported`.
"""

import json
import sys

INT8_FILE = "onnx/model_qint8_avx512_vnni.onnx"


def encode(folder: str, texts_file: str, out_file: str) -> dict:
    from sentence_transformers import SentenceTransformer

    with open(texts_file, encoding="utf-8") as f:
        texts = json.load(f)
    models = {"float32": SentenceTransformer(folder, device="cpu", backend="onnx"),
              "int8": SentenceTransformer(folder, device="cpu", backend="onnx",
                                          model_kwargs={"file_name": INT8_FILE})}
    return {"vectors": {precision: model.encode(texts, batch_size=16).tolist()
                        for precision, model in models.items()},
            "runners": sorted({type(model[0].auto_model).__name__
                               for model in models.values()})}


if __name__ == "__main__":
    output = encode(*sys.argv[1:])
    output["imported"] = sorted(name for name in ("cmlm_tf", "tensorflow") if name in sys.modules)
    with open(sys.argv[-1], "w", encoding="utf-8") as f:
        json.dump(output, f)
