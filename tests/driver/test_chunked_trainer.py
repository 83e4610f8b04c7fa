"""What a start (or a restart after Ctrl-C) spends before its first training step: the
train loop is traced once, and no model code goes through AutoGraph."""

import json
import os

import tf_keras
from tensorflow.python.autograph.impl import api as autograph_api

from cmlm_tf.driver import chunked_trainer, train_lib
from tests.conftest import REPO_DIR

# Modules whose functions have no Python control flow on tensors: converting them (and every
# Keras layer they call) cost seconds per trace.
_NEVER_CONVERTED = ("cmlm_tf.modeling", "cmlm_tf.training", "cmlm_tf.losses",
                    "cmlm_tf.text.tokenization", "official.nlp.modeling", "tf_keras",
                    "tensorflow_text")


def test_two_steps_trace_the_loop_once_without_converting_the_model(tmp_path, monkeypatch):
    overrides = {
        "task": {"model": {"encoder": {"hidden_size": 32, "num_layers": 1,
                                       "num_attention_heads": 2, "intermediate_size": 64}},
                 "train_data": {"input_path": os.path.relpath(
                     REPO_DIR / "cmlm_tf/data/corpus/bible_en_es.tsv"),
                                "global_batch_size": 8, "seq_length": 16}},
        "trainer": {"train_steps": 2, "steps_per_loop": 1, "summary_interval": 1,
                    "checkpoint_interval": 2, "validation_interval": 2,
                    "optimizer_config": {"warmup": {"linear": {"warmup_steps": 1}}}}}
    params = train_lib.build_params("cmlm_tf/bitext", [str(REPO_DIR / "configs/bitext_tiny.yaml")],
                                    json.dumps(overrides))
    converted = []
    convert = autograph_api._convert_actual

    def recording(entity, program_ctx):
        module = getattr(entity, "__module__", None) or ""
        converted.append(f"{module}:{getattr(entity, '__qualname__', '')}")
        return convert(entity, program_ctx)

    monkeypatch.setattr(autograph_api, "_convert_actual", recording)
    loops = []
    create = chunked_trainer.ChunkedTrainer.create_train_loop_fn

    def keep(self):
        loops.append(create(self))
        return loops[-1]

    monkeypatch.setattr(chunked_trainer.ChunkedTrainer, "create_train_loop_fn", keep)
    tf_keras.utils.set_random_seed(0)
    train_lib.run(params, str(tmp_path / "run"), mode="train")

    (loop,) = loops
    # A second trace came when the first created the optimizer's slots.
    assert loop.experimental_get_tracing_count() == 1
    model_code = sorted({name for name in converted if name.startswith(_NEVER_CONVERTED)})
    assert not model_code, f"AutoGraph converted functions of {model_code}"
    assert converted, "the recording saw no conversion: the hook is not where it was"
