r"""Export size and time of a LaBSE-sized encoder: 12 layers, 768 wide, 12 heads, 3,072
feed-forward, a cased WordPiece vocabulary of 501,153 entries, CLS pooling, a 768 -> 768
tanh projection and L2 normalisation (sentence-transformers' LaBSE layout), random weights.

    python benchmarks/labse_size.py --output runs/labse_size [--tflite]

The vocabulary is `labse_size_vocab()` of tests/testdata/make_st_standins.py (the labse_layout
stand-in's 3,000 entries, then pieces of two of its characters), whose ids
`tests/text/test_bert_normalizer.py` checks against Hugging Face's tokenizer. Writes
`OUTPUT/converted/` (what `cmlm_tf.import_model` writes for an imported model) and exports it
to `OUTPUT/export/` as `python -m cmlm_tf.export --model_dir OUTPUT/converted --tflite` does,
then prints the seconds of each step, the size of each part of the export and the peak
resident memory. Serving speed of the result:

    python benchmarks/serving_throughput.py --model runs/labse_size/export \
        --stsb ../shared/data/stsb/sts-dev.csv --systems serving,tflite_int8 --limit 20

Random weights give random vectors: the point is the size of the model, not its output.
The benchmark asserts nothing about time.
"""

import argparse
import importlib.util
import os
import pathlib
import resource
import shutil
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = pathlib.Path(__file__).resolve().parents[1]


def labse_size_vocab():
    spec = importlib.util.spec_from_file_location(
        "make_st_standins", REPO / "tests" / "testdata" / "make_st_standins.py")
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    return maker.labse_size_vocab(
        maker.standin_vocab(REPO / "tests" / "testdata" / "st_standins" / "labse_layout"))


def size_of(path: pathlib.Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--tflite", action="store_true", help="also write the TFLite models")
    args = parser.parse_args()
    output = pathlib.Path(args.output)
    shutil.rmtree(output, ignore_errors=True)

    from cmlm_tf import configs
    from cmlm_tf.export import export_lib
    from cmlm_tf.model_import import import_folder
    from cmlm_tf.modeling import sentence_encoder
    from cmlm_tf.runtime import host

    flags = host.cpu_flags() or set()
    print("CPU flags:", " ".join(sorted(flag for flag in flags if flag.startswith(
        ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx"))) or "unknown"), flush=True)
    times = {}
    start = time.perf_counter()
    vocab = labse_size_vocab()
    fields = dict(vocab_size=len(vocab), hidden_size=768, num_layers=12,
                  num_attention_heads=12, intermediate_size=3072,
                  hidden_activation="gelu_exact", max_position_embeddings=512,
                  type_vocab_size=2, layer_norm_epsilon=1e-12, pooling="cls",
                  projection_size=768, projection_activation="tanh", normalize=True)
    encoder = sentence_encoder.build_sentence_encoder(configs.EncoderConfig(**fields))
    parameters = sum(int(v.shape.num_elements()) for v in encoder.weights)
    meta = {"encoder": fields, "tokenizer_type": "wordpiece", "lower_case": False,
            "max_seq_length": 128, "position_offset": 0}
    import_folder.write(encoder, meta, vocab, str(output / "converted"),
                        source={"source_dir": "labse_size (random weights)", "family": "random"},
                        overwrite=True)
    del encoder
    times["build and write the converted folder"] = time.perf_counter() - start
    start = time.perf_counter()
    export_lib.export(str(output / "export"), model_dir=str(output / "converted"),
                      tflite=args.tflite)
    times["export" + (" with TFLite" if args.tflite else "")] = time.perf_counter() - start

    print(f"LaBSE-sized encoder: {parameters:,} parameters, vocabulary {len(vocab):,}")
    for step, seconds in times.items():
        print(f"  {step:42s} {seconds:8.1f} s")
    export = output / "export"
    parts = [output / "converted", export / "preprocessor", export / "encoder",
             export / "serving" / "1"]
    parts += sorted((export / "tflite").glob("*.tflite")) if args.tflite else []
    for part in parts:
        print(f"  {str(part.relative_to(output)):42s} {size_of(part) / 2**20:10.1f} MiB")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"  peak resident memory {peak:.1f} GiB")


if __name__ == "__main__":
    main()
