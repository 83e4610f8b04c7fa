"""The Beam sink of the shards: Beam's shard names, every row once, and page checksums that
catch bytes damaged inside a shard."""

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam", reason="the scale extra (pip install -e '.[scale]')")
pq = pytest.importorskip("pyarrow.parquet")

from cmlm_tf.scale import embedding_files, shard_sink  # noqa: E402
from cmlm_tf.scale import options as beam_options  # noqa: E402


def test_shards_hold_every_row_and_fail_their_checksums_when_damaged(tmp_path, monkeypatch):
    monkeypatch.setattr(shard_sink, "ROWS_PER_GROUP", 100)  # several row groups
    rng = np.random.default_rng(0)
    rows = [{"source": "a.txt", "line": line,
             "embedding": (vector / np.linalg.norm(vector)).tolist()}
            for line, vector in enumerate(rng.standard_normal((300, 8)), start=1)]
    options = beam_options.make_options(["--direct_running_mode=in_memory"])
    with beam.Pipeline(runner=beam_options.make_runner(options), options=options) as pipeline:
        _ = (pipeline | beam.Create(rows) | beam.io.Write(shard_sink.ParquetShardSink(
            embedding_files.shard_prefix(str(tmp_path)), embedding_files.schema(),
            embedding_files.SHARD_SUFFIX, embedding_files.SHARD_NAME_TEMPLATE)))
    names = embedding_files.list_shards(str(tmp_path))
    assert names and all(name.endswith(f"-of-{len(names):05d}.parquet") for name in names)
    table = pq.read_table(tmp_path / names[0], page_checksum_verification=True)
    tables = [table] + [pq.read_table(tmp_path / name) for name in names[1:]]
    assert sorted(line for t in tables for line in t.column("line").to_pylist()) == \
        list(range(1, 301))
    path = tmp_path / max(names, key=lambda name: (tmp_path / name).stat().st_size)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle - 50:middle + 50] = bytes(b ^ 0x5A for b in data[middle - 50:middle + 50])
    path.write_bytes(bytes(data))
    with pytest.raises(OSError, match="CRC checksum verification failed"):
        pq.read_table(path, page_checksum_verification=True)
