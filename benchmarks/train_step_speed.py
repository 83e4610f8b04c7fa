r"""Steps/s and examples/s of CMLM training steps, on synthetic batches of the configured shape.

    python benchmarks/train_step_speed.py --preset tiny      # configs/cmlm_tiny.yaml shapes
    python benchmarks/train_step_speed.py --preset base      # BERT-base, batch 8 x seq 256

The step is the task's own `train_step` (forward, loss, backward, LAMB update) in one
`tf.function`; input tokenisation is not timed.
"""

import argparse
import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

PRESETS = {
    # name: (hidden, layers, heads, intermediate, vocab, batch, seq, predictions, projections)
    "tiny": (128, 2, 4, 512, 1489, 32, 48, 15, 8),
    "base": (768, 12, 12, 3072, 30522, 8, 256, 80, 15),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()

    import tensorflow as tf
    from official.modeling import optimization

    from cmlm_tf import configs
    from cmlm_tf.tasks import cmlm

    hidden, layers, heads, inner, vocab, batch, seq, predictions, projections = \
        PRESETS[args.preset]
    steps = args.steps or (20 if args.preset == "tiny" else 3)
    task_config = cmlm.CMLMTaskConfig()
    task_config.model.encoder = configs.EncoderConfig(
        vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_attention_heads=heads,
        intermediate_size=inner, max_position_embeddings=max(512, seq + projections))
    task_config.model.cmlm.num_projections = projections
    task_config.train_data.seq_length = seq
    task = cmlm.CMLMTask(task_config)
    model = task.build_model()
    opt_config = cmlm.lamb_optimizer(decay_steps=1000, warmup_steps=10)
    factory = optimization.OptimizerFactory(opt_config)
    optimizer = factory.build_optimizer(factory.build_learning_rate())
    metrics = task.build_metrics()

    def segment():
        ids = tf.random.uniform([batch, seq], 5, vocab, dtype=tf.int32)
        return {"input_word_ids": ids, "input_mask": tf.ones_like(ids),
                "input_type_ids": tf.zeros_like(ids)}

    positions = tf.sort(tf.random.uniform([batch, predictions], 1, seq - 1, dtype=tf.int32))
    inputs = {"sentence1": segment(), "sentence2": segment(),
              "masked_lm_positions": positions,
              "masked_lm_ids": tf.random.uniform([batch, predictions], 5, vocab, tf.int32),
              "masked_lm_weights": tf.ones([batch, predictions])}

    @tf.function
    def step():
        return task.train_step(inputs, model, optimizer, metrics)

    step()  # trace and warm up
    start = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = time.perf_counter() - start
    params = sum(int(tf.size(v)) for v in model.trainable_variables)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, TF {tf.__version__}")
    print(f"preset: {args.preset}  hidden {hidden} x {layers} layers, batch {batch} x seq "
          f"{seq}, {predictions} predictions, N={projections}, {params / 1e6:.1f}M params")
    print(f"steps_per_second: {steps / elapsed:.3f}  examples_per_second: "
          f"{steps * batch / elapsed:.1f}  ({steps} steps)")


if __name__ == "__main__":
    main()
