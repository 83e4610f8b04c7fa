r"""The training driver as a library, on Model Garden's `official.core` (task, registry,
trainer) and Orbit: `python -m cmlm_tf.train` is its command line, and experiments/,
benchmarks and tests call it directly.

- `build_params`: an experiment's registered config, then YAML recipes, then overrides.
- `prepare_vocabulary`: a SentencePiece model learned from the task's data when the config
  names none.
- `run`: a run directory locked, its config written, then `train_and_evaluate` with the
  distribution strategy of `runtime`; rerunning resumes from the last readable checkpoint.
"""

import os
import time
from typing import List, Optional

import tensorflow as tf
import tf_keras
from absl import logging
from official.common import distribute_utils
from official.core import exp_factory, task_factory, train_utils
from official.modeling import optimization, performance

from cmlm_tf import configs, distributed
from cmlm_tf.config_files import load_experiment_config
from cmlm_tf.driver import chunked_trainer, run_checkpoints, run_dir, runner
from cmlm_tf.files import disk, locks
from cmlm_tf.model_import import import_folder
from cmlm_tf.tasks import base, experiment_registry
from cmlm_tf.text import tokenization
from cmlm_tf.training import steps
from cmlm_tf.vocab import sentencepiece


def build_params(experiment: str, config_files: Optional[List[str]] = None,
                 params_override: str = "", tpu: str = ""):
    """The experiment's registered config, then YAML files, then overrides; strict. An
    import folder's `warm_start.yaml` is checked first (`import_folder.check`)."""
    experiment_registry.register()
    if experiment not in experiment_registry.EXPERIMENTS:
        raise ValueError(f"--experiment: unknown experiment {experiment!r} (registered: "
                         f"{', '.join(experiment_registry.EXPERIMENTS)})")
    for name in config_files or []:  # an import folder is whole before it is trained from
        if os.path.basename(name) == import_folder.WARM_START_FILE and os.path.isfile(name):
            import_folder.check(os.path.dirname(name))
    params = exp_factory.get_exp_config(experiment)
    params = load_experiment_config(config_files, params_override, base=params)
    if tpu:
        params.override({"runtime": {"tpu": tpu}}, is_strict=True)
    try:
        params.validate()
    except (KeyError, ValueError) as e:
        raise ValueError(f"invalid config: {str(e).splitlines()[0]}") from None
    configs.validate_run_config(params)
    params.lock()
    return params


def prepare_vocabulary(params, model_dir: str):
    """The run's SentencePiece model, learned before the config is written and locked.

    When `task.model.tokenizer.type` is sentencepiece, its `sp_model_file` is empty and the
    task says what text to learn from (`SentenceTask.sentencepiece_corpus`; BGT: both sides
    of its pairs), trains `MODEL_DIR/sp.model` with
    `cmlm_tf.vocab.sentencepiece.train_sentencepiece`
    unless an earlier start of the run wrote it, and returns params that name it, with
    `task.model.encoder.vocab_size` its piece count, so `params.yaml` records both (an
    existing `MODEL_DIR/sp.model` is named for any task). Otherwise returns `params`
    unchanged.
    """
    tokenizer = params.task.model.tokenizer
    if tokenizer.type != "sentencepiece" or tokenizer.sp_model_file:
        return params
    sp_model_file = os.path.join(os.path.abspath(model_dir), tokenization.SP_MODEL_FILE)
    if not tf.io.gfile.exists(sp_model_file):
        corpus = task_factory.get_task_cls(type(params.task)).sentencepiece_corpus(params.task)
        if corpus is None:
            return params
        sentences, max_pieces = corpus
        pieces = sentencepiece.train_sentencepiece(sentences, sp_model_file, max_pieces,
                                                   lower_case=tokenizer.lower_case)
        logging.info("Trained a SentencePiece model of %d pieces (asked for at most %d) on "
                     "the task's training text: %s", pieces, max_pieces, sp_model_file)
    params = params.replace(task=base.with_run_sentencepiece(params.task, model_dir))
    params.lock()
    return params


def check_learning_rate(params, start_step: int) -> None:
    """Stops a run that would train its remaining steps at learning rate 0.

    That happens when a finished run is resumed with a larger `trainer.train_steps` while
    its schedule's decay (set explicitly) ended earlier, or when a short run's warm-up lasts
    as long as its decay. The error ends with the `--params_override` that fixes it.
    """
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
        # A linear warm-up ramps towards the decayed rate at its last step: 0 here. A tenth
        # of the decay is the tiny recipes' proportion (configs/labse_tiny.sh).
        warmup_field = f"trainer.optimizer_config.warmup.{warmup.type}.warmup_steps"
        raise ValueError(
            f"the learning rate is 0 for the whole run: the warm-up ({warmup_field} = "
            f"{warmup_steps}) is not shorter than the decay ({field}.decay_steps = {decay}); "
            f"shorten the warm-up (with your other overrides): "
            f"--params_override={warmup_field}={max(1, decay // 10)}")
    if decay is None:
        raise ValueError(
            f"the learning rate is 0 from step {start_step} on, so steps {start_step}-"
            f"{params.trainer.train_steps} would train nothing: set a positive {field}")
    raise ValueError(
        f"the learning rate is 0 from step {start_step} on ({field}.decay_steps is {decay}), "
        f"so steps {start_step}-{params.trainer.train_steps} would train nothing: make the "
        f"decay follow trainer.train_steps (with your other overrides): "
        f"--params_override={field}.decay_steps=0")


def run(params, model_dir: str, mode: str = "train", strategy=None):
    """Trains and/or evaluates; returns (model, eval logs)."""
    if mode not in run_dir.MODES:
        raise ValueError(f"--mode must be one of {run_dir.MODES}, got {mode!r}")
    check_evaluable(params, model_dir, mode)
    started = time.perf_counter()
    training = "train" in mode
    lock = lock_run_dir(model_dir, training=training)
    log = run_dir.log_file(os.path.join(model_dir, run_dir.LOG_FILE) if training and
                       distributed.is_chief() and locks.is_local(model_dir) else None)
    log.__enter__()
    try:
        latest = latest_checkpoint(model_dir)
        start_step = run_checkpoints.checkpoint_step(latest)
        if training and start_step >= params.trainer.train_steps and (
                mode == "train" or run_dir.evaluated_step(model_dir) == start_step):
            # Nothing to train or evaluate: said in one line, without building the task.
            logging.info("already finished: step %d of trainer.train_steps=%d in %s; latest "
                         "checkpoint %s (raise trainer.train_steps to train further)",
                         start_step, params.trainer.train_steps, model_dir,
                         os.path.basename(latest))
            return None, {}
        params = prepare_vocabulary(params, model_dir)
        task, trainer, result = train_and_evaluate(params, model_dir, mode, strategy,
                                                   start_step=start_step)
        if training:
            report_finished(model_dir, task, trainer, started)
        return result
    finally:
        log.__exit__(None, None, None)
        lock.release()


def check_evaluable(params, model_dir: str, mode: str) -> None:
    """Refuses an evaluation of weights no one trained: `--mode=eval` on a `--model_dir`
    without a checkpoint, unless `task.init_checkpoint` names the weights, and on one that
    does not exist (the evaluation would create it). One line naming the folder. (A
    `train_and_eval` trains first: `trainer.train_steps` is at least 1.)"""
    if mode != "eval":
        return
    if locks.is_local(model_dir) and not os.path.isdir(model_dir):
        raise ValueError(f"--model_dir {model_dir}: not found; --mode=eval evaluates a "
                         "training run's checkpoints and never creates its folder")
    if params.task.init_checkpoint or run_checkpoints.latest_checkpoint(model_dir):
        return
    raise ValueError(f"--model_dir {model_dir}: no checkpoint to evaluate, so --mode=eval "
                     "would report the metrics of untrained weights; train first "
                     "(--mode=train), or name the weights in task.init_checkpoint")


def lock_run_dir(model_dir: str, *, training: bool):
    """The run directory's lock, held when this process trains as the chief (which creates
    the directory first)."""
    lock = run_dir.RunLock(model_dir)
    if training and distributed.is_chief():
        try:
            tf.io.gfile.makedirs(model_dir)
        except tf.errors.OpError as e:
            raise ValueError(f"--model_dir {model_dir}: cannot create it "
                             f"({e.message.splitlines()[0]})") from None
        if not os.access(model_dir, os.W_OK) and locks.is_local(model_dir):
            raise ValueError(f"--model_dir {model_dir}: not writable")
        lock.acquire()
    return lock


def latest_checkpoint(model_dir: str):
    """The run's latest checkpoint (None before the first); the chief first removes the
    temporary checkpoints of a killed save and recovers the latest."""
    if distributed.is_chief():
        run_checkpoints.remove_temp_checkpoints(model_dir)
        return run_checkpoints.recover_latest_checkpoint(model_dir)
    return run_checkpoints.latest_checkpoint(model_dir)


def train_and_evaluate(params, model_dir: str, mode: str, strategy, *, start_step: int):
    """Builds the strategy, task and trainer, and runs them from `start_step`; returns
    (task, trainer, the runner's result)."""
    training = "train" in mode
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
        # The training input continues where the restored checkpoint left it; a finished
        # run (no step left to train) reads none of it, so it skips nothing.
        resume_step = start_step if training and \
            start_step < params.trainer.train_steps else 0
        with strategy.scope():
            task = task_factory.get_task(params.task, logging_dir=model_dir,
                                         resume_step=resume_step)
            if runtime.enable_xla:
                steps.compile_steps(task, runtime)
            trainer = train_utils.create_trainer(
                params, task, train=training, evaluate="eval" in mode,
                checkpoint_exporter=None, trainer_cls=chunked_trainer.ChunkedTrainer)
        if training:
            # After the data (a bad input file is the first thing to report), before
            # params.yaml: a refused run leaves the run directory as it was.
            check_learning_rate(params, start_step)
            if "eval" in mode:  # an evaluation that cannot run is refused before training
                chunked_trainer.check_evaluation_input(trainer)
            run_dir.write_params(params, model_dir)
        # Summaries and the checkpoint state: a full disk names the run folder
        # (checkpoint saves name their own prefix).
        with disk.reporting_disk_full(model_dir), runner.orbit_logs_once():
            result = runner.Runner(
                distribution_strategy=strategy, task=task, mode=mode, params=params,
                model_dir=model_dir, trainer=trainer).run()
    finally:
        tf_keras.mixed_precision.set_global_policy(previous_policy)
    return task, trainer, result


def report_finished(model_dir: str, task, trainer, started: float) -> None:
    """Writes the malformed-record report of the run and logs its `finished:` line."""
    with disk.reporting_disk_full(model_dir):
        runner.report_malformed_records(model_dir, int(trainer.global_step.numpy()),
                                        task.malformed_reports)
    logging.info("finished: step %d in %s (%.0f s); latest checkpoint %s",
                 int(trainer.global_step.numpy()), model_dir,
                 time.perf_counter() - started,
                 os.path.basename(run_checkpoints.latest_checkpoint(model_dir) or "none"))
