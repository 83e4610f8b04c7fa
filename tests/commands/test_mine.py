"""Tests of `python -m cmlm_tf.mine`'s own checks: flag combinations refused before anything
is loaded, and texts that do not name the embedded files. (Mining end to end:
tests/driver/test_mine_vectors.py; the search and the pairs file:
tests/test_corpus_mining.py.)"""

import types

import numpy as np
import pytest

from cmlm_tf.commands import common, mine

REQUIRED = ["--src", "s.txt", "--tgt", "t.txt", "--output", "pairs.tsv"]


@pytest.mark.parametrize("flags, beam_args, message", [
    (["--model", "m", "--k", "0"], [], "--k must be positive"),
    ([], [], "--model is required"),
    (["--src_vectors", "a"], [], "--src_vectors and --tgt_vectors go together"),
    (["--model", "m", "--recall", "0.9", "--probes", "4"], [], "--recall and --probes"),
    (["--model", "m", "--index", "exact", "--candidates", "8"], [],
     "--candidates applies to --index ann"),
    (["--model", "m", "--work_dir", "w"], [], "--work_dir applies to a Beam run"),
])
def test_bad_combinations_are_refused(flags, beam_args, message):
    args = mine.build_parser().parse_args(REQUIRED + flags)
    with pytest.raises(common.UsageError, match=message):
        mine.check_arguments(args, beam_args)


def test_texts_must_name_every_embedded_file(tmp_path):
    embedded, other = tmp_path / "a.txt", tmp_path / "b.txt"
    embedded.write_text("x\n", encoding="utf-8")
    other.write_text("y\n", encoding="utf-8")
    table = types.SimpleNamespace(sources=np.array([str(embedded)]))
    mine.check_sources(table, str(tmp_path / "*.txt"), "--src")
    with pytest.raises(common.UsageError, match=r"--src .*b\.txt does not name .*a\.txt"):
        mine.check_sources(table, str(other), "--src")
