r"""The accuracy an MLM / TLM model gets by always predicting the most frequent masked token.

    python benchmarks/mlm_frequency_baseline.py --config_file configs/mlm_tlm_tiny.yaml \
        [--params_override ...] [--batches 150]

Reads `--batches` batches of the `cmlm_tf/mlm_tlm` training pipeline exactly as a run with the
same config sees them (same seed, masking and mix) and prints, for MLM and TLM examples
separately, the most frequent label among the masked positions and its share. A model whose
`mlm_accuracy` / `tlm_accuracy` stays at these shares has learned token frequencies only.
"""

import argparse
import collections
import sys

from official.core import exp_factory

from cmlm_tf import config_files
from cmlm_tf.data import mlm_tlm
from cmlm_tf.tasks import experiment_registry


def frequency_baseline(params, batches: int):
    task = params.task
    dataset = mlm_tlm.mlm_tlm_dataset(task.train_data, task.bitext_data, task.model.tokenizer)
    counts = {"mlm": collections.Counter(), "tlm": collections.Counter()}
    for batch in dataset.take(batches):
        ids = batch["masked_lm_ids"].numpy()
        weights = batch["masked_lm_weights"].numpy()
        for row, is_tlm in enumerate(batch["is_tlm"].numpy()):
            kind = "tlm" if is_tlm else "mlm"
            counts[kind].update(ids[row][weights[row] > 0].tolist())
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config_file", action="append", required=True)
    parser.add_argument("--params_override", default="")
    parser.add_argument("--batches", type=int, default=150)
    args = parser.parse_args(argv)


    experiment_registry.register()

    params = config_files.load_experiment_config(
        args.config_file, args.params_override,
        base=exp_factory.get_exp_config("cmlm_tf/mlm_tlm"))
    vocab = None
    if params.task.model.tokenizer.type == "wordpiece":
        with open(params.task.model.tokenizer.vocab_file, encoding="utf-8") as f:
            vocab = [line.rstrip("\n") for line in f]
    counts = frequency_baseline(params, args.batches)
    for kind, counter in counts.items():
        total = sum(counter.values())
        if not total:
            print(f"{kind}: no masked tokens in {args.batches} batches")
            continue
        token, count = counter.most_common(1)[0]
        name = vocab[token] if vocab is not None else str(token)
        print(f"{kind}: {total} masked tokens, most frequent {name!r} (id {token}): "
              f"share {count / total:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
