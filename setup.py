from setuptools import find_packages, setup

setup(
    name="cmlm_tf",
    version="0.1.0",
    description="Train and ship multilingual sentence encoders (CMLM, LaBSE-style dual "
                "encoders, dual momentum contrast, BGT) with TensorFlow.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.13",
    packages=find_packages(include=["cmlm_tf", "cmlm_tf.*", "export", "export.*"]),
    package_data={"cmlm_tf": ["data/corpus/*"]},
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
    extras_require={"test": ["pytest", "ruff", "tensorflow-serving-api~=2.20.0"]},
    classifiers=[
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
