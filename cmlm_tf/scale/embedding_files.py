"""The on-disk format of an embedded corpus, its reader, and how an output is published.

An output is a folder `OUT/`:

    OUT/part-00000-of-00002.parquet    columns source (string: the input file as Beam
    OUT/part-00001-of-00002.parquet      matched it, absolute for a local file), line
                                         (int64, 1-based line number in it), embedding
                                         (list<float32> [dim], L2-normalised)
    OUT/_cmlm_tf_embeddings.json       the manifest, written last: {"format":
                                         "cmlm_tf_embeddings", "version": 1, "model", "dim",
                                         "inputs", "text_column", "shards", "counts",
                                         "files", "model_identity"} (`embedding_checks`)
Shards carry page checksums, verified on reading, as is each vector (`embedding_checks`).

`pandas.read_parquet("OUT")` and `pyarrow.parquet.read_table("OUT")` read the shards (they
skip names starting with `_` or `.`); `read_embeddings("OUT")` also checks them against the
manifest and sorts the rows by (source, line).

An output appears whole or not at all. The pipeline writes into a staging sibling,
`OUT.staging-<host>-<pid>-<hex>`, with the manifest last, and `publish` renames it to `OUT`.
With `--overwrite` an existing `OUT` is replaced only once the new one is complete: it is
renamed aside (`OUT.replaced-<host>-<pid>-<hex>`), the new one renamed in, then the old one
deleted; `--overwrite` replaces only an embeddings folder (or an empty one). A run that was
killed leaves its staging folder behind; `check_output` removes such leftovers at the next
run, once the process their name records is gone (a run still writing keeps its own). Local
paths are renamed as folders (atomic on one filesystem); remote ones (`gs://`, `s3://`) go
through Beam's `FileSystems`, file by file (`cmlm_tf.scale.folders`), which is not atomic but
never shows a manifest beside missing shards.

pyarrow is imported when a function needs it (the `scale` extra).
"""

import dataclasses
import json
import os
import re
import uuid
from typing import Dict, List, Optional, Sequence

import numpy as np

from cmlm_tf.files import disk, output_folders
from cmlm_tf.scale import embedding_checks, folders

MANIFEST = "_cmlm_tf_embeddings.json"
FORMAT = "cmlm_tf_embeddings"
VERSION = 1
SHARD_PREFIX = "part"
SHARD_NAME_TEMPLATE = "-SSSSS-of-NNNNN"
SHARD_SUFFIX = ".parquet"
COLUMNS = ("source", "line", "embedding")
STAGING_INFIX = ".staging-"
REPLACED_INFIX = ".replaced-"
MANIFEST_FIELDS = ("format", "version", "model", "dim", "inputs", "text_column", "shards",
                   "counts")
# The counts of `cmlm_tf.scale.corpus_lines.COUNTS`, which the manifest records.
COUNT_NAMES = ("lines_read", "embedded", "empty", "invalid_utf8", "missing_column",
               "over_long")
_SHARD_PATTERN = re.compile(r"^part-(\d{5,})-of-(\d{5,})\.parquet$")
_INSTALL = 'pip install -e ".[scale]"'


class EmbeddingFilesError(ValueError):
    """An embeddings folder that is unfinished, incomplete or inconsistent (one line, naming
    the path), or an output that cannot be written where asked."""


@dataclasses.dataclass
class Embeddings:
    """An embedded corpus, rows sorted by (source, line).

    Attributes:
        sources: object array of str [n], the input file of each row.
        lines: int64 [n], the 1-based line number in that file.
        vectors: float32 [n, dim], L2-normalised.
        manifest: the folder's `_cmlm_tf_embeddings.json`.
    """

    sources: np.ndarray
    lines: np.ndarray
    vectors: np.ndarray
    manifest: dict

    def __len__(self) -> int:
        return len(self.lines)


def _pyarrow():
    """(pyarrow, pyarrow.parquet), or an ImportError naming the extra that installs them."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ImportError(f"reading and writing embeddings needs pyarrow: {_INSTALL}") from None
    return pyarrow, pyarrow.parquet


def schema():
    """The shards' Arrow schema: source string, line int64, embedding list<float32>."""
    pa, _ = _pyarrow()
    return pa.schema([("source", pa.string()), ("line", pa.int64()),
                      ("embedding", pa.list_(pa.float32()))])


def shard_name(index: int, count: int) -> str:
    """`part-00000-of-00002.parquet`: the name Beam gives shard `index` of `count`."""
    return f"{SHARD_PREFIX}-{index:05d}-of-{count:05d}{SHARD_SUFFIX}"


def shard_prefix(folder: str) -> str:
    """The prefix Beam's Parquet sink is given, `FOLDER/part`: with `SHARD_NAME_TEMPLATE` and
    `SHARD_SUFFIX` its shards are `shard_name(i, n)`."""
    return folders.join(folder, SHARD_PREFIX)


def staging_folder(out: str) -> str:
    """A fresh staging sibling of `out`, `OUT.staging-<host>-<pid>-<hex>` (not created
    here): the name says which process writes it (`output_folders.writer_tag`)."""
    writer = output_folders.writer_tag()
    return f"{folders.clean(out)}{STAGING_INFIX}{writer}-{uuid.uuid4().hex}"


def check_output(out: str, *, overwrite: bool) -> List[str]:
    """Refuses an `out` that exists unless `overwrite`, then removes what killed runs left.

    `--overwrite` replaces only a finished embeddings folder (one with the manifest) or an
    empty folder, never another folder that happens to have the name
    (`output_folders.refusal`). Leftover `OUT.staging-*` folders whose writer is gone are
    removed; an `OUT.replaced-*` folder (the old output that an
    interrupted `--overwrite` set aside) is removed when `OUT` exists and kept otherwise.

    Returns:
        One line per leftover removed or kept, for the caller to print as a warning.
    """
    out = folders.clean(out)
    if folders.exists(out):
        folder = folders.is_remote(out) or os.path.isdir(out)
        line = output_folders.refusal(out, "--output",
                                      names=folders.files(out) if folder else None,
                                      marker=MANIFEST, what="an embeddings folder",
                                      overwrite=overwrite)
        if line is not None:
            raise EmbeddingFilesError(line)
    return remove_leftovers(out)


def _tail(out: str, folder: str, infix: str) -> str:
    """What follows `OUT<infix>` in the name of `folder`: its writer, then a random part."""
    return os.path.basename(folder)[len(os.path.basename(out)) + len(infix):]


def remove_leftovers(out: str) -> List[str]:
    """Removes the staging folders of killed runs beside `out`; see `check_output`. A folder
    whose writer (its name's `<host>-<pid>`) is still running is left alone."""
    out = folders.clean(out)
    notes = []
    for folder in folders.siblings(out, STAGING_INFIX):
        if not output_folders.writer_gone(folder, _tail(out, folder, STAGING_INFIX)):
            continue  # another run, still writing
        folders.delete_folder(folder)
        notes.append(f"removed {folder}, left by a run that did not finish")
    for folder in folders.siblings(out, REPLACED_INFIX):
        writer = output_folders.writer_of(_tail(out, folder, REPLACED_INFIX))
        if writer is not None and output_folders.writer_alive(writer):
            continue  # a run swapping its output in right now removes it itself
        if folders.exists(out):
            folders.delete_folder(folder)
            notes.append(f"removed {folder}, an old output that an interrupted --overwrite "
                         "had set aside")
        else:
            notes.append(f"kept {folder}: the old output that an interrupted --overwrite set "
                         f"aside; rename it to {out} to use it")
    return notes


def publish(staging: str, out: str, *, overwrite: bool = False) -> None:
    """Renames the finished `staging` folder (manifest inside) to `out`.

    An existing `out` is refused unless `overwrite`; with it, `out` is renamed aside, `staging`
    renamed in, and the old folder deleted, so `out` is never a mixture of two runs.
    """
    staging, out = folders.clean(staging), folders.clean(out)
    if not folders.exists(folders.join(staging, MANIFEST)):
        raise EmbeddingFilesError(f"{staging}: no {MANIFEST}; only a finished output is "
                                  "published")
    aside = None
    if folders.exists(out):
        if not overwrite:
            raise EmbeddingFilesError(f"{out}: appeared while embedding; the new embeddings "
                                      f"are in {staging}")
        aside = f"{out}{REPLACED_INFIX}{output_folders.writer_tag()}-{uuid.uuid4().hex}"
        folders.rename_folder(out, aside, MANIFEST, marker_last=False)
    folders.rename_folder(staging, out, MANIFEST)
    if aside is not None:
        folders.delete_folder(aside)


def make_manifest(model: str, dim: int, inputs: Sequence[str], text_column: Optional[int],
                  *, shards: int, counts: Dict[str, int], fingerprints: Optional[dict] = None
                  ) -> dict:
    """The manifest of an output (see the module docstring); `counts` has `COUNT_NAMES`;
    `fingerprints` adds `embedding_checks.manifest_fields`."""
    missing = [name for name in COUNT_NAMES if name not in counts]
    if missing:
        raise ValueError(f"counts lack {', '.join(missing)}")
    return {"format": FORMAT, "version": VERSION, "model": model, "dim": int(dim),
            "inputs": list(inputs), "text_column": text_column, "shards": int(shards),
            "counts": {name: int(counts[name]) for name in COUNT_NAMES},
            **(fingerprints or {})}


def write_manifest(folder: str, manifest: dict) -> str:
    """Writes `FOLDER/_cmlm_tf_embeddings.json` (the last file of an output); returns its
    path."""
    path = folders.join(folder, MANIFEST)
    text = json.dumps(manifest, indent=2) + "\n"
    if folders.is_remote(path):
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.create(path) as f:
            f.write(text.encode("utf-8"))
        return path

    with disk.atomic_output(path) as temp, open(temp, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def read_manifest(folder: str) -> dict:
    """The manifest of `folder`, checked; errors name the path."""
    folder = folders.clean(folder)
    path = folders.join(folder, MANIFEST)
    if not folders.exists(folder):
        raise EmbeddingFilesError(f"{folder}: not found")
    if not folders.exists(path):
        raise EmbeddingFilesError(f"{folder}: no {MANIFEST}, so the embedding did not finish "
                                  "(or this is not an embeddings folder); run "
                                  "python -m cmlm_tf.embed_corpus again")
    try:
        with folders.open_file(path) as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise EmbeddingFilesError(f"{path}: cannot read the manifest ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise EmbeddingFilesError(f"{path}: not a {FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise EmbeddingFilesError(f"{path}: version {manifest.get('version')!r}, this cmlm_tf "
                                  f"reads {VERSION}")
    missing = [name for name in MANIFEST_FIELDS if name not in manifest]
    missing += [f"counts.{name}" for name in COUNT_NAMES
                if name not in (manifest.get("counts") or {})]
    if missing:
        raise EmbeddingFilesError(f"{path}: lacks {', '.join(missing)}")
    if not isinstance(manifest["dim"], int) or manifest["dim"] < 1:
        raise EmbeddingFilesError(f"{path}: dim must be a positive integer, got "
                                  f"{manifest['dim']!r}")
    if not isinstance(manifest["shards"], int) or manifest["shards"] < 1:
        raise EmbeddingFilesError(f"{path}: shards must be a positive integer, got "
                                  f"{manifest['shards']!r}")
    return manifest


def list_shards(folder: str) -> List[str]:
    """The names of the shard files in `folder` (`part-*-of-*.parquet`), sorted."""
    return sorted(name for name in folders.files(folder) if _SHARD_PATTERN.match(name))


def count_rows(folder: str, names: Optional[Sequence[str]] = None) -> int:
    """Rows in the shards `names` of `folder` (default: all), from their Parquet footers."""
    _, pq = _pyarrow()
    rows = 0
    for name in list_shards(folder) if names is None else names:
        with folders.open_file(folders.join(folder, name)) as f:
            rows += pq.ParquetFile(f).metadata.num_rows
    return rows


def read_embeddings(folder: str) -> Embeddings:
    """Reads a finished output, checked against its manifest; rows sorted by (source, line).

    Refused, with an `EmbeddingFilesError` naming the path: a folder without the manifest
    (the embedding did not finish), missing or extra shards, a duplicate (source, line),
    vectors whose width is not the manifest's dim, or a row count that is not its `embedded`.
    """
    pa, _ = _pyarrow()
    folder = folders.clean(folder)
    manifest = read_manifest(folder)
    dim = manifest["dim"]
    names = _check_shard_names(folder, manifest["shards"])
    tables = [_read_shard(folders.join(folder, name), dim) for name in names]
    table = pa.concat_tables(tables) if tables else schema().empty_table()
    if table.num_rows != manifest["counts"]["embedded"]:
        raise EmbeddingFilesError(f"{folder}: the shards hold {table.num_rows} rows but the "
                                  f"manifest counts {manifest['counts']['embedded']} embedded")
    order = _sort_order(table)
    sources, lines = _sorted_ids(table, order)
    _check_unique(folder, sources, lines)
    return Embeddings(sources=sources, lines=lines,
                      vectors=_sorted_vectors(table, order, dim), manifest=manifest)


def _check_shard_names(folder: str, count: int) -> List[str]:
    """The expected shard names, once each is known to be there and nothing else is."""
    expected = [shard_name(index, count) for index in range(count)]
    present = {name for name in folders.files(folder) if not name.startswith(("_", "."))}
    missing = [name for name in expected if name not in present]
    if missing:
        raise EmbeddingFilesError(f"{folder}: missing shard {missing[0]}"
                                  f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}"
                                  f" of the manifest's {count}")
    extra = sorted(present - set(expected))
    if extra:
        raise EmbeddingFilesError(f"{folder}: unexpected file {extra[0]} (the manifest lists "
                                  f"{count} shards, {shard_name(0, count)} ...)")
    return expected


def _read_shard(path: str, dim: int):
    """One shard as an Arrow table, its columns and vector widths checked."""
    pa, pq = _pyarrow()
    try:
        with folders.open_file(path) as f:
            table = pq.read_table(f, columns=list(COLUMNS), page_checksum_verification=True)
    except (OSError, pa.ArrowException) as error:
        detail = " ".join(str(error).split())[:200]
        raise EmbeddingFilesError(f"{path}: cannot read the shard ({detail})") from None
    expected = schema()
    for field in expected:
        actual = table.schema.field(field.name).type
        if actual != field.type:
            raise EmbeddingFilesError(f"{path}: column {field.name} is {actual}, expected "
                                      f"{field.type}")
    for chunk in table.column("embedding").chunks:
        if chunk.null_count:
            raise EmbeddingFilesError(f"{path}: a row has no vector (null embedding)")
        widths = chunk.value_lengths().to_numpy()
        bad = np.flatnonzero(widths != dim)
        if len(bad):
            raise EmbeddingFilesError(f"{path}: a vector of width {widths[bad[0]]}, the "
                                      f"manifest's dim is {dim}")
    bad = embedding_checks.bad_row(table, dim)
    if bad is not None:
        raise EmbeddingFilesError(f"{path}: {bad}")
    return table


def _sort_order(table) -> np.ndarray:
    """Row indices of `table` sorted by (source, line)."""
    import pyarrow.compute as pc

    keys = table.select(["source", "line"])
    return pc.sort_indices(keys, sort_keys=[("source", "ascending"),
                                            ("line", "ascending")]).to_numpy()


def _sorted_ids(table, order: np.ndarray):
    """(sources, lines) in `order`; each distinct source is one str object, shared by its
    rows."""
    encoded = table.column("source").combine_chunks().dictionary_encode()
    names = np.array(encoded.dictionary.to_pylist(), dtype=object)
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    lines = table.column("line").to_numpy().astype(np.int64, copy=False)
    return names[codes[order]], lines[order]


def _check_unique(folder: str, sources: np.ndarray, lines: np.ndarray) -> None:
    """Refuses a (source, line) that appears twice (rows already sorted)."""
    same = np.flatnonzero((lines[1:] == lines[:-1]) & (sources[1:] == sources[:-1]))
    if len(same):
        row = same[0]
        raise EmbeddingFilesError(f"{folder}: {sources[row]} line {lines[row]} is embedded "
                                  f"twice ({len(same)} duplicate rows)")


def _sorted_vectors(table, order: np.ndarray, dim: int) -> np.ndarray:
    """float32 [n, dim] in `order`, filled chunk by chunk (one copy, no loop over rows)."""
    vectors = np.empty([table.num_rows, dim], np.float32)
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    start = 0
    for chunk in table.column("embedding").chunks:
        values = chunk.flatten().to_numpy(zero_copy_only=False)
        vectors[position[start:start + len(chunk)]] = values.reshape(len(chunk), dim)
        start += len(chunk)
    return vectors


