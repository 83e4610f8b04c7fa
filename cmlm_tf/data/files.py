"""Input files: expanding paths and splitting them across input pipelines."""

from typing import Callable, List, Optional, Sequence, Tuple, Union

import tensorflow as tf

from cmlm_tf.data import pipeline


def list_files(input_path: Union[str, Sequence[str]], field: str = "input_path") -> List[str]:
    """Expands comma-separated paths and globs; a pattern matching nothing is an error."""
    patterns = input_path.split(",") if isinstance(input_path, str) else list(input_path)
    patterns = [p.strip() for p in patterns if p and p.strip()]
    if not patterns:
        raise ValueError(f"{field} is empty")
    files = []
    for pattern in patterns:
        matched = sorted(tf.io.gfile.glob(pattern))
        if not matched:
            raise FileNotFoundError(f"{pattern}: no file matches ({field})")
        files.extend(matched)
    return files


def shard_files(files: Sequence[str], input_context=None) -> Tuple[List[str], bool]:
    """This input pipeline's files, and whether records must be sharded instead.

    With at least as many files as input pipelines (workers), each pipeline reads its own
    files; otherwise every pipeline reads all files and keeps every n-th record.
    """
    files = list(files)
    if not input_context or input_context.num_input_pipelines <= 1:
        return files, False
    if len(files) >= input_context.num_input_pipelines:
        return files[input_context.input_pipeline_id::input_context.num_input_pipelines], False
    return files, True


def interleave_files(files: Sequence[str], read_file: Callable[[tf.Tensor], tf.data.Dataset],
                     *, input_context=None, is_training: bool = True,
                     seed: Optional[int] = None) -> tf.data.Dataset:
    """Records of `read_file(path)` over this input pipeline's share of `files`.

    Up to 8 files are read at a time, one record from each in turn (a1, b1, a2, b2, ...).
    Training shuffles the file order and repeats; evaluation reads every record once, in
    the same order on every run. Records are sharded instead of files when there are fewer
    files than pipelines.
    """
    files, shard_records = shard_files(files, input_context)
    dataset = tf.data.Dataset.from_tensor_slices(list(files))
    if is_training:
        dataset = dataset.shuffle(len(files), seed=seed).repeat()
    dataset = dataset.interleave(read_file, cycle_length=min(len(files), 8),
                                 num_parallel_calls=tf.data.AUTOTUNE,
                                 deterministic=pipeline.is_deterministic(seed,
                                                                         is_training=is_training))
    if shard_records:
        dataset = dataset.shard(input_context.num_input_pipelines,
                                input_context.input_pipeline_id)
    return dataset
