r"""Every way from text to vector, compared: cosines between paths and STS-B dev Spearman.

    python benchmarks/paths_agreement.py --model EXPORT --stsb ../shared/data/stsb/sts-dev.csv \
        [--golden tests/testdata/minilm_golden.json]

EXPORT must be written with `--tflite`. Paths: `cmlm_tf.load().encode()`, `serving/1`'s
`serving_default` and `from_token_ids` signatures, the TF Hub `preprocessor` + `encoder`
through `hub.KerasLayer` (its `default` output), Keras 3's `TFSMLayer` on `serving/1` (in a
separate process without tf_keras), and the TFLite models (float32, int8). Prints, for the
golden sentences and for STS-B dev, the smallest cosine between each pair of paths (and
against the golden vectors), and each path's STS-B dev Spearman.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def tfsm_vectors(model: str, texts, work: str) -> np.ndarray:
    """`serving_default` through Keras 3's TFSMLayer, in a process without tf_keras."""
    with open(os.path.join(work, "texts.json"), "w", encoding="utf-8") as f:
        json.dump(texts, f)
    code = textwrap.dedent(f"""
        import json, keras, numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401
        layer = keras.layers.TFSMLayer({os.path.join(model, 'serving', '1')!r},
                                       call_endpoint="serving_default")
        texts = json.load(open({os.path.join(work, 'texts.json')!r}, encoding="utf-8"))
        np.save({os.path.join(work, 'tfsm.npy')!r}, np.concatenate([
            layer(tf.constant(texts[i:i + 64]))["embeddings"].numpy()
            for i in range(0, len(texts), 64)]))
    """)
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return np.load(os.path.join(work, "tfsm.npy"))


def all_paths(model_dir: str, texts, work: str) -> dict:
    import tensorflow as tf
    import tensorflow_hub as hub
    import tensorflow_text  # noqa: F401

    import cmlm_tf
    from cmlm_tf.export import tflite

    model = cmlm_tf.load(model_dir)
    serving = model._serving
    preprocessor = hub.KerasLayer(os.path.join(model_dir, "preprocessor"))
    encoder = hub.KerasLayer(os.path.join(model_dir, "encoder"))

    def batched(function, size=64):
        return np.concatenate([function(texts[i:i + size]) for i in range(0, len(texts), size)])

    paths = {
        "encode": model.encode(texts),
        "serving_default": batched(lambda b: serving.signatures["serving_default"](
            sentences=tf.constant(b))["embeddings"].numpy()),
        "from_token_ids": batched(lambda b: serving.signatures["from_token_ids"](
            **serving.tokenize(tf.constant(b)))["embeddings"].numpy()),
        "hub.KerasLayer": batched(lambda b: encoder(preprocessor(tf.constant(b)))[
            "default"].numpy(), 32),
        "TFSMLayer": tfsm_vectors(model_dir, texts, work),
    }
    for quantization in ("float32", "int8"):
        runner = tflite.load_interpreter(os.path.join(
            model_dir, "tflite", f"model_{quantization}.tflite")).get_signature_runner(
                "serving_default")
        paths[f"tflite_{quantization}"] = batched(
            lambda b, runner=runner: runner(sentences=np.array(b, dtype=object))["embeddings"])
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--stsb", required=True)
    parser.add_argument("--golden", default=None, help="JSON with sentences and embeddings")
    args = parser.parse_args()
    from scipy.stats import spearmanr

    from cmlm_tf.evaluation import readers

    first, second, gold = readers.read_sts(args.stsb)
    sets = {"STS-B dev": first + second}
    golden = None
    if args.golden:
        with open(args.golden, encoding="utf-8") as f:
            data = json.load(f)
        sets = {"golden": data["sentences"], **sets}
        golden = np.asarray(data["embeddings"], np.float32)
    with tempfile.TemporaryDirectory() as work:
        results = {name: all_paths(args.model, texts, work) for name, texts in sets.items()}
    for name, paths in results.items():
        names = sorted(paths)
        worst = min(float((paths[a] * paths[b]).sum(axis=1).min())
                    for a in names for b in names if a < b and "int8" not in a + b)
        print(f"{name}: {len(next(iter(paths.values())))} texts; smallest cosine between "
              f"float32 paths {worst:.6f}")
        for path in names:
            line = f"  {path:16s} vs encode: min cosine " \
                   f"{float((paths[path] * paths['encode']).sum(axis=1).min()):.6f}"
            if name == "golden":
                line += f"; vs sentence-transformers: {(paths[path] * golden).sum(1).min():.6f}"
            else:
                n = len(first)
                rho = spearmanr((paths[path][:n] * paths[path][n:]).sum(axis=1), gold)[0]
                line += f"; STS-B dev Spearman {rho:.4f}"
            print(line)


if __name__ == "__main__":
    main()
