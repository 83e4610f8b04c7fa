"""`python -m cmlm_tf.train` with `cmlm_tf/moco` in a subprocess: the NLI multitask, the
queues in the checkpoint, the export of the target side."""

import json
import subprocess
import sys

import numpy as np
import tensorflow as tf

from cmlm_tf import inference
from cmlm_tf.commands import export as export_cli
from tests.conftest import REPO_DIR, TINY_CMLM_OVERRIDES, subprocess_env


def _driver(model_dir, steps, extra=""):
    overrides = (f"{TINY_CMLM_OVERRIDES},trainer.train_steps={steps},task.moco.queue_size=20,"
                 f"task.train_data.seq_length=16,task.moco.shared_encoder=false{extra}")
    return subprocess.run(
        [sys.executable, "-m", "cmlm_tf.train", "--experiment=cmlm_tf/moco",
         "--config_file=configs/moco_tiny.yaml", "--mode=train", f"--model_dir={model_dir}",
         f"--params_override={overrides}"],
        cwd=REPO_DIR, capture_output=True, text=True, env=subprocess_env(), timeout=3600)


def _queue_ptr(model_dir):
    reader = tf.train.load_checkpoint(str(model_dir))
    names = [n for n in reader.get_variable_to_shape_map()
             if n.startswith("model/source_queue/queue_ptr")]
    assert len(names) == 1, names
    return int(reader.get_tensor(names[0]))


def test_driver_trains_and_exports_the_target_side(tmp_path):
    run_dir = tmp_path / "run"
    # With the NLI multitask on: each step also classifies a batch of NLI pairs.
    nli_file = tmp_path / "nli.tsv"
    nli_file.write_text("".join(f"verse {i}\tword {i}\t{i % 3}\n" for i in range(40)),
                        encoding="utf-8")
    result = _driver(run_dir, 6, f",task.nli_data.input_path={nli_file},"
                     "task.nli_data.global_batch_size=8,task.nli_data.seq_length=16")
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("contrastive_loss", "source_to_target_accuracy", "embedding_std",
                 "queue_fill", "nli_loss", "nli_accuracy"):
        assert name in result.stderr, name
    # The trainer's checkpoint carries the queues (6 steps of 8 keys into 20 slots) and both
    # query encoders at its root, where the exporter looks for them.
    assert _queue_ptr(run_dir) == 6 * 8 % 20
    names = tf.train.load_checkpoint(str(run_dir)).get_variable_to_shape_map()
    assert any(n.startswith("target_encoder/") for n in names)
    assert any(n.startswith("nli_head/") for n in names)

    export_dir = tmp_path / "target"
    assert export_cli.main(["--model_dir", str(run_dir), "--export_dir", str(export_dir),
                              "--encoder_key", "target_encoder"]) == 0
    meta = json.loads((export_dir / "cmlm_tf_export.json").read_text(encoding="utf-8"))
    assert meta["encoder_key"] == "target_encoder"
    vectors = inference.load(str(export_dir)).encode(["in the beginning", "luz"])
    assert vectors.shape == (2, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=-1), 1.0, rtol=1e-5)
