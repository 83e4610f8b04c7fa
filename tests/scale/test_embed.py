"""The embedding pipeline on the DirectRunner's engine with two worker processes: every
embeddable line once, with the model's own vector; skipped lines counted, not written; a
failing worker leaves nothing half-written; an existing output is replaced only on request.
"""

import functools
import json
import os
import random
import re
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import cmlm_tf
from cmlm_tf.scale import embed, embedding_files, pipeline_progress
from tests.conftest import REPO_DIR, TINY_WORDS, cosines

WORKERS = ["--direct_num_workers=2"]
MAX_CHARS = 200


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(TINY_WORDS) for _ in range(rng.randint(1, 14)))


def write_corpus(folder, seed=0):
    """Two files of 75 lines: sentences, an empty line, a whitespace line, an invalid UTF-8
    line, a CRLF line, a byte-order mark (second file) and one line over MAX_CHARS.

    Returns ({(path, line): text to embed}, {reason: lines skipped or cut}).
    """
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    expected, counts = {}, {"empty": 0, "invalid_utf8": 0, "over_long": 0}
    for index in range(2):
        path = folder / f"part{index}.txt"
        lines = []
        for number in range(1, 76):
            text, reason = _sentence(rng), None
            raw = text.encode()
            if number == 7:
                raw, text, reason = b"", None, "empty"
            elif number == 20 + index:
                raw, text, reason = b" \t ", None, "empty"
            elif number == 33:
                raw, text, reason = b"caf\xe9 au lait", None, "invalid_utf8"
            elif number == 40:
                raw = raw + b"\r"
            elif number == 1 and index == 1:
                raw = b"\xef\xbb\xbf" + raw
            elif number == 50 and index == 0:
                text = " ".join(["the dog"] * 40)
                raw, reason = text.encode(), "over_long"
                text = text[:MAX_CHARS]
            if text is not None:
                expected[(str(path), number)] = text
            if reason is not None:
                counts[reason] += 1
            lines.append(raw)
        path.write_bytes(b"\n".join(lines) + b"\n")
    return expected, counts


def config(corpus, out, export, **fields):
    return embed.EmbedConfig(model=str(export), inputs=[str(corpus / "*.txt")],
                             output=str(out), batch_size=8, max_chars=MAX_CHARS, **fields)


def read_rows(out):
    """{(source, line): vector} read with pyarrow alone, and the (source, line) list."""
    table = pq.read_table(out)
    ids = list(zip(table.column("source").to_pylist(), table.column("line").to_pylist()))
    vectors = np.asarray(table.column("embedding").to_pylist(), np.float32)
    return dict(zip(ids, vectors)), ids


def assert_vectors_are_the_models(export, rows, expected):
    keys = sorted(expected)
    reference = cmlm_tf.load(str(export)).encode([expected[key] for key in keys])
    assert cosines(reference, np.stack([rows[key] for key in keys])).min() >= 0.99999


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, tiny_export):
    folder = tmp_path_factory.mktemp("embed")
    expected, counts = write_corpus(folder / "corpus")
    progress = []
    summary = embed.run(config(folder / "corpus", folder / "out", tiny_export),
                        beam_args=WORKERS, report=progress.append, progress_every=1.0)
    return folder, expected, counts, summary, progress


def test_every_embeddable_line_once_with_the_models_vector(first_run, tiny_export):
    folder, expected, counts, summary, progress = first_run
    rows, ids = read_rows(folder / "out")
    assert len(ids) == len(set(ids)) == len(expected) == 150 - 6
    assert set(ids) == set(expected)
    assert_vectors_are_the_models(tiny_export, rows, expected)
    manifest = json.loads((folder / "out" / embedding_files.MANIFEST).read_text())
    assert manifest["counts"] == {"lines_read": 150, "embedded": 144, "missing_column": 0,
                                  **counts} == summary.counts
    assert counts == {"empty": 4, "invalid_utf8": 2, "over_long": 1}
    assert (manifest["dim"], manifest["text_column"], manifest["inputs"]) == (
        32, None, [str(folder / "corpus" / "*.txt")])
    shards = manifest["shards"]
    assert sorted(os.listdir(folder / "out")) == sorted(
        [embedding_files.MANIFEST] + [f"part-{i:05d}-of-{shards:05d}.parquet"
                                      for i in range(shards)])
    assert summary.shards == shards and sorted(os.listdir(folder)) == ["corpus", "out"]
    embeddings = embedding_files.read_embeddings(str(folder / "out"))
    assert list(zip(embeddings.sources, embeddings.lines)) == sorted(expected)
    assert summary.line().startswith("lines read 150, embedded 144, skipped 6 (empty 4, "
                                      "invalid UTF-8 2, missing column 0), cut to max_chars 1; ")


def test_progress_lines_give_the_count_the_total_and_an_eta(first_run):
    *_, progress = first_run
    assert progress, "no progress line in a run of several seconds"
    assert all(line.startswith("embedded ") and " of ~150 lines (" in line and "ETA " in line
               for line in progress), progress


class FailOnce(embed.EncodeBatches):
    """Raises once across every worker process, halfway through the rows of a batch, when
    `marker` does not exist yet (it creates it)."""

    def __init__(self, *args, marker: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.marker = marker

    def process(self, batch):
        for index, row in enumerate(super().process(batch)):
            if index == len(batch) // 2 and _first_time(self.marker):
                raise RuntimeError("injected fault")
            yield row


def _first_time(marker: str) -> bool:
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def test_a_failing_worker_leaves_nothing_and_a_rerun_completes(tmp_path, tiny_export,
                                                               monkeypatch, capfd):
    # The worker processes unpickle FailOnce by reference: they import this module.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(REPO_DIR), os.environ.get("PYTHONPATH")])))
    expected, _ = write_corpus(tmp_path / "corpus", seed=1)
    marker = tmp_path / "fault"
    failing = functools.partial(FailOnce, marker=str(marker))
    job = config(tmp_path / "corpus", tmp_path / "out", tiny_export)
    try:
        embed.run(job, beam_args=WORKERS, report=lambda line: None, encode_dofn=failing)
    except pipeline_progress.PipelineFailed as error:
        # The DirectRunner's engine does not retry a failed bundle: the run fails, in one line.
        assert "injected fault" in str(error) and "\n" not in str(error)
        assert sorted(os.listdir(tmp_path)) == ["corpus", "fault"]
        # The worker's traceback is in the log the line names, not on the console.
        log = re.search(r"\(the workers' log: (\S+)\)$", str(error)).group(1)
        with open(log, encoding="utf-8") as f:
            assert "RuntimeError: injected fault" in f.read()
        os.remove(log)
        assert "Traceback" not in capfd.readouterr().err
    assert marker.exists(), "the fault was never injected"
    embed.run(job, beam_args=WORKERS, report=lambda line: None, encode_dofn=failing)
    rows, ids = read_rows(tmp_path / "out")
    assert len(ids) == len(set(ids)) and set(ids) == set(expected)
    assert sorted(os.listdir(tmp_path)) == ["corpus", "fault", "out"]


def test_an_existing_output_is_replaced_only_with_overwrite(first_run, tmp_path, tiny_export):
    folder, *_ = first_run
    out = tmp_path / "out"
    shutil.copytree(folder / "out", out)
    before = sorted(os.listdir(out))
    corpus = tmp_path / "tsv"
    corpus.mkdir()
    (corpus / "pairs.txt").write_bytes(b"1\tthe dog\n2\n3\ta red car\tx\n4\t\n")
    job = config(corpus, out, tiny_export, text_column=2)
    with pytest.raises(embedding_files.EmbeddingFilesError, match="already exists"):
        embed.run(job, beam_args=WORKERS)
    assert sorted(os.listdir(out)) == before and sorted(os.listdir(tmp_path)) == ["out", "tsv"]
    job.overwrite = True
    summary = embed.run(job, beam_args=WORKERS, report=lambda line: None)
    assert sorted(os.listdir(tmp_path)) == ["out", "tsv"]
    rows, ids = read_rows(out)
    source = str(corpus / "pairs.txt")
    assert sorted(ids) == [(source, 1), (source, 3)]
    assert_vectors_are_the_models(tiny_export, rows, {(source, 1): "the dog",
                                                      (source, 3): "a red car"})
    manifest = embedding_files.read_manifest(str(out))
    assert manifest["text_column"] == 2 and manifest["counts"] == summary.counts == {
        "lines_read": 4, "embedded": 2, "empty": 1, "invalid_utf8": 0, "missing_column": 1,
        "over_long": 0}

