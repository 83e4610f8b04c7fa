"""Progress of a pipeline run: input lines counted as the pipeline reads them, the workers'
progress files summed, the progress line, and the one line of a worker's error."""

import gzip
import re
import subprocess
import sys
import threading
import time

import apache_beam as beam
import pytest

from cmlm_tf.scale import pipeline_progress
from tests.conftest import REPO_DIR


def test_count_lines_and_progress_files(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"1\n2\n3\n")
    (tmp_path / "b.txt").write_bytes(b"1\nno newline at the end")
    (tmp_path / "c.txt").write_bytes(b"")
    paths = pipeline_progress.match_inputs([str(tmp_path / "*.txt"), str(tmp_path / "a.txt")])
    assert sorted(paths) == [str(tmp_path / name) for name in ("a.txt", "b.txt", "c.txt")]
    assert pipeline_progress.count_lines(paths, chunk_bytes=2) == 5
    (tmp_path / "d.txt.gz").write_bytes(gzip.compress(b"1\n2\n"))  # counted as read: unzipped
    assert pipeline_progress.count_lines([str(tmp_path / "d.txt.gz")]) == 2
    (tmp_path / "progress").mkdir()
    clock = iter([0.0, 1.0, 3.0, 3.5]).__next__
    progress = pipeline_progress.ProgressFile(str(tmp_path / "progress"), every=2.0, clock=clock)
    progress.add(10)  # the first count is written at once: the command's count moves
    assert pipeline_progress.read_progress(str(tmp_path / "progress")) == 10
    progress.add(5)
    assert pipeline_progress.read_progress(str(tmp_path / "progress")) == 10  # 2 s later only
    progress.add(1)
    assert pipeline_progress.read_progress(str(tmp_path / "progress")) == 16
    (tmp_path / "progress" / "other.txt").write_text("7\n")
    (tmp_path / "progress" / "half.txt.tmp").write_text("100")
    assert pipeline_progress.read_progress(str(tmp_path / "progress")) == 23
    assert pipeline_progress.format_progress(30, 150, 10.0) == \
        "embedded 30 of ~150 lines (3 lines/s, ETA 0:40)"
    assert pipeline_progress.format_progress(0, 150, 10.0).endswith("(0 lines/s, ETA unknown)")


def test_failure_line_finds_the_workers_error():
    error = RuntimeError("Pipeline job failed:\nTraceback (most recent call last):\n  File "
                         "\"x.py\", line 1\nValueError: bad row [while running 'Encode']\n")
    assert pipeline_progress.failure_line(error) == "ValueError: bad row [while running 'Encode']"
    assert pipeline_progress.failure_line(RuntimeError("")) == "RuntimeError"


def test_the_first_embedded_lines_are_reported_at_once(tmp_path):
    """A line as soon as the progress files count anything, long before `every` seconds:
    a short run shows a count between 0 and the total."""
    (tmp_path / "worker.txt").write_text("5\n")
    lines = []
    pipeline = threading.Thread(target=time.sleep, args=(1.0,))
    pipeline.start()
    pipeline_progress._report_until_done(pipeline, str(tmp_path), 10, lines.append, every=100)
    assert len(lines) == 1 and re.fullmatch(r"embedded 5 of ~10 lines \(\d+ lines/s, ETA "
                                            r"\d+:\d\d\)", lines[0]), lines


def test_an_interrupted_run_stops_the_workers_it_finds():
    """The workers are this process's descendants that run Beam's `sdk_worker_main`."""
    child = [sys.executable, "-m", "tests.driver.children", "sleep", "60"]
    worker = subprocess.Popen(child + ["apache_beam.runners.worker.sdk_worker_main"],
                              cwd=REPO_DIR)
    other = subprocess.Popen(child, cwd=REPO_DIR)
    try:
        deadline = time.monotonic() + 30
        while worker.pid not in pipeline_progress.beam_workers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pipeline_progress.beam_workers() >= {worker.pid}
        assert other.pid not in pipeline_progress.beam_workers()
        pipeline_progress.stop_workers({worker.pid})
        assert worker.wait(timeout=10) == -9 and other.poll() is None
    finally:
        for process in (worker, other):
            process.kill()
            process.wait()


def _no_space(element):
    raise OSError(28, "No space left on device")


def test_a_full_disk_names_the_output_and_its_free_space(tmp_path):
    """A worker's ENOSPC, which Beam reports as a bare OSError, names the folder the
    pipeline writes and the space left there."""

    pipeline = beam.Pipeline(runner="DirectRunner")
    _ = pipeline | beam.Create([1]) | beam.Map(_no_space)
    with pytest.raises(pipeline_progress.PipelineFailed) as failed:
        pipeline_progress.run_pipeline(pipeline, None, None, lambda line: None,
                                       output=str(tmp_path / "out"))
    assert re.match(rf"the pipeline failed: {re.escape(str(tmp_path / 'out'))}: no space left "
                    r"on device while writing it \([\d.]+ MiB free there\)", str(failed.value)), \
        str(failed.value)
