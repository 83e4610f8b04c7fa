r"""Training driver on Model Garden's `official.core` (Task, registry, train_lib, Orbit).

    python -m cmlm_tf.train --experiment=cmlm_tf/cmlm --config_file=configs/cmlm_tiny.yaml \
        --mode=train --model_dir=runs/cmlm_tiny [--params_override=trainer.train_steps=40] \
        [--tpu=grpc://...]

Rerunning the same command resumes from the last checkpoint in `--model_dir` (global step and
optimizer state). `runtime.distribution_strategy` is `one_device`, `mirrored` (with
`runtime.num_gpus`), `multi_worker_mirrored` (TF_CONFIG) or `tpu`. Before the run starts,
a SentencePiece tokenizer without a model file gets one learned from the task's data
(`prepare_vocabulary`).
"""

import os
import sys
import time
from typing import List, Optional

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def build_params(experiment: str, config_files: Optional[List[str]] = None,
                 params_override: str = "", tpu: str = ""):
    """The experiment's registered config, then YAML files, then overrides; strict."""
    from official.core import exp_factory

    from cmlm_tf import configs, experiments  # noqa: F401  (registers experiments)

    try:
        params = exp_factory.get_exp_config(experiment)
    except KeyError:
        raise ValueError(f"--experiment: unknown experiment {experiment!r}") from None
    params = configs.load_experiment_config(config_files, params_override, base=params)
    if tpu:
        params.override({"runtime": {"tpu": tpu}}, is_strict=True)
    try:
        params.validate()
    except (KeyError, ValueError) as e:
        raise ValueError(f"invalid config: {str(e).splitlines()[0]}") from None
    params.lock()
    return params


def prepare_vocabulary(params, model_dir: str):
    """The run's SentencePiece model, learned before the config is written and locked.

    When `task.model.tokenizer.type` is sentencepiece, its `sp_model_file` is empty and the
    task says what text to learn from (`SentenceTask.sentencepiece_corpus`; BGT: both sides
    of its pairs), trains `MODEL_DIR/sp.model` with `cmlm_tf.build_vocab.train_sentencepiece`
    unless an earlier start of the run wrote it, and returns params that name it, with
    `task.model.encoder.vocab_size` its piece count, so `params.yaml` records both (an
    existing `MODEL_DIR/sp.model` is named for any task). Otherwise returns `params`
    unchanged.
    """
    import tensorflow as tf
    from absl import logging
    from official.core import task_factory

    from cmlm_tf import build_vocab, tokenization
    from cmlm_tf.tasks import base

    tokenizer = params.task.model.tokenizer
    if tokenizer.type != "sentencepiece" or tokenizer.sp_model_file:
        return params
    sp_model_file = os.path.join(os.path.abspath(model_dir), tokenization.SP_MODEL_FILE)
    if not tf.io.gfile.exists(sp_model_file):
        corpus = task_factory.get_task_cls(type(params.task)).sentencepiece_corpus(params.task)
        if corpus is None:
            return params
        sentences, max_pieces = corpus
        pieces = build_vocab.train_sentencepiece(sentences, sp_model_file, max_pieces,
                                                 lower_case=tokenizer.lower_case)
        logging.info("Trained a SentencePiece model of %d pieces (asked for at most %d) on "
                     "the task's training text: %s", pieces, max_pieces, sp_model_file)
    params = params.replace(task=base.with_run_sentencepiece(params.task, model_dir))
    params.lock()
    return params


def _trainer_class():
    from official.core import base_trainer

    class ThroughputTrainer(base_trainer.Trainer):
        """Adds `examples_per_second` to the logged and summarised training outputs."""

        def train_loop_begin(self):
            self._loop_start = (time.perf_counter(), int(self.global_step.numpy()))
            super().train_loop_begin()

        def train_loop_end(self):
            logs = super().train_loop_end()
            start_time, start_step = self._loop_start
            steps = int(self.global_step.numpy()) - start_step
            elapsed = max(time.perf_counter() - start_time, 1e-9)
            batch = self.config.task.train_data.global_batch_size
            logs["examples_per_second"] = steps * batch / elapsed
            return logs

    return ThroughputTrainer


def run(params, model_dir: str, mode: str = "train", strategy=None):
    """Trains and/or evaluates; returns (model, eval logs)."""
    import tensorflow as tf
    import tf_keras
    from official.common import distribute_utils
    from official.core import task_factory, train_lib, train_utils
    from official.modeling import performance

    params = prepare_vocabulary(params, model_dir)
    if "train" in mode:
        train_utils.serialize_config(params, model_dir)
    runtime = params.runtime
    if strategy is None:
        strategy = distribute_utils.get_distribution_strategy(
            distribution_strategy=runtime.distribution_strategy,
            all_reduce_alg=runtime.all_reduce_alg, num_gpus=runtime.num_gpus,
            tpu_address=runtime.tpu)
    # `runtime.mixed_precision_dtype: bfloat16` (CPU with AMX, TPU, GPU) or `float16` (GPU;
    # create_trainer then wraps the optimizer in loss scaling). The tasks cast logits and
    # losses to float32. The Keras policy is process-global: restored when training ends.
    previous_policy = tf_keras.mixed_precision.global_policy()
    if runtime.mixed_precision_dtype:
        performance.set_mixed_precision_policy(runtime.mixed_precision_dtype)
    try:
        with strategy.scope():
            task = task_factory.get_task(params.task, logging_dir=model_dir)
            trainer = train_utils.create_trainer(
                params, task, train="train" in mode, evaluate="eval" in mode,
                checkpoint_exporter=None, trainer_cls=_trainer_class())
        tf.io.gfile.makedirs(model_dir)
        return train_lib.run_experiment(
            distribution_strategy=strategy, task=task, mode=mode, params=params,
            model_dir=model_dir, trainer=trainer)
    finally:
        tf_keras.mixed_precision.set_global_policy(previous_policy)


def _one_line(error: Exception) -> str:
    """The informative line of an error that gin or autograph may have wrapped."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()
             and not line.strip().startswith("In call to configurable")]
    if not lines:
        return type(error).__name__
    if lines[0].startswith("in user code:"):
        return lines[-1][:500]
    return lines[0][:500]


def main(argv=None) -> int:
    from absl import app, flags, logging
    from official.common import flags as tfm_flags

    tfm_flags.define_flags()
    flags.mark_flags_as_required(["experiment", "mode", "model_dir"])
    flags_obj = flags.FLAGS

    def _main(_):
        logging.set_verbosity(logging.INFO)
        try:
            params = build_params(flags_obj.experiment, flags_obj.config_file,
                                  flags_obj.params_override or "", flags_obj.tpu or "")
        except (ValueError, FileNotFoundError) as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        try:
            run(params, flags_obj.model_dir, flags_obj.mode)
        except (ValueError, FileNotFoundError, OSError, NotImplementedError) as e:
            if os.environ.get("CMLM_TF_DEBUG"):
                raise
            print(f"error: {_one_line(e)}", file=sys.stderr)
            sys.exit(2)

    app.run(_main, argv=argv if argv is not None else sys.argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
