import re

from setuptools import find_packages, setup

with open("cmlm_tf/__init__.py", encoding="utf-8") as f:
    VERSION = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)

setup(
    name="cmlm_tf",
    version=VERSION,
    description="Train and ship multilingual sentence encoders (CMLM, LaBSE-style dual "
                "encoders, dual momentum contrast, BGT) with TensorFlow.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.13",
    # The top-level `export/` folder is the exporter's command line in a checkout; installed,
    # the same command is `python -m cmlm_tf.export` (or `cmlm-tf-export`). The recipes of
    # `configs/` install as `cmlm_tf.recipes`, so `--config_file=NAME` works anywhere.
    packages=find_packages(include=["cmlm_tf", "cmlm_tf.*"]) + ["cmlm_tf.recipes"],
    package_dir={"cmlm_tf.recipes": "configs"},
    package_data={"cmlm_tf": ["data/corpus/*", "data/normalizer/*"],
                  "cmlm_tf.recipes": ["*.yaml", "*.sh"]},
    entry_points={"console_scripts": [
        "cmlm-tf-train = cmlm_tf.commands.train:console_main",
        "cmlm-tf-export = cmlm_tf.commands.export:main",
        "cmlm-tf-evaluate = cmlm_tf.commands.evaluate:main",
        "cmlm-tf-mine = cmlm_tf.commands.mine:main",
        "cmlm-tf-mine-hard-negatives = cmlm_tf.commands.mine_hard_negatives:main",
        "cmlm-tf-embed-corpus = cmlm_tf.commands.embed_corpus:main",
        "cmlm-tf-similarity = cmlm_tf.commands.similarity:main",
        "cmlm-tf-build-vocab = cmlm_tf.commands.build_vocab:main",
        "cmlm-tf-convert-hf-bert = cmlm_tf.commands.convert_hf_bert:main",
        "cmlm-tf-import-model = cmlm_tf.commands.import_model:main",
        "cmlm-tf-convert-nli = cmlm_tf.commands.convert_nli:main",
    ]},
    install_requires=[
        # These four must stay on one minor line, or tensorflow-text fails to load.
        "tensorflow~=2.20.0",
        "tensorflow-text~=2.20.0",
        "tf-keras~=2.20.0",
        "tf-models-official~=2.20.0",
        "tensorflow-hub>=0.16.1",
        "numpy",
        "scipy",
        "scikit-learn",
        "safetensors",
        "tqdm",
        "pyyaml",
        "sentencepiece",  # trains BGT's vocabulary; tensorflow-text runs the model
        "ai-edge-litert",  # the TFLite interpreter (LiteRT) for exported TFLite models
    ],
    # The TF Serving request protos, on the same line as tensorflow (the test builds a
    # PredictRequest).
    # `mteb`: MTEB 2.x runs on torch and sentence-transformers; left to mteb's own
    # requirements, so installing torch first (a CPU build, say) keeps that build.
    # `scale`: corpus jobs on Apache Beam (`cmlm_tf.embed_corpus`, `cmlm_tf.mine` with Beam
    # options) and the approximate-neighbour indexes of mining (faiss, ScaNN).
    # `onnx`: the ONNX models of `export --onnx` (built from the weights with the onnx
    # package alone); ONNX Runtime, which runs them, is the `mteb` venv's (its tests).
    # `keras_hub`: the KerasHub preset of an export (Keras 3, written in a child process);
    # not in the README's test install (it pins kagglesdk 0.1.28, which moves
    # tf-models-official's kaggle back to 2.2.1), but in the `mteb` venv, whose torch is the
    # preset's second backend (tests/mteb_extra/test_keras_hub_preset.py).
    extras_require={"test": ["pytest", "pytest-xdist", "ruff", "tensorflow-serving-api~=2.20.0"],
                    "scale": ["apache-beam~=2.77", "pyarrow", "faiss-cpu~=1.15",
                              "scann~=1.4"],
                    "onnx": ["onnx>=1.17"],
                    "keras_hub": ["keras-hub~=0.32.0"],
                    "mteb": ["mteb>=2,<3", "onnxruntime", "keras-hub~=0.32.0"]},
    classifiers=[
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
