"""An exported sentence-transformers folder, used as its users use it: in a fresh interpreter
of the MTEB venv that imports sentence-transformers (and so torch), never cmlm_tf or
TensorFlow. Run as `python -m tests.mteb_extra.sentence_transformers_child COMMAND ...`:

- `encode FOLDER TEXTS_JSON OUT_JSON`: the vectors of the texts and the token ids of the
  folder's tokenizer (truncated at its `max_seq_length`); where the folder has ONNX models
  (`onnx/`), their vectors too (`onnx_vectors`);
- `sts FOLDER PAIRS_JSON OUT_JSON`: MTEB's cosine Spearman on the STS pairs given
  (`{"first", "second", "gold"}`), through MTEB's own sentence-transformers path;
- `onnx_sts FOLDER PAIRS_JSON OUT_JSON`: the cosine Spearman of the folder's float32 and int8
  ONNX models on those pairs.

The ONNX models run in ONNX Runtime in place of the folder's Transformer module, between the
folder's own tokenizer and its Pooling, Dense and Normalize modules, as sentence-transformers'
`backend="onnx"` runs them (that backend needs Optimum, which this venv's Transformers
excludes).

Each writes `imported`: which of cmlm_tf and TensorFlow the process had loaded (none).
"""

import json
import os
import sys

# The folder's ONNX models by precision (cmlm_tf.export.onnx_model's names).
ONNX_FILES = {"float32": "onnx/model.onnx", "int8": "onnx/model_qint8_avx512_vnni.onnx"}


def encode(folder: str, texts_file: str, out_file: str) -> dict:
    from sentence_transformers import SentenceTransformer

    with open(texts_file, encoding="utf-8") as f:
        texts = json.load(f)
    model = SentenceTransformer(folder, device="cpu")
    vectors = model.encode(texts, batch_size=16, convert_to_numpy=True)
    ids = [model.tokenizer(text, truncation=True, max_length=model.max_seq_length)["input_ids"]
           for text in texts]
    onnx_vectors = {precision: onnx_encode(model, os.path.join(folder, name), texts).tolist()
                    for precision, name in ONNX_FILES.items()
                    if os.path.isfile(os.path.join(folder, name))}
    return {"vectors": vectors.tolist(), "ids": ids, "onnx_vectors": onnx_vectors,
            "modules": [type(module).__name__ for module in model],
            "max_seq_length": model.max_seq_length}


def onnx_encode(model, onnx_file: str, texts: list, batch_size: int = 32):
    """The vectors of `texts` with ONNX Runtime running `onnx_file` in place of `model`'s
    Transformer module (`model` a `SentenceTransformer` of the folder)."""
    import numpy as np
    import onnxruntime
    import torch

    session = onnxruntime.InferenceSession(onnx_file, providers=["CPUExecutionProvider"])
    names = [node.name for node in session.get_inputs()]
    vectors = []
    for start in range(0, len(texts), batch_size):
        features = model.preprocess(texts[start:start + batch_size])
        (hidden,) = session.run(["last_hidden_state"], {
            name: features[name].numpy().astype(np.int64) for name in names})
        features["token_embeddings"] = torch.from_numpy(hidden)
        with torch.no_grad():
            for module in list(model)[1:]:
                features = module(features)
        vectors.append(features["sentence_embedding"].numpy())
    return np.concatenate(vectors)


def onnx_sts(folder: str, pairs_file: str, out_file: str) -> dict:
    import numpy as np
    from scipy.stats import spearmanr
    from sentence_transformers import SentenceTransformer

    with open(pairs_file, encoding="utf-8") as f:
        pairs = json.load(f)
    model = SentenceTransformer(folder, device="cpu")
    scores = {}
    for precision, name in ONNX_FILES.items():
        first, second = (onnx_encode(model, os.path.join(folder, name), pairs[side])
                         for side in ("first", "second"))
        cosines = np.sum(first * second, axis=1) / (
            np.linalg.norm(first, axis=1) * np.linalg.norm(second, axis=1))
        scores[precision] = float(spearmanr(cosines, pairs["gold"]).statistic)
    return {"cosine_spearman": scores}


def sts(folder: str, pairs_file: str, out_file: str) -> dict:
    import datasets
    import mteb
    from mteb.abstasks.sts import AbsTaskSTS
    from sentence_transformers import SentenceTransformer

    with open(pairs_file, encoding="utf-8") as f:
        pairs = json.load(f)

    class PairsSTS(AbsTaskSTS):
        min_score = 0
        max_score = 5
        metadata = mteb.TaskMetadata(
            name="LocalSTSBenchmarkDev", description="STS Benchmark dev, read from local data.",
            dataset={"path": pairs_file, "revision": "local"}, type="STS", category="t2t",
            modalities=["text"], eval_splits=["validation"], eval_langs=["eng-Latn"],
            main_score="cosine_spearman")

        def load_data(self, num_proc=None, **kwargs):
            self.dataset = {"validation": datasets.Dataset.from_dict(
                {"sentence1": pairs["first"], "sentence2": pairs["second"],
                 "score": pairs["gold"]})}
            self.data_loaded = True

    model = SentenceTransformer(folder, device="cpu")
    result = mteb.evaluate(model, [PairsSTS()], cache=None, show_progress_bar=False,
                           encode_kwargs={"batch_size": 32})
    (task_result,) = result.task_results
    return {"cosine_spearman": task_result.scores["validation"][0]["cosine_spearman"]}


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    output = {"encode": encode, "sts": sts, "onnx_sts": onnx_sts}[command](*arguments)
    output["imported"] = sorted(name for name in ("cmlm_tf", "tensorflow") if name in sys.modules)
    with open(arguments[-1], "w", encoding="utf-8") as f:
        json.dump(output, f)
