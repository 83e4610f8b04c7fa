"""An exported sentence-transformers folder, used as its users use it: in a fresh interpreter
of the MTEB venv that imports sentence-transformers (and so torch), never cmlm_tf or
TensorFlow. Run as `python -m tests.mteb_extra.sentence_transformers_child COMMAND ...`:

- `encode FOLDER TEXTS_JSON OUT_JSON`: the vectors of the texts and the token ids of the
  folder's tokenizer (truncated at its `max_seq_length`);
- `sts FOLDER PAIRS_JSON OUT_JSON`: MTEB's cosine Spearman on the STS pairs given
  (`{"first", "second", "gold"}`), through MTEB's own sentence-transformers path.

Each writes `imported`: which of cmlm_tf and TensorFlow the process had loaded (none).
"""

import json
import sys


def encode(folder: str, texts_file: str, out_file: str) -> dict:
    from sentence_transformers import SentenceTransformer

    with open(texts_file, encoding="utf-8") as f:
        texts = json.load(f)
    model = SentenceTransformer(folder, device="cpu")
    vectors = model.encode(texts, batch_size=16, convert_to_numpy=True)
    ids = [model.tokenizer(text, truncation=True, max_length=model.max_seq_length)["input_ids"]
           for text in texts]
    return {"vectors": vectors.tolist(), "ids": ids,
            "modules": [type(module).__name__ for module in model],
            "max_seq_length": model.max_seq_length}


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
    output = {"encode": encode, "sts": sts}[command](*arguments)
    output["imported"] = sorted(name for name in ("cmlm_tf", "tensorflow") if name in sys.modules)
    with open(arguments[-1], "w", encoding="utf-8") as f:
        json.dump(output, f)
