r"""Training driver on Model Garden's `official.core` (Task, registry, trainer) and Orbit.

    python -m cmlm_tf.train --experiment=cmlm_tf/cmlm --config_file=cmlm_tiny \
        --mode=train --model_dir=runs/cmlm_tiny [--params_override=trainer.train_steps=40] \
        [--tpu=grpc://...]

`--config_file` takes a packaged recipe's name (`cmlm_tiny`) or a YAML file, repeatable;
`--params_override` then applies `a.b=1,c=2`. Rerunning the same command resumes from the
last readable checkpoint in `--model_dir` (global step, optimizer state, and the input
where it stopped); raising `trainer.train_steps` continues a finished run. One trainer at a
time may use a `--model_dir` (a lock file). `runtime.distribution_strategy` is
`one_device`, `mirrored` (with `runtime.num_gpus`), `multi_worker_mirrored` (TF_CONFIG) or
`tpu`. Before the run starts, a SentencePiece tokenizer without a model file gets one
learned from the task's data (`prepare_vocabulary`).
"""

import argparse
import gc
import os
import sys
import time
from typing import List, Optional

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

MODES = ("train", "eval", "train_and_eval")


def build_parser() -> argparse.ArgumentParser:
    from cmlm_tf import configs, experiments

    listing = "\n".join(f"  {name:22s} {what}" for name, what in experiments.EXPERIMENTS.items())
    parser = argparse.ArgumentParser(
        prog="python -m cmlm_tf.train",
        description="Train or evaluate a cmlm_tf experiment (Model Garden driver).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"experiments:\n{listing}\n\npackaged recipes (--config_file NAME): "
               f"{', '.join(configs.recipe_names())}\n\n"
               "Rerunning the same command resumes from the last readable checkpoint.")
    parser.add_argument("--experiment", required=True, metavar="NAME",
                        help="registered experiment (listed below)")
    parser.add_argument("--mode", required=True, choices=MODES)
    parser.add_argument("--model_dir", required=True,
                        help="checkpoints, params.yaml and TensorBoard summaries go here")
    parser.add_argument("--config_file", action="append", default=[],
                        help="packaged recipe name or YAML file; repeat to stack them "
                             "(applied in order)")
    parser.add_argument("--params_override", default="",
                        help="a.b=1,c.d=x (applied last), a YAML mapping, or a YAML file")
    parser.add_argument("--tpu", default="", help="Cloud TPU name or grpc:// address")
    return parser


def build_params(experiment: str, config_files: Optional[List[str]] = None,
                 params_override: str = "", tpu: str = ""):
    """The experiment's registered config, then YAML files, then overrides; strict."""
    from official.core import exp_factory

    from cmlm_tf import configs, experiments

    experiments.register()
    if experiment not in experiments.EXPERIMENTS:
        raise ValueError(f"--experiment: unknown experiment {experiment!r} (registered: "
                         f"{', '.join(experiments.EXPERIMENTS)})")
    params = exp_factory.get_exp_config(experiment)
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


def check_learning_rate(params, start_step: int) -> None:
    """Stops a run that would train its remaining steps at learning rate 0.

    That happens when a finished run is resumed with a larger `trainer.train_steps` while
    its schedule's decay (set explicitly) ended earlier.
    """
    from official.modeling import optimization

    if start_step >= params.trainer.train_steps:
        return
    schedule = optimization.OptimizerFactory(params.trainer.optimizer_config)\
        .build_learning_rate()
    # Not only the first step: a linear warm-up starts at 0.
    probes = {start_step, start_step + 1, (start_step + params.trainer.train_steps) // 2}
    if max(float(schedule(step)) for step in probes) > 0.0:
        return
    learning_rate = params.trainer.optimizer_config.learning_rate
    field = f"trainer.optimizer_config.learning_rate.{learning_rate.type}"
    decay = getattr(learning_rate.get(), "decay_steps", None)
    warmup = params.trainer.optimizer_config.warmup
    warmup_steps = getattr(warmup.get(), "warmup_steps", None) if warmup.type else None
    if decay and warmup_steps and warmup_steps >= decay:
        # A linear warm-up ramps towards the decayed rate at its last step: 0 here.
        raise ValueError(
            f"the learning rate is 0 for the whole run: the warm-up "
            f"(trainer.optimizer_config.warmup.{warmup.type}.warmup_steps = {warmup_steps}) "
            f"is not shorter than the decay ({field}.decay_steps = {decay}); shorten the "
            "warm-up or lengthen the run")
    detail = f" ({field}.decay_steps is {decay})" if decay is not None else ""
    raise ValueError(
        f"the learning rate is 0 from step {start_step} on{detail}, so steps {start_step}-"
        f"{params.trainer.train_steps} would train nothing: raise {field}.decay_steps to "
        f"{params.trainer.train_steps}, or set it to 0 to follow trainer.train_steps")


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


def _runner_class():
    import tensorflow as tf
    from absl import logging
    from official.core import train_lib

    class CheckpointManager(tf.train.CheckpointManager):
        """Restores with a one-line log; values a run does not use now (a finished run's
        optimizer slots, another stage's heads) are not reported as failures."""

        def restore_or_initialize(self):
            latest = self._latest_checkpoint
            if latest is None:
                logging.info("no checkpoint in %s: starting at step 0", self.directory)
                return super().restore_or_initialize()
            self._checkpoint.restore(latest).expect_partial()
            if self._checkpoint_interval is not None:
                self._last_checkpoint_step = int(self._step_counter.numpy())
            logging.info("restored step %d from %s", int(self._step_counter.numpy()),
                         os.path.basename(latest))
            return latest

    class Runner(train_lib.OrbitExperimentRunner):
        """Model Garden's runner, with the checkpoint manager above and without counting
        FLOPs after training (a profiler pass that can take minutes on large models)."""

        def _maybe_build_checkpoint_manager(self):
            manager = super()._maybe_build_checkpoint_manager()
            if manager is None:
                return None
            return CheckpointManager(
                self.trainer.checkpoint, directory=manager.directory,
                max_to_keep=manager._max_to_keep, step_counter=self.trainer.global_step,
                checkpoint_interval=self.params.trainer.checkpoint_interval,
                init_fn=self.trainer.initialize)

        def run(self):
            trainer_params = self.params.trainer
            with self.strategy.scope():
                if self._mode == "train":
                    self.controller.train(steps=trainer_params.train_steps)
                elif self._mode == "train_and_eval":
                    self.controller.train_and_evaluate(
                        train_steps=trainer_params.train_steps,
                        eval_steps=trainer_params.validation_steps,
                        eval_interval=trainer_params.validation_interval)
                elif self._mode == "eval":
                    return self.trainer.model, self.controller.evaluate(
                        steps=trainer_params.validation_steps)
                else:
                    raise ValueError(f"--mode must be one of {MODES}, got {self._mode!r}")
                self._close_train_input()
            return self.trainer.model, {}

        def _close_train_input(self):
            """Releases the training input now, saying so: tf.data's background threads
            finish their work in progress first, which took 20-30 s of the tiny recipe on
            2 cores and otherwise passed in silence before the process exited."""
            if getattr(self.trainer, "_train_iter", None) is None:
                return
            started = time.perf_counter()
            logging.info("closing the training input pipeline (tf.data finishes the "
                         "batches in progress)")
            self.trainer._train_iter = None
            gc.collect()
            logging.info("closed the training input pipeline in %.0f s",
                         time.perf_counter() - started)

    return Runner


def _chief() -> bool:
    """Whether this process is the chief of a multi-worker run (or the only worker)."""
    import json

    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task") or {}
    if not task:
        return True
    if task.get("type") == "chief":
        return True
    has_chief = "chief" in (config.get("cluster") or {})
    return task.get("type") == "worker" and int(task.get("index", 0)) == 0 and not has_chief


def _log_once():
    """Orbit logs and prints every block of metrics, as NumPy scalars: log it once, as plain
    numbers."""
    from absl import logging

    try:
        from orbit import controller
    except ImportError:
        return
    if getattr(controller, "_cmlm_tf_quiet", False):
        return

    def format_output(output, indent=4):
        if not isinstance(output, dict):
            return str(output)
        return " ".join(f"{key} {_plain(value)}" for key, value in sorted(output.items()))

    controller._log = logging.info
    controller._format_output = format_output
    controller._cmlm_tf_quiet = True


def _plain(value) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{number:.6g}"


def report_malformed_records(model_dir: str, step: int) -> None:
    """Logs how many malformed records the input pipelines skipped and writes each count
    as a `input/malformed_records/<field>` summary (TensorBoard, under `model_dir/train`)."""
    import tensorflow as tf

    from cmlm_tf.data import records

    totals = records.log_totals()
    if not totals or not _chief():
        return
    with tf.summary.create_file_writer(os.path.join(model_dir, "train")).as_default():
        for _, field, count in totals:
            tf.summary.scalar(f"input/malformed_records/{field}", count, step=step)


def run(params, model_dir: str, mode: str = "train", strategy=None):
    """Trains and/or evaluates; returns (model, eval logs)."""
    import tensorflow as tf
    import tf_keras
    from absl import logging
    from official.common import distribute_utils
    from official.core import task_factory, train_utils
    from official.modeling import performance

    from cmlm_tf import run_dir
    from cmlm_tf.data import pipeline

    if mode not in MODES:
        raise ValueError(f"--mode must be one of {MODES}, got {mode!r}")
    _log_once()
    started = time.perf_counter()
    training = "train" in mode
    lock = run_dir.RunLock(model_dir)
    if training and _chief():
        try:
            tf.io.gfile.makedirs(model_dir)
        except tf.errors.OpError as e:
            raise ValueError(f"--model_dir {model_dir}: cannot create it "
                             f"({e.message.splitlines()[0]})") from None
        if not os.access(model_dir, os.W_OK) and run_dir.is_local(model_dir):
            raise ValueError(f"--model_dir {model_dir}: not writable")
        lock.acquire()
    try:
        if _chief():
            run_dir.remove_temp_checkpoints(model_dir)
            latest = run_dir.recover_latest_checkpoint(model_dir)
        else:
            latest = tf.train.latest_checkpoint(model_dir)
        start_step = run_dir.checkpoint_step(latest)
        params = prepare_vocabulary(params, model_dir)
        runtime = params.runtime
        if strategy is None:
            strategy = distribute_utils.get_distribution_strategy(
                distribution_strategy=runtime.distribution_strategy,
                all_reduce_alg=runtime.all_reduce_alg, num_gpus=runtime.num_gpus,
                tpu_address=runtime.tpu)
        # `runtime.mixed_precision_dtype: bfloat16` (CPU with AMX, TPU, GPU) or `float16`
        # (GPU; create_trainer then wraps the optimizer in loss scaling). The tasks cast
        # logits and losses to float32. The Keras policy is process-global: restored when
        # training ends.
        previous_policy = tf_keras.mixed_precision.global_policy()
        if runtime.mixed_precision_dtype:
            performance.set_mixed_precision_policy(runtime.mixed_precision_dtype)
        try:
            # The training input continues where the restored checkpoint left it.
            with strategy.scope(), pipeline.resuming_at(start_step if training else 0):
                task = task_factory.get_task(params.task, logging_dir=model_dir)
                trainer = train_utils.create_trainer(
                    params, task, train=training, evaluate="eval" in mode,
                    checkpoint_exporter=None, trainer_cls=_trainer_class())
            if training:
                # After the data (a bad input file is the first thing to report), before
                # params.yaml: a refused run leaves the run directory as it was.
                check_learning_rate(params, start_step)
                train_utils.serialize_config(params, model_dir)
            result = _runner_class()(
                distribution_strategy=strategy, task=task, mode=mode, params=params,
                model_dir=model_dir, trainer=trainer).run()
        finally:
            tf_keras.mixed_precision.set_global_policy(previous_policy)
        if training:
            report_malformed_records(model_dir, int(trainer.global_step.numpy()))
            logging.info("finished: step %d in %s (%.0f s); latest checkpoint %s",
                         int(trainer.global_step.numpy()), model_dir,
                         time.perf_counter() - started,
                         os.path.basename(tf.train.latest_checkpoint(model_dir) or "none"))
        return result
    finally:
        lock.release()


def main(argv=None) -> int:
    from cmlm_tf import cli

    cli.quiet_tensorflow_logs()
    args = build_parser().parse_args(argv)

    def body():
        from cmlm_tf import experiments

        if args.experiment not in experiments.EXPERIMENTS:
            raise cli.UsageError(f"--experiment {args.experiment}: unknown experiment "
                                 f"(registered: {', '.join(experiments.EXPERIMENTS)})")
        from absl import flags, logging

        flags.FLAGS.mark_as_parsed()  # absl logging without absl.app: no flags of its own
        logging.use_absl_handler()
        logging.set_verbosity(logging.INFO)
        params = build_params(args.experiment, args.config_file, args.params_override,
                              args.tpu)
        run(params, args.model_dir, args.mode)

    return cli.run_main(body)


if __name__ == "__main__":
    sys.exit(main())
