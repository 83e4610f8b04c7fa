"""The Beam sink of the embeddings shards: Parquet files with page checksums.

`beam.io.WriteToParquet` has no option for Parquet's page checksums (a CRC32 of each data
page), so bytes damaged inside a shard, its size and footer intact, would decode to other
numbers. This sink writes the same files through Beam's public `FileBasedSink` (temporary
files, renamed at finalisation; `SHARD_NAME_TEMPLATE` names) with pyarrow's
`write_page_checksum=True`, and `embedding_files.read_embeddings` verifies them.

    rows | beam.io.Write(ParquetShardSink(prefix, schema, suffix, template))

Each element is a row dict (the schema's columns); rows are buffered and written as row
groups of `ROWS_PER_GROUP`.
"""

from apache_beam.io import filebasedsink
from apache_beam.io.filesystem import CompressionTypes

ROWS_PER_GROUP = 8192


class _ShardWriter:
    """One open shard: a pyarrow `ParquetWriter` and the rows of the next row group."""

    def __init__(self, handle, schema, codec: str):
        import pyarrow.parquet as pq

        self.handle = handle
        self.schema = schema
        self.writer = pq.ParquetWriter(handle, schema, compression=codec,
                                       write_page_checksum=True)
        self.rows = []

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if len(self.rows) >= ROWS_PER_GROUP:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa

        if self.rows:
            self.writer.write_table(pa.Table.from_pylist(self.rows, schema=self.schema))
            self.rows = []

    def close(self) -> None:
        self.flush()
        self.writer.close()
        self.handle.close()


class ParquetShardSink(filebasedsink.FileBasedSink):
    """Parquet shards `PREFIX<template><suffix>` of row dicts, with page checksums.

    Args:
        prefix: the path every shard name starts with (`FOLDER/part`).
        schema: the shards' `pyarrow.Schema`.
        suffix: the shards' name ending (`.parquet`).
        template: Beam's shard name template (`-SSSSS-of-NNNNN`).
        codec: the Parquet compression of each page.
    """

    def __init__(self, prefix: str, schema, suffix: str, template: str,
                 *, codec: str = "snappy"):
        super().__init__(prefix, coder=None, file_name_suffix=suffix,
                         shard_name_template=template, mime_type="application/x-parquet",
                         compression_type=CompressionTypes.UNCOMPRESSED)
        self.schema = schema
        self.codec = codec

    def open(self, temp_path):
        return _ShardWriter(super().open(temp_path), self.schema, self.codec)

    def write_record(self, file_handle, value) -> None:
        file_handle.add(value)

    def close(self, file_handle) -> None:
        file_handle.close()
