"""The Beam pipeline of `python -m cmlm_tf.embed_corpus`: text files in, Parquet shards of
(source, line, embedding) out (`cmlm_tf.scale.embedding_files`).

    --input globs -> MatchFiles -> one match per path -> ReadMatches -> ReadCorpusLines
      -> Reshuffle -> BatchElements -> EncodeBatches -> ParquetShardSink(STAGING/part)

`ReadCorpusLines` applies the line policy of `cmlm_tf.scale.corpus_lines` to each file and
counts what it skips in Beam counters (namespace `cmlm_tf`); `Reshuffle` spreads the lines
over the workers; `EncodeBatches` loads the export once per worker process (a Beam `Shared`
handle) and embeds each batch with `model.encode`, which sorts a batch by token length so
that its sub-batches pad little. Beam's file sink writes temporary files and renames them at
finalisation, so a failed or retried bundle leaves no partial shard (`shard_sink`: with page
checksums); the manifest is written into the staging folder after the pipeline succeeds, with
the fingerprints of the inputs (hashed before they are read, refused if they change while
read) and of the model (`embedding_checks`), and the folder is then published whole.

Runners: with no `--runner`, the job runs on the DirectRunner's batch engine (Beam's
`FnApiRunner`) in `multi_processing` mode with one worker process per CPU core. (Beam 2.77's
`DirectRunner` first tries Prism, a Go binary it downloads, whose Python workers run in one
process and ignore `--direct_num_workers`.) On Dataflow, Flink or Spark the same pipeline
needs only the runner's flags; the progress lines need workers that write to this machine's
disk, so they are printed only for local runs.
"""

import dataclasses
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.filesystems import CompressionTypes, FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.utils import shared

from cmlm_tf import inference
from cmlm_tf.inference import TOKENIZE_BATCHES, load
from cmlm_tf.scale import (
    corpus_lines,
    embedding_checks,
    embedding_files,
    folders,
    pipeline_progress,
    shard_sink,
)
from cmlm_tf.scale import options as beam_options
from cmlm_tf.scale.corpus_lines import EMBEDDED, LINES_READ, OVER_LONG
from cmlm_tf.text.batching import sorted_batches

COUNTER_NAMESPACE = "cmlm_tf"
PROGRESS_FOLDER = "_progress"
# BatchElements gathers this many encode() batches per call (fewer at the end of a bundle):
# encode() sorts what it is given by token length, so a larger call pads less. A fixed size,
# not Beam's default of batches timed to about a second, which here would hold a few hundred
# lines.
BATCHES_PER_CALL = 64
_READ_COUNTERS = (LINES_READ,) + corpus_lines.SKIP_REASONS + (OVER_LONG,)


@dataclasses.dataclass
class EmbedConfig:
    """What to embed and where (the flags of `python -m cmlm_tf.embed_corpus`).

    Attributes:
        model: the export folder (`python -m cmlm_tf.export`).
        inputs: file globs, local or remote (`gs://...`); a file matched twice is read once.
        output: the output folder (`cmlm_tf.scale.embedding_files`).
        text_column: embed this 1-based tab-separated field instead of the whole line.
        batch_size: texts per forward call of `encode()`.
        max_chars: longer lines are cut to this many characters.
        overwrite: replace an existing output (once the new one is complete).
    """

    model: str
    inputs: Sequence[str]
    output: str
    text_column: Optional[int] = None
    batch_size: int = 64
    max_chars: int = corpus_lines.MAX_CHARS
    overwrite: bool = False


@dataclasses.dataclass
class Summary:
    """What a run did: `counts` (`embedding_files.COUNT_NAMES`), the shards written, the
    output folder and the run's seconds."""

    counts: Dict[str, int]
    shards: int
    output: str
    seconds: float

    def line(self) -> str:
        counts = self.counts
        skipped = sum(counts[name] for name in corpus_lines.SKIP_REASONS)
        return (f"lines read {counts['lines_read']}, embedded {counts['embedded']}, skipped "
                f"{skipped} (empty {counts['empty']}, invalid UTF-8 {counts['invalid_utf8']}, "
                f"missing column {counts['missing_column']}), cut to max_chars "
                f"{counts['over_long']}; {self.shards} shards in {self.output} "
                f"({self.seconds:.0f} s)")


class ReadCorpusLines(beam.DoFn):
    """ReadableFile -> (source, line, text) for each line to embed (`corpus_lines`).

    Counts lines_read, empty, invalid_utf8, missing_column and over_long in Beam counters,
    once per file.
    """

    def __init__(self, text_column: Optional[int] = None,
                 max_chars: int = corpus_lines.MAX_CHARS):
        self.text_column = text_column
        self.max_chars = max_chars

    def setup(self):
        self._counters = {name: beam.metrics.Metrics.counter(COUNTER_NAMESPACE, name)
                          for name in _READ_COUNTERS}

    def process(self, readable_file) -> Iterator[Tuple[str, int, str]]:
        source = readable_file.metadata.path
        counts = dict.fromkeys(_READ_COUNTERS, 0)
        with readable_file.open() as stream:
            for record in corpus_lines.iter_records(stream, source, self.text_column,
                                                    self.max_chars):
                counts[LINES_READ] += 1
                if record.skipped:
                    counts[record.skipped] += 1
                    continue
                if record.over_long:
                    counts[OVER_LONG] += 1
                yield source, record.line, record.text
        for name, count in counts.items():
            self._counters[name].inc(count)


def local_export(export_dir: str) -> str:
    """`export_dir` itself when it is local; a remote one (`gs://...`, which remote workers
    can read) is first copied into a temporary folder, since `cmlm_tf.load` reads local
    folders."""
    if not folders.is_remote(export_dir):
        return export_dir
    prefix = export_dir.rstrip("/") + "/"
    target = tempfile.mkdtemp(prefix="cmlm_tf_export-")
    for metadata in FileSystems.match([prefix + "**"])[0].metadata_list:
        path = os.path.join(target, metadata.path[len(prefix):])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with FileSystems.open(metadata.path,
                              compression_type=CompressionTypes.UNCOMPRESSED) as source, \
                open(path, "wb") as copy:
            shutil.copyfileobj(source, copy)
    return target


def export_dim(export_dir: str) -> int:
    """The embedding size an export declares in its `cmlm_tf_export.json`."""
    if not folders.is_remote(export_dir):
        return int(inference.read_metadata(export_dir)["dim"])
    path = folders.join(export_dir, inference.METADATA_FILE)
    with folders.open_file(path) as f:
        return int(json.loads(f.read().decode("utf-8"))["dim"])


def load_model(export_dir: str, intra_op_threads: Optional[int] = None,
               inter_op_threads: Optional[int] = None):
    """`cmlm_tf.load(export_dir)` with the worker's thread settings (`local_export` first)."""
    return load(local_export(export_dir), intra_op_threads=intra_op_threads,
                inter_op_threads=inter_op_threads)


class EncodeBatches(beam.DoFn):
    """A batch of (source, line, text) -> {"source", "line", "embedding"} rows.

    The export is loaded once per worker process through `shared_handle` (every thread of
    the process gets the same model) with the given thread settings; each batch is embedded
    with `model.encode(texts, batch_size)`, `TOKENIZE_BATCHES` forward batches at a time.
    Counts `embedded` after each; with `progress_folder`, keeps a
    `pipeline_progress.ProgressFile` there.

    Args:
        shared_handle: an `apache_beam.utils.shared.Shared` made at pipeline construction.
        export_dir: the export folder.
        batch_size: texts per forward call.
        intra_op_threads, inter_op_threads: TensorFlow's pools in each worker (None: its
            default).
        progress_folder: a local folder for progress files, or None.
    """

    def __init__(self, shared_handle: shared.Shared, export_dir: str, *, batch_size: int = 64,
                 intra_op_threads: Optional[int] = None, inter_op_threads: Optional[int] = None,
                 progress_folder: Optional[str] = None):
        self.shared_handle = shared_handle
        self.export_dir = export_dir
        self.batch_size = batch_size
        self.intra_op_threads = intra_op_threads
        self.inter_op_threads = inter_op_threads
        self.progress_folder = progress_folder

    def setup(self):
        loader = functools.partial(load_model, self.export_dir, self.intra_op_threads,
                                   self.inter_op_threads)
        self.model = self.shared_handle.acquire(loader)
        self._embedded = beam.metrics.Metrics.counter(COUNTER_NAMESPACE, EMBEDDED)
        self._progress = (pipeline_progress.ProgressFile(self.progress_folder)
                          if self.progress_folder else None)

    def process(self, batch: List[Tuple[str, int, str]]) -> Iterator[dict]:
        # encode() tokenises `batch_size * TOKENIZE_BATCHES` texts at a time, the longest
        # (in UTF-8 bytes) first: handing it those chunks one by one pads the same, and
        # the count of embedded lines moves after each.
        texts = [text.encode("utf-8", "surrogatepass") for _, _, text in batch]
        for rows in sorted_batches([len(text) for text in texts],
                                   self.batch_size * TOKENIZE_BATCHES):
            vectors = self.model.encode([texts[row] for row in rows],
                                        batch_size=self.batch_size, show_progress=False)
            for row, vector in zip(rows, vectors):
                source, line, _ = batch[row]
                yield {"source": source, "line": line, "embedding": vector}
            self._embedded.inc(len(rows))
            if self._progress is not None:
                self._progress.add(len(rows))

    def finish_bundle(self):
        if self._progress is not None:
            self._progress.write()


def _path_and_metadata(metadata: FileMetadata) -> Tuple[str, FileMetadata]:
    return metadata.path, metadata


def _first_match(path_and_matches: Tuple[str, Iterable[FileMetadata]]) -> FileMetadata:
    _, matches = path_and_matches
    return next(iter(matches))


def build_pipeline(pipeline: beam.Pipeline, config: EmbedConfig, staging: str,
                   *, threads: Tuple[Optional[int], Optional[int]] = (None, None),
                   progress_folder: Optional[str] = None,
                   encode_dofn: Callable[..., EncodeBatches] = EncodeBatches):
    """Adds the embedding job to `pipeline`: read `config.inputs`, embed, and write the
    shards `STAGING/part-SSSSS-of-NNNNN.parquet`.

    Args:
        pipeline: a `beam.Pipeline`.
        config: what to embed.
        staging: the folder the shards are written to.
        threads: (intra_op_threads, inter_op_threads) of each worker's TensorFlow.
        progress_folder: where encoders keep their progress files (local runs), or None.
        encode_dofn: makes the encoding DoFn from `EncodeBatches`' arguments: the class, a
            subclass, or a `functools.partial` of one (tests inject faults with one).

    Returns:
        The write's output PCollection (the shard names).
    """
    matches = tuple(pipeline | f"Match input {index}" >> fileio.MatchFiles(pattern)
                    for index, pattern in enumerate(config.inputs))
    lines = (
        matches | "All matches" >> beam.Flatten()
        | "Key by path" >> beam.Map(_path_and_metadata)
        | "Group by path" >> beam.GroupByKey()
        | "Each path once" >> beam.Map(_first_match)
        | "Open files" >> fileio.ReadMatches()
        | "Read lines" >> beam.ParDo(ReadCorpusLines(config.text_column, config.max_chars))
        | "Spread lines" >> beam.Reshuffle())
    encoder = encode_dofn(shared.Shared(), config.model, batch_size=config.batch_size,
                          intra_op_threads=threads[0], inter_op_threads=threads[1],
                          progress_folder=progress_folder)
    rows = (
        lines
        | "Batch" >> beam.BatchElements(
            min_batch_size=config.batch_size * BATCHES_PER_CALL,
            max_batch_size=config.batch_size * BATCHES_PER_CALL)
        | "Encode" >> beam.ParDo(encoder))
    return rows | "Write shards" >> beam.io.Write(shard_sink.ParquetShardSink(
        embedding_files.shard_prefix(staging), embedding_files.schema(),
        embedding_files.SHARD_SUFFIX, embedding_files.SHARD_NAME_TEMPLATE))


def read_counts(result) -> Dict[str, int]:
    """The `cmlm_tf` counters of a finished pipeline (committed values where the runner
    reports them, else attempted), every name of `corpus_lines.COUNTS` present."""
    counts = dict.fromkeys(corpus_lines.COUNTS, 0)
    query = result.metrics().query(MetricsFilter().with_namespace(COUNTER_NAMESPACE))
    for counter in query["counters"]:
        value = counter.committed if counter.committed is not None else counter.attempted
        if counter.key.metric.name in counts:
            counts[counter.key.metric.name] += int(value or 0)
    return counts


def _absolute(path: str) -> str:
    return path if folders.is_remote(path) else os.path.abspath(path)


# The command's lines on stderr; in a local run, the others go to the workers' log.
_PREFIX = "embed_corpus: "


def _stderr(line: str) -> None:
    print(f"{_PREFIX}{line}", file=sys.stderr, flush=True)


def _finish(config: EmbedConfig, staging: str, result, report,
            *, fingerprints: dict) -> Tuple[Dict[str, int], int]:
    """Writes the manifest into `staging` (the last file), with the `fingerprints` taken
    before the inputs were read, once they are known not to have changed since; returns
    (counts, shards)."""
    embedding_checks.check_unchanged(fingerprints[embedding_checks.FILES_FIELD])
    counts = read_counts(result)
    names = embedding_files.list_shards(staging)
    rows = embedding_files.count_rows(staging, names)
    if rows != counts[EMBEDDED]:
        report(f"warning: the shards hold {rows} rows but Beam counted "
               f"{counts[EMBEDDED]} embedded; the manifest records {rows}")
        counts[EMBEDDED] = rows
    embedding_files.write_manifest(staging, embedding_files.make_manifest(
        config.model, export_dim(config.model), config.inputs, config.text_column,
        shards=len(names),
        counts=counts, fingerprints=fingerprints))
    return counts, len(names)


def run(config: EmbedConfig, *, beam_args: Sequence[str] = (),
        report: Callable[[str], None] = _stderr,
        encode_dofn: Callable[..., EncodeBatches] = EncodeBatches,
        progress_every: float = 10.0) -> Summary:
    """Embeds `config.inputs` into `config.output`; returns what was done.

    Steps: check the output (and remove what killed runs left), count the input lines (local
    runs, for the progress lines), run the pipeline into a staging folder, write the manifest,
    publish. Local paths are made absolute first, so that the rows' sources and the
    manifest's model and inputs name their files from any working folder. A failed pipeline
    removes the staging folder and raises `pipeline_progress.PipelineFailed`; the output is
    then as it was.

    Args:
        config: what to embed and where.
        beam_args: Beam pipeline options (`--runner`, `--direct_num_workers`, ...).
        report: prints one line of progress or warning (default: stderr, `embed_corpus: `).
        encode_dofn: makes the encoding DoFn (see `build_pipeline`).
        progress_every: seconds between progress lines.
    """
    start = time.perf_counter()
    for note in embedding_files.check_output(config.output, overwrite=config.overwrite):
        report(f"warning: {note}")
    # Absolute local paths: the rows' sources then name their files from any folder.
    config = dataclasses.replace(config, model=_absolute(config.model),
                                 inputs=[_absolute(pattern) for pattern in config.inputs])
    options = beam_options.make_options(beam_args)
    staging = embedding_files.staging_folder(_absolute(config.output))
    local = beam_options.runs_here(options) and not folders.is_remote(staging)
    progress_folder = os.path.join(staging, PROGRESS_FOLDER) if local else None
    try:
        if not folders.is_remote(staging):
            os.makedirs(progress_folder or staging)
        total = pipeline_progress.count_lines(
            pipeline_progress.match_inputs(config.inputs)) if local else None
        fingerprints = embedding_checks.manifest_fields(
            pipeline_progress.match_inputs(config.inputs), config.model, export_dim(config.model))
        pipeline = beam.Pipeline(runner=beam_options.make_runner(options), options=options)
        build_pipeline(pipeline, config, staging, threads=beam_options.worker_threads(options),
                       progress_folder=progress_folder, encode_dofn=encode_dofn)
        result = pipeline_progress.run_pipeline(pipeline, progress_folder, total, report,
                                                every=progress_every,
                                                own_prefix=_PREFIX if local else None,
                                                output=config.output)
        if progress_folder is not None:
            folders.delete_folder(progress_folder)
        counts, shards = _finish(config, staging, result, report, fingerprints=fingerprints)
    except BaseException:
        folders.delete_folder(staging)
        raise
    embedding_files.publish(staging, config.output, overwrite=config.overwrite)
    return Summary(counts, shards, config.output, time.perf_counter() - start)
