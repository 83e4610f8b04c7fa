"""Every packaged recipe validates on data it does not train on."""

import glob
import re

import pytest

from cmlm_tf.data import bitext, mlm_tlm
from cmlm_tf.driver import train_lib
from cmlm_tf.model_import import hf_bert
from tests.conftest import REPO_DIR

CONFIGS = REPO_DIR / "configs"
RECIPES = sorted(path.name for path in CONFIGS.glob("*.yaml"))


def _header_command(name: str):
    """The experiment and `--config_file` stack of the first command in a recipe's header
    comment; an overlay without `--experiment` takes its first recipe's experiment."""
    header = []
    for line in (CONFIGS / name).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        header.append(line.lstrip("#").strip())
    # One command: a line with --config_file=, joined with its `\` continuations.
    text = " ".join(header).replace("\\ ", " ")
    start = text.find("python -m cmlm_tf.train")
    if start < 0:
        start = text.find("--config_file=")
    assert start >= 0, f"configs/{name}: no command in its header comment"
    # Up to the next command or the next sentence after it ("Ablations: add ...").
    command = text[start] + re.split(r"\s(?:python|Ablations|Results)\b", text[start + 1:])[0]
    experiment = re.search(r"--experiment=(\S+)", command)
    stack = re.findall(r"--config_file=(\S+)", command)
    assert f"configs/{name}" in stack, f"configs/{name}: header command lacks the recipe"
    if experiment is None:
        experiment_name, _ = _header_command(stack[0].split("/")[-1])
    else:
        experiment_name = experiment.group(1)
    return experiment_name, [path for path in stack if (REPO_DIR / path).exists()]


def _files(pattern: str):
    return sorted({path for part in pattern.split(",") if part.strip()
                   for path in glob.glob(part.strip())})


def _lines(path: str):
    """A file's non-empty lines and, for TSV pairs, each side on its own."""
    lines = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                lines.add(line)
                if path.endswith(".tsv"):
                    lines.update(side.strip() for side in line.split("\t")[:2] if side.strip())
    return lines


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_validates_on_held_out_data(name, monkeypatch):
    monkeypatch.chdir(REPO_DIR)
    experiment, stack = _header_command(name)
    params = train_lib.build_params(experiment, stack)
    task = params.task
    training = [getattr(task, field).input_path for field in ("train_data", "bitext_data",
                                                              "nli_data")
                if hasattr(task, field) and getattr(task, field).input_path]
    if not task.validation_data.input_path:
        return  # a recipe whose user names the data
    validation = [task.validation_data.input_path]
    if getattr(task.validation_data, "tlm_fraction", 0) > 0:
        # MLM + TLM validation reads its TLM pairs from task.bitext_data unless told.
        validation.append(task.validation_data.bitext_input_path or task.bitext_data.input_path)
    training_files = {f for pattern in training for f in _files(pattern)}
    validation_files = {f for pattern in validation for f in _files(pattern)}
    assert not set(training) & set(validation), f"{name}: validates on its training input"
    assert not training_files & validation_files, f"{name}: validates on its training files"
    seen = set().union(*(_lines(path) for path in training_files))
    for path in validation_files:
        shared = _lines(path) & seen
        assert not shared, f"{name}: {path} shares {len(shared)} lines with training data, " \
            f"e.g. {sorted(shared)[0]!r}"


def test_tiny_recipes_have_held_out_validation(monkeypatch):
    """The tiny recipes validate on the bundled held-out splits (not on nothing)."""
    monkeypatch.chdir(REPO_DIR)
    for name, field in (("cmlm_tiny", "input_path"), ("bitext_tiny", "input_path"),
                        ("moco_tiny", "input_path"), ("bgt_tiny", "input_path"),
                        ("mlm_tlm_tiny", "input_path"), ("mlm_tlm_tiny", "bitext_input_path")):
        experiment, stack = _header_command(f"{name}.yaml")
        params = train_lib.build_params(experiment, stack)
        path = getattr(params.task.validation_data, field)
        assert path.endswith("_heldout.txt") or path.endswith("_heldout.tsv"), (name, path)


def test_mlm_tlm_validation_reads_its_held_out_pairs(monkeypatch):
    """`validation_data.bitext_input_path` replaces `task.bitext_data` for validation only."""
    monkeypatch.chdir(REPO_DIR)
    read = []
    real = bitext.bitext_files
    monkeypatch.setattr(bitext, "bitext_files",
                        lambda config, field: read.append(config.input_path) or
                        real(config, field))
    params = train_lib.build_params("cmlm_tf/mlm_tlm", ["mlm_tlm_tiny"])
    task = params.task
    mlm_tlm.mlm_tlm_dataset(task.validation_data, task.bitext_data, task.model.tokenizer,
                            field="task.validation_data")
    mlm_tlm.mlm_tlm_dataset(task.train_data, task.bitext_data, task.model.tokenizer)
    assert [path.rsplit("/", 1)[-1] for path in read] == ["bible_en_es_heldout.tsv",
                                                           "bible_en_es.tsv"]



def test_minilm_recipe_fine_tunes_the_import_on_the_bundled_verses(tmp_path, monkeypatch,
                                                                    minilm_hf_dir):
    """`minilm_bitext_verses` over the `warm_start.yaml` of an all-MiniLM-L6-v2 import, as
    the README stacks them: the import's weights and shape, the bundled verses for training,
    and one evaluation, at the end, on the held-out verses (in-batch and among all pairs).
    The training path itself (import, warm start, bitext steps) is
    tests/model_import/test_hf_bert.py's fine-tune of an imported stand-in."""
    monkeypatch.chdir(REPO_DIR)
    warm_start = hf_bert.convert(str(minilm_hf_dir), str(tmp_path / "all-MiniLM-L6-v2"))
    params = train_lib.build_params("cmlm_tf/bitext", [warm_start, "minilm_bitext_verses"])
    task, trainer = params.task, params.trainer
    assert task.init_checkpoint == str(tmp_path / "all-MiniLM-L6-v2" / "encoder")
    assert (task.model.encoder.hidden_size, task.model.encoder.num_layers,
            task.model.encoder.vocab_size) == (384, 6, 30522)
    heldout = "cmlm_tf/data/corpus/bible_en_es_heldout.tsv"
    assert task.train_data.input_path == "cmlm_tf/data/corpus/bible_en_es.tsv"
    assert task.validation_data.input_path == heldout
    assert list(task.dev_retrieval_files) == [heldout]
    assert trainer.validation_interval == trainer.train_steps
