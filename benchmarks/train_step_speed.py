r"""Steps/s, examples/s and achieved FLOP/s of CMLM and bitext-retrieval (BR) training steps,
on synthetic batches, against a measured dense-matmul peak.

    python benchmarks/train_step_speed.py --preset tiny      # configs/cmlm_tiny.yaml shapes
    python benchmarks/train_step_speed.py --preset minilm --task cmlm,br \
        --precision float32,bfloat16                          # 384 x 6 layers, batch 32 x 64
    python benchmarks/train_step_speed.py --preset base      # BERT-base, batch 8 x seq 256

The step is the task's own `train_step` (forward, loss, backward, optimizer update) in one
`tf.function`; input tokenisation is not timed. `bfloat16` runs under the Keras
`mixed_bfloat16` policy, as `runtime.mixed_precision_dtype: bfloat16` does in training (logits
and losses are cast to float32 by the tasks). FLOP/s counts matmul FLOPs only (encoder,
CMLM projection and MLM head; 3x the forward pass for forward + backward), so it is a lower
bound; the peak is the best `tf.matmul` of two 2048x2048 matrices in the same dtype.
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
    "minilm": (384, 6, 12, 1536, 30522, 32, 64, 10, 15),
    "base": (768, 12, 12, 3072, 30522, 8, 256, 80, 15),
}


def matmul_peak(dtype, size: int = 2048, repeats: int = 10) -> float:
    """Best FLOP/s of one [size, size] @ [size, size] matmul in `dtype`."""
    import tensorflow as tf

    a = tf.cast(tf.random.normal([size, size]), dtype)
    b = tf.cast(tf.random.normal([size, size]), dtype)
    matmul = tf.function(lambda: tf.reduce_sum(tf.cast(tf.matmul(a, b)[0, :1], tf.float32)))
    matmul().numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul().numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best


def encoder_flops(hidden, layers, inner, rows, *, seq) -> float:
    """Forward matmul FLOPs of a BERT encoder on [rows, seq] tokens."""
    per_token = layers * (2 * (4 * hidden * hidden + 2 * hidden * inner) + 4 * seq * hidden)
    return rows * seq * per_token


def build_step(task_name, shape):
    import tensorflow as tf
    from official.modeling import optimization

    from cmlm_tf import configs
    from cmlm_tf.tasks import bitext, cmlm

    hidden, layers, heads, inner, vocab, batch, seq, predictions, projections = shape
    encoder = configs.EncoderConfig(
        vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_attention_heads=heads,
        intermediate_size=inner, max_position_embeddings=max(512, seq + projections))

    def segment():
        ids = tf.random.uniform([batch, seq], 5, vocab, dtype=tf.int32)
        return {"input_word_ids": ids, "input_mask": tf.ones_like(ids),
                "input_type_ids": tf.zeros_like(ids)}

    if task_name == "cmlm":
        task_config = cmlm.CMLMTaskConfig()
        task_config.model.encoder = encoder
        task_config.model.cmlm.num_projections = projections
        task_config.train_data.seq_length = seq
        task = cmlm.CMLMTask(task_config)
        positions = tf.sort(tf.random.uniform([batch, predictions], 1, seq - 1, tf.int32))
        inputs = {"sentence1": segment(), "sentence2": segment(),
                  "masked_lm_positions": positions,
                  "masked_lm_ids": tf.random.uniform([batch, predictions], 5, vocab, tf.int32),
                  "masked_lm_weights": tf.ones([batch, predictions])}
        flops = (encoder_flops(hidden, layers, inner, batch, seq=seq)
                 + encoder_flops(hidden, layers, inner, batch, seq=seq + projections)
                 + 2 * batch * hidden * hidden * projections
                 + 2 * batch * predictions * (hidden * hidden + hidden * vocab))
        opt_config = configs.lamb_optimizer(decay_steps=1000, warmup_steps=10)
    else:
        task_config = bitext.BitextTaskConfig()
        task_config.model.encoder = encoder
        task_config.train_data.seq_length = seq
        task = bitext.BitextTask(task_config)
        inputs = {"source": segment(), "target": segment()}
        flops = 2 * encoder_flops(hidden, layers, inner, batch, seq=seq)
        opt_config = configs.adamw_optimizer(3e-5, 10, 1000)
    model = task.build_model()
    factory = optimization.OptimizerFactory(opt_config)
    optimizer = factory.build_optimizer(factory.build_learning_rate())
    metrics = task.build_metrics()

    @tf.function
    def step():
        return task.train_step(inputs, model, optimizer, metrics)

    params = sum(int(tf.size(v)) for v in model.trainable_variables)
    return step, 3 * flops, params


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--task", default="cmlm", help="comma-separated: cmlm, br")
    parser.add_argument("--precision", default="float32",
                        help="comma-separated: float32, bfloat16")
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()

    import tensorflow as tf
    import tf_keras

    shape = PRESETS[args.preset]
    hidden, layers, heads, inner, vocab, batch, seq, predictions, projections = shape
    steps = args.steps or (20 if args.preset == "tiny" else 3)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, TF {tf.__version__}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"preset: {args.preset}  hidden {hidden} x {layers} layers, batch {batch} x seq "
          f"{seq}; CMLM: {predictions} predictions, N={projections}")
    for precision in args.precision.split(","):
        dtype = {"float32": tf.float32, "bfloat16": tf.bfloat16}[precision]
        peak = matmul_peak(dtype)
        print(f"[{precision}] dense matmul peak (2048^3): {peak / 1e9:.1f} GFLOP/s")
        policy = "mixed_bfloat16" if precision == "bfloat16" else "float32"
        for task_name in args.task.split(","):
            tf_keras.mixed_precision.set_global_policy(policy)
            try:
                step, flops, params = build_step(task_name, shape)
                step()  # trace and warm up
                start = time.perf_counter()
                for _ in range(steps):
                    loss = step()
                elapsed = time.perf_counter() - start
            finally:
                tf_keras.mixed_precision.set_global_policy("float32")
            loss = float(list(loss.values())[0])
            achieved = steps * flops / elapsed
            print(f"[{precision}] {task_name}: {params / 1e6:.1f}M params, "
                  f"steps_per_second {steps / elapsed:.3f}, examples_per_second "
                  f"{steps * batch / elapsed:.1f} ({steps} steps), loss {loss:.3f}, "
                  f"matmul {achieved / 1e9:.1f} GFLOP/s = {100 * achieved / peak:.0f}% of peak")


if __name__ == "__main__":
    main()
