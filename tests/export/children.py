"""Children of the export tests: functions a test runs in a fresh interpreter, by name.

    python -m tests.export.children FUNCTION [ARGS...]

run with the repository on PYTHONPATH (`tests.conftest.subprocess_env()`), through the
dispatcher `tests.driver.children.main`. A function's return value is the child's exit
status. Nothing here imports TensorFlow at module level:
one child reports whether TF-Text was imported.
"""

import os
import sys


def export_killed_at_rename(kill_at, count_file, watched, *argv):
    """The export command with `argv`, killed (`os._exit(137)`, as kill -9 does) at its
    `kill_at`-th rename of a path under `watched` (0: never); each such rename rewrites
    `count_file` with the count so far."""
    kill_at, calls = int(kill_at), []

    def hooked(real):
        def rename(src, dst, *args, **kwargs):
            if any(os.path.abspath(p).startswith(watched) for p in (src, dst)):
                calls.append(dst)
                with open(count_file, "w") as f:
                    f.write(str(len(calls)))
                if len(calls) == kill_at:
                    os._exit(137)
            return real(src, dst, *args, **kwargs)
        return rename

    os.rename, os.replace = hooked(os.rename), hooked(os.replace)
    from cmlm_tf.commands import export as export_cli

    return export_cli.main(list(argv))


def encoder_without_tensorflow_text(encoder_dir):
    """Calls the TF Hub encoder at `encoder_dir` on token ids; prints OK when its output is
    [1, 32] and TF-Text was never imported."""
    import tensorflow as tf
    import tensorflow_hub as hub

    encoder = hub.KerasLayer(encoder_dir)
    ids = tf.constant([[2, 10, 11, 3, 0]], tf.int32)
    out = encoder(dict(input_word_ids=ids, input_mask=tf.cast(ids > 0, tf.int32),
                       input_type_ids=tf.zeros_like(ids)))
    assert out["default"].shape == (1, 32), out["default"].shape
    assert "tensorflow_text" not in sys.modules
    print("OK")


def serving_dim(serving_dir):
    """Loads the TF Serving model at `serving_dir`; prints `dim N`, the width of what
    `serving_default` returns."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    model = tf.saved_model.load(serving_dir)
    out = model.signatures["serving_default"](sentences=tf.constant(["a dog"]))
    print("dim", out["embeddings"].shape[-1])


def serving_without_and_with_tensorflow_text(serving_dir):
    """Loads the TF Serving model at `serving_dir` before and after `import tensorflow_text`;
    prints `FAILED <error> <whether it names FastBertNormalize>`, then `LOADED <shape>`."""
    import tensorflow as tf

    try:
        tf.saved_model.load(serving_dir)
    except Exception as e:  # noqa: BLE001 (the test reads what failed)
        print("FAILED", type(e).__name__, "FastBertNormalize" in str(e))
    import tensorflow_text  # noqa: F401

    model = tf.saved_model.load(serving_dir)
    out = model.signatures["serving_default"](sentences=tf.constant(["a dog"]))
    print("LOADED", out["embeddings"].shape)


def answer_predict_request(request_file, serving_dir, response_file):
    """Answers the TF Serving PredictRequest in `request_file` with the model at
    `serving_dir`, as the model server would (TensorFlow and tensorflow_text only, never
    cmlm_tf), and writes the PredictResponse to `response_file`."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    from tensorflow_serving.apis import predict_pb2

    with open(request_file, "rb") as f:
        request = predict_pb2.PredictRequest.FromString(f.read())
    model = tf.saved_model.load(serving_dir)
    signature = model.signatures[request.model_spec.signature_name]
    inputs = {name: tf.constant(tf.make_ndarray(proto))
              for name, proto in request.inputs.items()}
    response = predict_pb2.PredictResponse()
    response.model_spec.CopyFrom(request.model_spec)
    for name, value in signature(**inputs).items():
        response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
    with open(response_file, "wb") as f:
        f.write(response.SerializeToString())
    assert "cmlm_tf" not in sys.modules


def keras3_tfsmlayer(serving_dir, vectors_file, sentences_json):
    """Embeds the JSON list `sentences_json` with `serving_dir` in a Keras 3 model
    (`keras.layers.TFSMLayer`); saves the vectors to `vectors_file` (.npy)."""
    import json

    import keras
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    assert keras.__version__.startswith("3"), keras.__version__
    layer = keras.layers.TFSMLayer(serving_dir, call_endpoint="serving_default")
    text = keras.Input(shape=(), dtype="string")
    model = keras.Model(text, layer(text)["embeddings"])
    np.save(vectors_file, model(tf.constant(json.loads(sentences_json))).numpy())


def serving_cases(saved_model_dir, cases_json):
    """Evaluates each expression of the JSON object `cases_json` (name -> Python expression
    over the loaded SavedModel `m`, `tf` and `np`, as `test_serving_signatures.CASES` gives
    them) and prints one JSON line per case: {name: {"shape", "nan"}} or {name: {"error",
    "message"}}."""
    import json

    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    m = tf.saved_model.load(saved_model_dir)
    for name, expression in json.loads(cases_json).items():
        try:
            out = eval(expression, {"m": m, "tf": tf, "np": np})
            shape = ({key: list(value.shape) for key, value in out.items()}
                     if isinstance(out, dict) else list(out.shape))
            nan = any(np.isnan(value.numpy()).any() for value in
                      (out.values() if isinstance(out, dict) else [out])
                      if value.dtype.is_floating)
            result = {"shape": shape, "nan": bool(nan)}
        except Exception as error:  # noqa: BLE001 (the test reads each failure)
            result = {"error": type(error).__name__, "message": str(error)}
        print(json.dumps({name: result}), flush=True)



def serving_default_vectors(serving_dir, texts_file, vectors_file):
    """Embeds the JSON list in `texts_file` with `serving_dir`'s `serving_default` signature,
    as a model server runs it (TensorFlow and tensorflow_text only), in one request; saves
    the vectors to `vectors_file` (.npy)."""
    import json

    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    with open(texts_file, encoding="utf-8") as f:
        texts = json.load(f)
    signature = tf.saved_model.load(serving_dir).signatures["serving_default"]
    np.save(vectors_file, signature(sentences=tf.constant(texts))["embeddings"].numpy())

def load_refused(export_dir, precision):
    """`cmlm_tf.load(export_dir, precision=precision)`, expected to refuse: prints its
    one-line error and returns 2 (0 if it loaded)."""
    import cmlm_tf

    try:
        cmlm_tf.load(export_dir, precision=precision)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def serving_calls_after_warm_up(serving_dir, texts_file, calls):
    """Calls `serving_dir`'s `serving_default` on the JSON list in `texts_file` once (the
    warm-up), prints `COUNTED`, then calls it `calls` more times: run with ONEDNN_VERBOSE=1,
    what oneDNN prints after that line is the kernels of those calls."""
    import json

    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    with open(texts_file, encoding="utf-8") as f:
        sentences = tf.constant(json.load(f))
    signature = tf.saved_model.load(serving_dir).signatures["serving_default"]
    signature(sentences=sentences)
    print("COUNTED", flush=True)
    for _ in range(int(calls)):
        signature(sentences=sentences)


if __name__ == "__main__":
    from tests.driver import children

    sys.exit(children.main(sys.argv[1:], globals()))
