"""MTEB 2.x on an export: `MTEBEncoder(cmlm_tf.load(path))` is MTEB's encoder, and its score
on a task equals `python -m cmlm_tf.evaluate`'s on the same data.

Runs only where the `mteb` extra is installed (`tests/conftest.py` leaves this folder out
otherwise; CI runs it in its own venv, `.ci/run`). MTEB's own tasks download their data, so
the task here is STS-B dev read from the local shared data.
"""

import json

import datasets
import mteb
import numpy as np
import pytest
from mteb.abstasks.sts import AbsTaskSTS

import cmlm_tf
from cmlm_tf.commands import evaluate
from cmlm_tf.evaluation import mteb_adapter, readers
from tests.conftest import SHARED_DATA

STS_DEV = SHARED_DATA / "stsb" / "sts-dev.csv"
needs_sts_dev = pytest.mark.skipif(not STS_DEV.exists(),
                                   reason=f"{STS_DEV} is absent (the shared STS-B data)")


class LocalSTSBenchmarkDev(AbsTaskSTS):
    """STS-B dev from the shared data, as an MTEB STS task (gold 0–5)."""

    min_score = 0
    max_score = 5
    metadata = mteb.TaskMetadata(
        name="LocalSTSBenchmarkDev", description="STS Benchmark dev, read from local data.",
        dataset={"path": str(STS_DEV), "revision": "local"}, type="STS", category="t2t",
        modalities=["text"], eval_splits=["validation"], eval_langs=["eng-Latn"],
        main_score="cosine_spearman")

    def load_data(self, num_proc=None, **kwargs):
        first, second, gold = readers.read_sts(str(STS_DEV), "stsb")
        self.dataset = {"validation": datasets.Dataset.from_dict(
            {"sentence1": first, "sentence2": second, "score": gold.tolist()})}
        self.data_loaded = True


@pytest.fixture(scope="module")
def minilm(minilm_export):
    return mteb_adapter.MTEBEncoder(cmlm_tf.load(str(minilm_export)))


def test_wrapped_export_is_an_mteb_encoder(minilm, minilm_export):
    assert isinstance(minilm, mteb.EncoderProtocol)
    meta = minilm.mteb_model_meta
    assert isinstance(meta, mteb.models.ModelMeta)
    assert meta.name == f"cmlm_tf/{minilm_export.name}"
    assert meta.embed_dim == minilm.model.dim == 384
    assert meta.max_tokens == minilm.model.seq_length
    assert meta.revision == minilm.model.metadata["source"]["checkpoint_sha256"][:12]


def test_encode_over_mteb_loader_matches_encode(minilm):
    from torch.utils.data import DataLoader

    task = LocalSTSBenchmarkDev()
    texts = ["A man is playing a guitar.", "Dogs run.", "x " * 300, "Ein Hund läuft."]
    # A text column in batches of 3, as MTEB builds its loaders for text tasks.
    loader = DataLoader(datasets.Dataset.from_dict({"text": texts}), batch_size=3)
    vectors = minilm.encode(loader, task_metadata=task.metadata, hf_split="validation",
                            hf_subset="default", prompt_type=None, batch_size=2,
                            show_progress_bar=False)
    np.testing.assert_allclose(vectors, minilm.encode(texts), atol=1e-6)
    pairwise = minilm.similarity_pairwise(vectors[:2], vectors[2:])
    np.testing.assert_allclose(pairwise, np.sum(vectors[:2] * vectors[2:], axis=1), atol=1e-6)
    with pytest.raises(ValueError, match="float32 embeddings only"):
        minilm.encode(loader, task_metadata=task.metadata, hf_split="validation",
                      hf_subset="default", precision="int8")


@needs_sts_dev
def test_mteb_sts_score_equals_cmlm_tf_evaluate(minilm_export, tmp_path, monkeypatch, capsys):
    sts_report = tmp_path / "sts.json"
    assert evaluate.main(["sts", "--model", str(minilm_export), "--data", str(STS_DEV),
                          "--output", str(sts_report)]) == 0
    expected = json.loads(sts_report.read_text(encoding="utf-8"))["metrics"]["spearman"]

    # The command as documented, with the task name resolved to the local task (MTEB's own
    # STS tasks download their data).
    asked = []
    monkeypatch.setattr(mteb_adapter, "resolve_tasks",
                        lambda names: asked.append(names) or [LocalSTSBenchmarkDev()])
    mteb_report, folder = tmp_path / "mteb.json", tmp_path / "mteb_results"
    assert evaluate.main(["mteb", "--model", str(minilm_export), "--tasks",
                          "LocalSTSBenchmarkDev", "--output_folder", str(folder),
                          "--output", str(mteb_report)]) == 0
    assert asked == [["LocalSTSBenchmarkDev"]]
    report = json.loads(mteb_report.read_text(encoding="utf-8"))
    score = report["metrics"]["LocalSTSBenchmarkDev"]["validation"]["cosine_spearman"]
    assert score == pytest.approx(expected, abs=5e-4)
    assert 0.8 < score < 0.9  # all-MiniLM-L6-v2 on STS-B dev: 0.8672 (docs/results.md)
    assert f"LocalSTSBenchmarkDev.validation.cosine_spearman  {score:10.4f}" in \
        capsys.readouterr().out
    (result_file,) = report["files"]
    assert result_file.startswith(str(folder / "results" / "cmlm_tf__minilm"))
    saved = json.loads(open(result_file, encoding="utf-8").read())
    assert saved["task_name"] == "LocalSTSBenchmarkDev"
    assert saved["scores"]["validation"][0]["main_score"] == pytest.approx(score)


def test_mteb_command_rejects_unknown_task(minilm_export, capsys):
    assert evaluate.main(["mteb", "--model", str(minilm_export), "--tasks",
                          "STSBenchmark,NoSuchTask"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("error: --tasks:")
    assert "NoSuchTask" in error[0]
