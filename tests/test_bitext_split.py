"""benchmarks/bitext_split.py from a clone on its own: the bundled verses, split without
leaks, so `configs/bitext_minilm.yaml`'s training file can be built offline."""

import json

from tests.conftest import REPO_DIR, load_script


def test_without_shared_data_the_bundled_verses_are_split_with_a_warning(tmp_path, capsys):
    out = tmp_path / "runs" / "bitext_split"
    split_script = load_script("benchmarks/bitext_split.py")
    assert split_script.main(["--shared_data", str(tmp_path / "no_shared" / "data"),
                              "--output", str(out), "--heldout_share", "0.2"]) == 0
    assert "bundled with cmlm_tf instead" in capsys.readouterr().err
    split = json.loads((out / "split.json").read_text())
    train = (out / "train.tsv").read_text(encoding="utf-8").splitlines()
    heldout = (out / "heldout" / "bible_es.en").read_text(encoding="utf-8").splitlines()
    assert split["leaked_english"] == 0 and len(train) == split["train_pairs"] > 3000
    assert 500 < len(heldout) and not set(heldout) & {line.split("\t")[0] for line in train}
    recipe = (REPO_DIR / "configs" / "bitext_minilm.yaml").read_text(encoding="utf-8")
    assert "runs/bitext_split/train.tsv" in recipe  # the file this writes
