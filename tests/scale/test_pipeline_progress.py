"""Progress of a pipeline run: input lines counted as the pipeline reads them, the workers'
progress files summed, the progress line, and the one line of a worker's error."""

import gzip

from cmlm_tf.scale import pipeline_progress


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
    progress.add(10)
    assert pipeline_progress.read_progress(str(tmp_path / "progress")) == 0  # 1 s: not written yet
    progress.add(5)
    assert pipeline_progress.read_progress(str(tmp_path / "progress")) == 15
    (tmp_path / "progress" / "other.txt").write_text("7\n")
    (tmp_path / "progress" / "half.txt.tmp").write_text("100")
    assert pipeline_progress.read_progress(str(tmp_path / "progress")) == 22
    assert pipeline_progress.format_progress(30, 150, 10.0) == \
        "embedded 30 of ~150 lines (3 lines/s, ETA 0:40)"
    assert pipeline_progress.format_progress(0, 150, 10.0).endswith("(0 lines/s, ETA unknown)")


def test_failure_line_finds_the_workers_error():
    error = RuntimeError("Pipeline job failed:\nTraceback (most recent call last):\n  File "
                         "\"x.py\", line 1\nValueError: bad row [while running 'Encode']\n")
    assert pipeline_progress.failure_line(error) == "ValueError: bad row [while running 'Encode']"
    assert pipeline_progress.failure_line(RuntimeError("")) == "RuntimeError"
