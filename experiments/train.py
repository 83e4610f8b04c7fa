r"""cmlm_tf's training driver with what an experiment fixes before TensorFlow starts.

    python -m experiments.train --experiment=cmlm_tf/bitext --config_file=A.yaml \
        [--config_file=B.yaml] --model_dir=DIR [--seed 1] [--cpu_replicas 2]
    python -m experiments.train --experiment=cmlm_tf/bitext --config_file=A.yaml \
        --write_init=DIR [--seed 1]

- `--seed`: `tf_keras.utils.set_random_seed` before anything is built, so the heads a task
  creates, dropout and the data order (`task.train_data.seed` is set by the recipe) repeat.
- `--cpu_replicas N`: splits the CPU into N logical devices and trains under a
  `MirroredStrategy` over them (N replicas on one machine, as the tests do), which
  `cmlm_tf.train`'s `runtime.distribution_strategy` cannot express (`mirrored` with
  `num_gpus: 0` is one replica). Logical devices must exist before TensorFlow initialises.
- `--write_init DIR`: writes a randomly initialised `SentenceEncoder` of the experiment's
  `task.model.encoder` to `DIR/encoder` (`tf.train.Checkpoint(encoder=...)`, the layout of
  `cmlm_tf.convert_hf_bert`) and the config to `DIR/params.yaml`, to warm-start several arms
  from the same initialisation (and to export it: `--checkpoint DIR/encoder`).

Training resumes from the last checkpoint in `--model_dir`, as the driver does.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.train",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--config_file", action="append", default=[])
    parser.add_argument("--params_override", default="")
    parser.add_argument("--model_dir", help="the run (train mode)")
    parser.add_argument("--mode", default="train")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cpu_replicas", type=int, default=1)
    parser.add_argument("--write_init", help="write a random encoder checkpoint here instead")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if not args.write_init and not args.model_dir:
        print("error: give --model_dir (train) or --write_init", file=sys.stderr)
        return 2
    import tensorflow as tf

    if args.cpu_replicas > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.cpu_replicas)
    import tf_keras
    from absl import logging
    from official.core import train_utils

    from cmlm_tf.driver import train_lib
    from cmlm_tf.modeling import sentence_encoder

    logging.set_verbosity(logging.INFO)
    params = train_lib.build_params(args.experiment, args.config_file, args.params_override)
    tf_keras.utils.set_random_seed(args.seed)
    if args.write_init:
        encoder = sentence_encoder.build_sentence_encoder(params.task.model.encoder)
        prefix = sentence_encoder.write_encoder_checkpoint(encoder, args.write_init)
        train_utils.serialize_config(params, args.write_init)
        print(f"wrote {prefix}")
        return 0
    strategy = None
    if args.cpu_replicas > 1:
        strategy = tf.distribute.MirroredStrategy(
            [f"/cpu:{i}" for i in range(args.cpu_replicas)])
        logging.info("MirroredStrategy: %d replicas on logical CPU devices",
                     strategy.num_replicas_in_sync)
    train_lib.run(params, args.model_dir, args.mode, strategy=strategy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
