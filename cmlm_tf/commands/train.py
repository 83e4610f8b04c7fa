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
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

def build_parser() -> argparse.ArgumentParser:
    from cmlm_tf import packaged_recipes
    from cmlm_tf.commands import common
    from cmlm_tf.driver import run_dir
    from cmlm_tf.tasks import experiment_registry

    listing = "\n".join(f"  {name:22s} {what}"
                        for name, what in experiment_registry.EXPERIMENTS.items())
    parser = common.ArgumentParser(
        prog="python -m cmlm_tf.train",
        description="Train or evaluate a cmlm_tf experiment (Model Garden driver).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"experiments:\n{listing}\n\npackaged recipes (--config_file NAME): "
               f"{', '.join(packaged_recipes.recipe_names())}\n\n"
               "Rerunning the same command resumes from the last readable checkpoint.")
    parser.add_argument("--experiment", required=True, metavar="NAME",
                        help="registered experiment (listed below)")
    parser.add_argument("--mode", required=True, choices=run_dir.MODES)
    parser.add_argument("--model_dir", required=True,
                        help="checkpoints, params.yaml and TensorBoard summaries go here")
    parser.add_argument("--config_file", action="append", default=[],
                        help="packaged recipe name or YAML file; repeat to stack them "
                             "(applied in order)")
    parser.add_argument("--params_override", default="",
                        help="a.b=1,c.d=x (applied last), a YAML mapping, or a YAML file")
    parser.add_argument("--tpu", default="", help="Cloud TPU name or grpc:// address")
    return parser


def main(argv=None) -> int:
    from cmlm_tf.commands import common

    parser = build_parser()
    args = parser.parse_args(argv)

    def body():
        from cmlm_tf import did_you_mean, packaged_recipes
        from cmlm_tf.tasks import experiment_registry

        # Typos stop here, before TensorFlow is imported (under a second).
        if args.experiment not in experiment_registry.EXPERIMENTS:
            # Compared without the shared `cmlm_tf/`, which would make every name look close.
            short = {name.rpartition("/")[2]: name for name in experiment_registry.EXPERIMENTS}
            close = [short[name] for name in
                     did_you_mean.closest(args.experiment.rpartition("/")[2], list(short))]
            raise common.UsageError(
                f"--experiment {args.experiment}: unknown experiment"
                + (f"; did you mean {' or '.join(close)}?" if close else "")
                + f" (registered: {', '.join(experiment_registry.EXPERIMENTS)})")
        for name in args.config_file:
            packaged_recipes.check_recipe(name)
        if args.mode == "eval":  # an input here, with a did-you-mean before TensorFlow
            common.check_input_paths(parser, {"--model_dir": args.model_dir})
        common.console_logging()
        from cmlm_tf.driver import train_lib  # TensorFlow loads here, after the checks

        params = train_lib.build_params(args.experiment, args.config_file,
                                        args.params_override, args.tpu)
        train_lib.run(params, args.model_dir, args.mode)

    return common.run_main(body)


def console_main() -> None:
    """`python -m cmlm_tf.train` and `cmlm-tf-train`: `main`, then the process ends as soon
    as its output is flushed, without Python's teardown. By then every file is written
    and closed (checkpoints, params.yaml, summaries: Orbit flushes its writers), the run
    lock is released, and what is left is freeing memory: the training input's tf.data
    threads (`release_in_background`) and hundreds of thousands of Python objects, which
    took from seconds to a minute on 2 busy cores, also after Ctrl-C."""
    import logging

    from absl import logging as absl_logging

    code = main()
    absl_logging.flush()
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    console_main()
