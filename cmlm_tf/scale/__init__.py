"""Corpus-scale jobs on Apache Beam: the same exported encoder, run over files too large for
one process, on a laptop's cores (Beam's DirectRunner) or a cluster (Dataflow, Flink, Spark).

- `corpus_lines`: which lines of a text file are embedded, which are skipped and why (plain
  Python, shared by every job that reads a corpus).
- `embedding_files`: the on-disk format of embedded corpora (Parquet shards and a manifest
  written last), its reader, and the staging folder an output is published from.
- `folders`: local and remote folders (Beam's `FileSystems`): reads, renames, deletions.
- `embed`: the Beam pipeline of `python -m cmlm_tf.embed_corpus`; `pipeline_progress`: its
  run, with progress lines and the one line that says why it failed.

These modules need the `scale` extra (`pip install -e ".[scale]"`: apache-beam, pyarrow,
faiss-cpu, scann); `corpus_lines` needs nothing beyond the standard library.
"""
