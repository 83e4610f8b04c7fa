"""MLM + TLM pre-training: the recipes, the baseline. (The staged script:
tests/driver/test_train_mlm_tlm.py.)"""



import importlib.util

from official.core import exp_factory

from cmlm_tf import config_files
from cmlm_tf.data import mlm_tlm
from cmlm_tf.driver import train_lib
from tests.conftest import REPO_DIR


def test_recipes_load():
    recipe = str(REPO_DIR / "configs/labse_pretrain_base.yaml")
    base = train_lib.build_params("cmlm_tf/mlm_tlm", [recipe])
    data = base.task.train_data
    assert (data.global_batch_size, data.seq_length, data.mask_ratio,
            data.max_predictions_per_seq) == (8192, 512, 0.2, 80)
    assert base.task.model.tokenizer.lower_case is False
    tiny = train_lib.build_params("cmlm_tf/mlm_tlm", [str(REPO_DIR / "configs/mlm_tlm_tiny.yaml")])
    assert tiny.task.bitext_data.input_path.endswith("bible_en_es.tsv")


def test_frequency_baseline_counts_masked_labels_per_stream(capsys):
    spec = importlib.util.spec_from_file_location(
        "mlm_frequency_baseline", REPO_DIR / "benchmarks/mlm_frequency_baseline.py")
    baseline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(baseline)
    recipe = [str(REPO_DIR / "configs/mlm_tlm_tiny.yaml")]
    overrides = "task.train_data.global_batch_size=8,task.train_data.tlm_fraction={}"
    assert baseline.main(["--config_file", *recipe, "--batches", "2",
                          "--params_override", overrides.format(0.0)]) == 0
    out = capsys.readouterr().out
    assert "tlm: no masked tokens" in out
    mlm_line = next(line for line in out.splitlines() if line.startswith("mlm:"))
    share = float(mlm_line.rsplit("share ", 1)[1])
    assert 0.0 < share < 0.5
    # Counts are taken over masked positions with weight 1 only, split by stream.
    params = config_files.load_experiment_config(recipe, overrides.format(1.0),
                                        base=exp_factory.get_exp_config("cmlm_tf/mlm_tlm"))
    counts = baseline.frequency_baseline(params, 2)
    assert not counts["mlm"]
    dataset = mlm_tlm.mlm_tlm_dataset(params.task.train_data, params.task.bitext_data,
                                      params.task.model.tokenizer)
    weights = sum(float(b["masked_lm_weights"].numpy().sum()) for b in dataset.take(2))
    assert sum(counts["tlm"].values()) == weights > 0
