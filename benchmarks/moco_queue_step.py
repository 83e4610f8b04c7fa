r"""Time and memory of dual momentum contrast training steps at the paper's queue size.

    python benchmarks/moco_queue_step.py                  # K = 409,600 keys of 768 per side
    python benchmarks/moco_queue_step.py --queue_size 8192 --dim 384

A small encoder (1 layer, hidden 64) with a linear projection to `--dim` keeps the encoder's
share of the step small, so the step is mostly the queue: the momentum update, the scores
against both queues [batch, K], the masks, InfoNCE both ways, its gradient and the enqueue.
The step is the task's own `train_step` (AdamW) in one `tf.function`, on synthetic batches.
Prints the queue state's size, the process's resident memory before and after building the
model and its peak, the first step (with tracing) and the mean of the following steps.
"""

import argparse
import os
import platform
import resource
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def _rss_gib() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 30


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB on Linux


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--queue_size", type=int, default=409600)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--per_side", action="store_true",
                        help="one query encoder per side (the paper's setting)")
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf
    from official.modeling import optimization

    from cmlm_tf import configs
    from cmlm_tf.tasks import moco

    config = moco.MomentumContrastTaskConfig()
    config.model.encoder = configs.EncoderConfig(
        vocab_size=1000, hidden_size=64, num_layers=1, num_attention_heads=4,
        intermediate_size=256, max_position_embeddings=max(64, args.seq),
        projection_size=args.dim)
    config.train_data.global_batch_size = args.batch
    config.moco.override({"queue_size": args.queue_size, "temperature": 0.04,
                          "momentum": 0.999, "shared_encoder": not args.per_side})
    task = moco.MomentumContrastTask(config)

    rss_start = _rss_gib()
    model = task.build_model()
    rss_built, peak_built = _rss_gib(), _peak_rss_gib()
    factory = optimization.OptimizerFactory(configs.adamw_optimizer(4e-5, 400, 1000))
    optimizer = factory.build_optimizer(factory.build_learning_rate())

    rng = np.random.default_rng(0)

    def batch(step):
        def side():
            ids = rng.integers(5, 1000, size=(args.batch, args.seq)).astype(np.int32)
            return {"input_word_ids": tf.constant(ids),
                    "input_mask": tf.ones_like(tf.constant(ids)),
                    "input_type_ids": tf.zeros_like(tf.constant(ids))}
        first = step * args.batch
        return {"source": side(), "target": side(),
                "source_id": tf.range(first, first + args.batch, dtype=tf.int64),
                "target_id": tf.range(first, first + args.batch, dtype=tf.int64) + 10 ** 9}

    step = tf.function(lambda inputs: task.train_step(inputs, model, optimizer))
    inputs = [batch(i) for i in range(args.steps)]
    start = time.perf_counter()
    float(step(inputs[0])["loss"])
    first = time.perf_counter() - start
    times = []
    for i in range(1, args.steps):
        start = time.perf_counter()
        loss = float(step(inputs[i])["loss"])
        times.append(time.perf_counter() - start)

    sides = 2
    queue_bytes = sides * args.queue_size * (args.dim * 4 + 8)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"GPUs: {len(tf.config.list_physical_devices('GPU'))}; TF {tf.__version__}")
    print(f"queue: K={args.queue_size:,} x dim {args.dim} float32 (+ int64 ids) per side, "
          f"{sides} sides = {queue_bytes / 2 ** 30:.2f} GiB "
          f"({args.queue_size * args.dim * 4 / 1e9:.2f} GB of keys per side)")
    print(f"encoder: 1 layer x 64, projection to {args.dim}; "
          f"{'one per side' if args.per_side else 'shared'}; batch {args.batch} x seq {args.seq}")
    print(f"resident memory: {rss_start:.2f} GiB before the model, {rss_built:.2f} GiB after "
          f"building it (peak {peak_built:.2f} GiB while building), peak "
          f"{_peak_rss_gib():.2f} GiB over the steps")
    if tf.config.list_physical_devices("GPU"):
        info = tf.config.experimental.get_memory_info("GPU:0")
        print(f"GPU memory: peak {info['peak'] / 2 ** 30:.2f} GiB")
    print(f"first step (tracing included): {first:.2f} s")
    if times:
        print(f"step time: {np.mean(times) * 1000:.1f} ms (mean of {len(times)}, "
              f"min {np.min(times) * 1000:.1f} ms); last loss {loss:.3f}, "
              f"queue filled {int(model.source_queue.queue_count.numpy()):,}")


if __name__ == "__main__":
    main()
