"""The work `serving_throughput.py` measures a pass against: the real tokens of each text
(the export's own tokenizer), the token positions padded batches fill, and the encoder's
matmul FLOPs on the real tokens, per text of n tokens for L layers of width H and
feed-forward width I: L * (n * (8 H^2 + 4 H I) + 4 n^2 H); the machine's peak a system's
share is of; and the table of each system's speed, share of the peak and STS-B Spearman."""

import os

import numpy as np
import serving_systems


def token_counts(model: str, texts) -> list:
    """Real tokens per text with the export's own tokenizer (`[CLS]`, `[SEP]` included,
    truncated to its seq_length)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    tokenize = tf.saved_model.load(os.path.join(model, "serving", "1")).tokenize
    counts = []
    for index in range(0, len(texts), 512):
        mask = tokenize(tf.constant(texts[index:index + 512]))["input_mask"]
        counts += [int(n) for n in tf.reduce_sum(mask, axis=1).numpy()]
    return counts


def matmul_flops(encoder: dict, tokens) -> float:
    """The encoder's matmul FLOPs on texts of `tokens` real tokens each (module docstring)."""
    width, inner = encoder["hidden_size"], encoder["intermediate_size"]
    n = np.asarray(tokens, np.float64)
    per_layer = n * (8 * width ** 2 + 4 * width * inner) + 4 * n ** 2 * width
    return float(encoder["num_layers"] * per_layer.sum())


def padded_tokens(tokens, batch_size: int, bucket_rows: int = 0) -> int:
    """Token positions the batches of `tokens` (in order) fill when each is padded to its
    longest text; with `bucket_rows`, when each is sorted and cut into sub-batches of that
    many rows, each padded to its own longest."""
    total = 0
    for start in range(0, len(tokens), batch_size):
        batch = sorted(tokens[start:start + batch_size], reverse=True)
        step = bucket_rows or len(batch)
        total += sum(len(batch[i:i + step]) * batch[i] for i in range(0, len(batch), step))
    return total


def peak_of(system: str, peak: dict) -> float:
    """The best peak (FLOP/s) of the number type `system`'s matmuls run in."""
    number_type = serving_systems.spec(system)[2]
    return max([value for name, value in peak.items() if name.startswith(number_type)],
               default=float("nan")) * 1e9


def report(args, texts: list, best: dict, spearman: dict, *, peak: dict, useful_flops: float):
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("matmul peaks: " + ", ".join(f"{library} {gflops:.1f} G/s"
                                      for library, gflops in peak.items()))
    reference = best.get("sentence-transformers")
    anchor = spearman.get("serving")
    print(f"{'system':30s} {'sentences/s':>12s} {'vs ST fp32':>11s} {'useful G/s':>11s} "
          f"{'of peak':>8s} {'STS-B':>8s} {'vs serving':>10s}")
    for system in args.system_list:
        ratio = f"{reference / best[system]:10.2f}x" if reference else ""
        useful = useful_flops / best[system]
        delta = f"{spearman[system] - anchor:+10.4f}" if anchor is not None else ""
        print(f"{system:30s} {len(texts) / best[system]:12.1f} {ratio:>11s} "
              f"{useful / 1e9:11.1f} {useful / peak_of(system, peak):8.1%} "
              f"{spearman[system]:8.4f} {delta:>10s}")
