"""An export as a KerasHub preset: `OUT/keras_hub/`, which `keras_hub.models.Backbone
.from_preset(path)`, `keras_hub.models.Tokenizer.from_preset(path)` and
`keras_hub.models.TextEmbedderPreprocessor.from_preset(path)` load under Keras 3, on the
TensorFlow and the PyTorch backend, without cmlm_tf.

The preset is written from the sentence-transformers folder of the same export
(`sentence_transformers_folder.py`), in a child process (`python -m
cmlm_tf.export.keras_hub_preset REQUEST RESULT`, `KERAS_BACKEND=tensorflow`): cmlm_tf itself
runs on tf_keras and never imports Keras 3. The child reads the folder with KerasHub's own
Hugging Face converter and saves (the XLM-R family as its `XLMRoberta` classes instead:
`keras_hub_xlmr.py`)

- the encoder as `BertBackbone` (`config.json`, `model.weights.h5`);
- the vocabulary as `BertTokenizer` (`tokenizer.json`, `assets/tokenizer/vocabulary.txt`) with
  the options nearest to BERT's normaliser: `lowercase` as the model's, `strip_accents` with it
  (Hugging Face strips accents of uncased vocabularies), CJK ideographs split (KerasHub's
  default, which it does not save);
- `BertTextEmbedderPreprocessor` (`preprocessor.json`) with the export's sequence length;
- where the head is pooling and L2 normalisation only, `BertTextEmbedder` (`task.json`), so
  `keras_hub.models.TextEmbedder.from_preset(path)` gives the sentence vectors; a Dense
  projection (the LaBSE layout) is `projection.npz` (`kernel` [in, out], `bias`), applied by
  the lines of the card.

KerasHub's tokenizer cannot give BERT's ids on every text: it lower-cases by NFKC case folding
(full-width forms, ligatures, `ß`, final sigma and recomposed Hangul and Indic vowel signs
change) and splits words at format and control characters, which BERT deletes. The child
measures it: the share of natural texts whose ids differ from the folder's own tokenizer
(which the tests hold equal to cmlm_tf's preprocessor; by default the bundled verses of
`natural_probe_texts`), and the share of the hard samples of `PROBE_KINDS` and which of those
kinds differ. `card_lines` puts both shares, each named, in the model card.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from typing import Optional

import numpy as np
from safetensors.numpy import load_file

from cmlm_tf.export import keras_hub_xlmr
from cmlm_tf.runtime import tf_logs

__all__ = ["FOLDER", "NATURAL_PROBE", "PROBE_KINDS", "card_lines", "check_representable",
           "natural_probe_texts", "pooling_lines", "require_keras_hub", "vector_lines",
           "write_preset"]
FOLDER = "keras_hub"  # inside OUT/
# The natural text the mismatch is measured on when the caller gives none: both sides of the
# first held-out verse pairs bundled with the package (English and Spanish).
_NATURAL_PROBE_PAIRS = 50
NATURAL_PROBE = (f"both sides of the first {_NATURAL_PROBE_PAIRS} English-Spanish verse pairs "
                 "of the bundled cmlm_tf/data/corpus/bible_en_es_heldout.tsv")
PROJECTION_FILE = "projection.npz"
# Kinds of text, a few short samples each, on which BERT's normaliser and KerasHub's
# tokenizer options are told apart (the model card lists the kinds whose ids differ).
PROBE_KINDS = {
    "plain ASCII": ["Anne was very happy.", "The 3 cats sat on 2 mats!"],
    "accented Latin": ["Café crème BRÛLÉE", "Ça coûte très cher, señor."],
    "Cyrillic and Greek capitals": ["ВСЕ ЛЮДИ РОЖДАЮТСЯ", "ΑΘΗΝΑ"],
    "Arabic and Hebrew with vowel marks": ["مَرْحَبًا بِالعَالَمِ", "שָׁלוֹם עוֹלָם"],
    "CJK ideographs and kana": ["人人生而自由", "すべての人間は"],
    "Hangul": ["모든 인간은 자유롭다"],
    "Indic vowel signs": ["কোন দেশ", "தொழில்"],
    "full-width forms": ["Ｗｈａｔ？ ＡＢＣ１２３"],
    "ligatures and compatibility characters": ["\ufb01nance \ufb02ow", "\u2460 km\u00b2"],
    "case folding beyond lower case (ß, final sigma)": ["Straße", "λόγος"],
    "zero-width and format characters": ["zero\u200bwidth", "non\u200cjoiner", "\ufeffbom"],
    "control characters": ["bell\x07ring"],
    "non-ASCII spaces": ["no\u00a0break", "wide\u3000space"],
}
# KerasHub's `BertBackbone` runs these; another value of the model's is carried over as the
# nearest KerasHub has, and the metadata notes it.
_BACKBONE_ACTIVATION = "gelu_approx"
_BACKBONE_EPSILON = 1e-12
_GELU = ("gelu_exact", "gelu_approx")
# The projection's activation as NumPy, on `vectors`.
_NUMPY_ACTIVATIONS = {"linear": "vectors", "tanh": "np.tanh(vectors)",
                      "relu": "np.maximum(vectors, 0.0)",
                      "sigmoid": "1.0 / (1.0 + np.exp(-vectors))"}
_POOLING_LINES = {
    "mean": ["vectors = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)"],
    "cls": ["vectors = hidden[:, 0]"],
    "max": ["vectors = np.where(mask > 0, hidden, -np.inf).max(axis=1)"],
}


def require_keras_hub() -> None:
    """Raises ValueError, one line, when the keras-hub package is not installed (looked up
    without importing it)."""
    if importlib.util.find_spec("keras_hub") is None:
        raise ValueError('--keras_hub: the keras-hub package is not installed; install the '
                         'extra: pip install "cmlm_tf[keras_hub]"')


def natural_probe_texts() -> list:
    """The texts of `NATURAL_PROBE`: each pair's English verse, then its Spanish one."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                        "corpus", "bible_en_es_heldout.tsv")
    with open(path, encoding="utf-8") as f:
        pairs = [line.rstrip("\n").split("\t") for _, line in zip(range(_NATURAL_PROBE_PAIRS), f)]
    return [text for pair in pairs for text in pair]


def _check_backbone(tokenizer_type: str, hidden_activation: str, flag: str) -> None:
    if tokenizer_type not in ("wordpiece", keras_hub_xlmr.TOKENIZER_TYPE):
        raise ValueError(f"{flag}: the {tokenizer_type} tokenizer (task.model.tokenizer.type) "
                         "has no KerasHub tokenizer; only WordPiece vocabularies "
                         "(BertTokenizer) and XLM-R's SentencePiece model "
                         "(XLMRobertaTokenizer) are written")
    if hidden_activation not in _GELU:
        raise ValueError(f"{flag}: hidden_activation {hidden_activation!r} "
                         "(task.model.encoder) has no KerasHub backbone equivalent, which "
                         "runs GELU only")


def check_representable(model, flag: str = "--keras_hub") -> None:
    """Raises ValueError, one line starting with `flag`, when `model` (a
    `SentenceModelConfig`) has a part a KerasHub preset cannot hold: what the
    sentence-transformers folder it is written from cannot hold, a tokenizer other than
    WordPiece or XLM-R's SentencePiece (a BERT encoder's SentencePiece too), or an activation
    other than GELU."""
    # Imported here: the exporter's module imports TensorFlow, which `--help` does without.
    from cmlm_tf.export import sentence_transformers_folder as st_folder

    _check_backbone(model.tokenizer.type, model.encoder.hidden_activation, flag)
    st_folder.check_representable(model, flag)


def _layout(st_folder: str) -> tuple:
    """What the preset is made of, read from the sentence-transformers folder, and its Dense
    module as `hf_folder.read_hf_metadata` reads it (None without one)."""
    # Imported here for the reason of `check_representable`.
    from cmlm_tf.model_import import hf_folder

    metadata = hf_folder.read_hf_metadata(st_folder)
    encoder = metadata["encoder"]
    _check_backbone(metadata["tokenizer_type"], encoder["hidden_activation"],
                    f"--keras_hub: {st_folder}")
    lower_case = metadata["lower_case"]
    layout = {
        "tokenizer": {"class": "BertTokenizer", "lowercase": lower_case,
                      "strip_accents": lower_case, "split_on_cjk": True},
        "sequence_length": metadata["max_seq_length"] or encoder["max_position_embeddings"],
        "pooling": encoder["pooling"], "normalize": encoder["normalize"], "dense": None,
        "backbone": {"class": "BertBackbone", "notes": _backbone_notes(encoder)},
    }
    if metadata["tokenizer_type"] == keras_hub_xlmr.TOKENIZER_TYPE:
        layout.update(keras_hub_xlmr.layout_parts(metadata, f"--keras_hub: {st_folder}"))
    if metadata["dense"]:
        layout["dense"] = {"file": PROJECTION_FILE, "activation": metadata["dense"]["activation"],
                           "size": metadata["dense"]["size"]}
    return layout, metadata["dense"]


def _backbone_notes(encoder: dict) -> list:
    notes = []
    if encoder["hidden_activation"] != _BACKBONE_ACTIVATION:
        notes.append("the exact (erf) GELU runs as KerasHub's tanh approximation")
    if encoder["layer_norm_epsilon"] != _BACKBONE_EPSILON:
        notes.append(f"LayerNorm epsilon {encoder['layer_norm_epsilon']:g} runs as "
                     f"KerasHub's {_BACKBONE_EPSILON:g}")
    return notes


def _write_projection(dense: dict, path: str) -> None:
    """The Dense module's weights as `projection.npz`: `kernel` [in, out] and `bias` [out]."""
    tensors = load_file(dense["weights"])
    kernel = np.ascontiguousarray(tensors["linear.weight"].T.astype(np.float32))
    bias = tensors.get("linear.bias", np.zeros(kernel.shape[1], np.float32))
    np.savez(path, kernel=kernel, bias=bias.astype(np.float32))


def write_preset(st_folder: str, out_folder: str, *, probe_texts: Optional[list] = None,
                 probe_name: str = "given at export") -> dict:
    """Writes the KerasHub preset of the sentence-transformers folder `st_folder` into the new
    folder `out_folder`; returns what the export's metadata records of it: the folder's
    name, the keras-hub and Keras versions, the tokenizer's options, the pooling, whether the
    vectors are normalised, the Dense projection (None or its file, activation and size),
    `id_mismatch`: how many natural texts the preset tokenizes differently from the folder
    (`probe_texts`, described by `probe_name`; by default `natural_probe_texts()`), and
    `kind_mismatch`: how many of the hard samples of `PROBE_KINDS`, and which kinds differ."""
    layout, dense = _layout(st_folder)
    require_keras_hub()
    texts = list(probe_texts) if probe_texts is not None else natural_probe_texts()
    os.makedirs(out_folder)
    if dense:
        _write_projection(dense, os.path.join(out_folder, PROJECTION_FILE))
    with tempfile.TemporaryDirectory(prefix="cmlm_tf_keras_hub_") as work:
        request, result = os.path.join(work, "request.json"), os.path.join(work, "result.json")
        with open(request, "w", encoding="utf-8") as f:
            json.dump({"st_folder": st_folder, "out_folder": out_folder, "layout": layout,
                       "texts": texts, "kinds": PROBE_KINDS}, f, ensure_ascii=False)
        child = subprocess.run([sys.executable, "-m", __name__, request, result],
                               env=_child_env(), capture_output=True, text=True)
        if child.returncode != 0 or not os.path.exists(result):
            raise ValueError(f"--keras_hub: writing the KerasHub preset failed: "
                             f"{_last_line(child.stderr)}")
        with open(result, encoding="utf-8") as f:
            measured = json.load(f)
    differing = measured["differing"]
    samples = sum(len(kind_samples) for kind_samples in PROBE_KINDS.values())
    entry = {"folder": FOLDER, "keras_hub": measured["keras_hub"], "keras": measured["keras"],
             **layout, "embedder": dense is None,
             "id_mismatch": {"probe": NATURAL_PROBE if probe_texts is None else probe_name,
                             **_counts(len(texts), len(differing)),
                             "examples": [texts[i][:40] for i in differing[:3]]},
             "kind_mismatch": _counts(samples, measured["differing_samples"]),
             "differing_kinds": measured["differing_kinds"],
             "agreeing_kinds": [kind for kind in PROBE_KINDS
                                if kind not in measured["differing_kinds"]]}
    with open(os.path.join(out_folder, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(["# Sentence encoder exported by cmlm_tf, as a KerasHub preset", "",
                           *card_lines(entry), ""]))
    return entry


def _counts(texts: int, differing: int) -> dict:
    return {"texts": texts, "differing": differing, "share": differing / texts if texts else 0.0}


def _child_env() -> dict:
    """The child's environment: Keras 3 on TensorFlow, and this package importable."""
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    env.pop("TF_USE_LEGACY_KERAS", None)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def _last_line(stderr: str) -> str:
    """The child's last line of its own on stderr (TensorFlow's C++ log lines skipped)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()
             and tf_logs.cpp_log_severity(line.encode()) is None]
    return lines[-1] if lines else "the child process ended without a message"


def pooling_lines(entry: dict) -> list:
    """The Python lines that turn `hidden` (the backbone's `sequence_output`, NumPy [batch,
    sequence, width]) and `mask` (the preprocessor's `padding_mask`, float [batch, sequence,
    1]) into the model's sentence `vectors`; the projection is read from `preset`."""
    lines = list(_POOLING_LINES[entry["pooling"]])
    if entry.get("dense"):
        lines += [f'projection = np.load(os.path.join(preset, "{entry["dense"]["file"]}"))',
                  'vectors = vectors @ projection["kernel"] + projection["bias"]']
        if entry["dense"]["activation"] != "linear":
            lines.append(f"vectors = {_NUMPY_ACTIVATIONS[entry['dense']['activation']]}")
    if entry["normalize"]:
        lines.append("vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)")
    return lines


def vector_lines(entry: dict) -> list:
    """The model card's lines from the preprocessor's `inputs` and the `backbone` to the
    sentence `vectors`: the backbone's sequence output as `hidden`, the padding mask as
    `mask`, then `pooling_lines`."""
    call = keras_hub_xlmr.HIDDEN if entry["backbone"]["class"] == keras_hub_xlmr.BACKBONE \
        else 'backbone(inputs)["sequence_output"]'
    return [f"hidden = keras.ops.convert_to_numpy({call})",
            'mask = keras.ops.convert_to_numpy(inputs["padding_mask"]).astype("float32")'
            "[:, :, None]", *pooling_lines(entry)]


def card_lines(entry: dict) -> list:
    """The model card's KerasHub section for the metadata `entry` of `write_preset`: how to
    load the preset, the lines that make sentence vectors of the backbone's outputs, and the
    measured shares of texts whose token ids differ from the model's, on natural text and on
    the hard samples of `PROBE_KINDS`, each named."""
    tokenizer, mismatch = entry["tokenizer"], entry["id_mismatch"]
    options = f"lowercase {tokenizer['lowercase']}, strip_accents {tokenizer['strip_accents']}" \
        if "lowercase" in tokenizer else "the model's own SentencePiece model"
    lines = [
        "## KerasHub",
        "",
        f"`{entry['folder']}/` is a KerasHub preset (keras-hub {entry['keras_hub']}, Keras 3 on "
        f"TensorFlow or PyTorch): the backbone `{entry['backbone']['class']}`, the tokenizer "
        f"`{tokenizer['class']}` ({options}) and a preprocessor that packs texts into "
        f"{entry['sequence_length']} tokens. The sentence vector is the backbone's output, "
        "pooled as the model pools it:",
        "",
        "```python",
        "import os",
        "",
        "import keras",
        "import keras_hub",
        "import numpy as np",
        "",
        f'preset = "path/to/{entry["folder"]}"',
        "backbone = keras_hub.models.Backbone.from_preset(preset)",
        "preprocessor = keras_hub.models.TextEmbedderPreprocessor.from_preset(preset)",
        'inputs = preprocessor(["Anne was very happy.", "She felt great joy."])',
        *vector_lines(entry),
        "```",
        "",
    ]
    if entry.get("embedder"):
        lines += ["`keras_hub.models.TextEmbedder.from_preset(preset).predict(texts)` gives the "
                  "same vectors in one call.", ""]
    else:
        lines += ["`keras_hub.models.TextEmbedder` has no Dense projection: use the lines above.",
                  ""]
    notes = entry.get("backbone", {}).get("notes") or []
    if notes:
        lines += [f"In the backbone, {'; '.join(notes)}.", ""]
    kinds = entry["kind_mismatch"]
    summary = "gave the model's token ids on every probe text" if not (
        mismatch["differing"] or kinds["differing"]) else \
        "does not give the model's token ids on every text"
    lines += [f"KerasHub's tokenizer {summary}. On "
              f"natural text, {mismatch['texts']} texts ({mismatch['probe']}), they differed "
              f"on {mismatch['differing']} ({100 * mismatch['share']:.1f}%). On hard samples, "
              f"{kinds['texts']} short texts of the kinds below where the two tokenizers can "
              f"part ways, they differed on {kinds['differing']} "
              f"({100 * kinds['share']:.1f}%)."]
    if entry["differing_kinds"] and "lowercase" not in tokenizer:
        lines.append(f"Texts with these differ: {', '.join(entry['differing_kinds'])}.")
    elif entry["differing_kinds"]:
        folding = "lower-cases by NFKC case folding and " if tokenizer["lowercase"] else ""
        lines.append(f"Texts with these differ: {', '.join(entry['differing_kinds'])} "
                     f"(KerasHub {folding}splits words at format and control characters, "
                     "which BERT's normaliser deletes, but not at non-ASCII spaces).")
    if entry["agreeing_kinds"]:
        lines.append(f"These agree: {', '.join(entry['agreeing_kinds'])}.")
    return lines + [""]


def _tokenizer_ids(preprocessor, texts: list) -> list:
    """The token ids of `texts` through a KerasHub preprocessor, padding dropped."""
    ids = []
    for start in range(0, len(texts), 64):
        packed = preprocessor(texts[start:start + 64])
        token_ids, mask = (np.asarray(packed[key]) for key in ("token_ids", "padding_mask"))
        ids += [row[keep.astype(bool)].tolist() for row, keep in zip(token_ids, mask)]
    return ids


def _build_in_child(request: dict) -> dict:
    """The child's job: the preset written, and its token ids compared with the folder's."""
    # TensorFlow first: its import registers TF-Text's ops (`text_ops`), which must not
    # start in the middle of Keras' own import of TensorFlow.
    importlib.import_module("tensorflow")
    import keras
    import keras_hub
    import tokenizers

    st_folder, out_folder, layout = request["st_folder"], request["out_folder"], \
        request["layout"]
    options = layout["tokenizer"]
    backbone = keras_hub.models.Backbone.from_preset(st_folder)
    if layout["backbone"]["class"] == keras_hub_xlmr.BACKBONE:
        preprocessor, embedder = keras_hub_xlmr.build_preprocessor(keras_hub, st_folder, layout)
    else:
        tokenizer = keras_hub.models.BertTokenizer(
            vocabulary=os.path.join(st_folder, "vocab.txt"), lowercase=options["lowercase"],
            strip_accents=options["strip_accents"], split_on_cjk=options["split_on_cjk"])
        preprocessor = keras_hub.models.BertTextEmbedderPreprocessor(
            tokenizer, sequence_length=layout["sequence_length"])
        embedder = keras_hub.models.BertTextEmbedder
    if layout["dense"] is None:
        embedder(
            backbone, preprocessor, pooling_mode=layout["pooling"],
            normalize=layout["normalize"]).save_to_preset(out_folder)
    else:
        backbone.save_to_preset(out_folder)
        preprocessor.save_to_preset(out_folder)
    reference = tokenizers.Tokenizer.from_file(os.path.join(st_folder, "tokenizer.json"))
    reference.enable_truncation(layout["sequence_length"])

    def differing(texts):
        theirs = [encoding.ids for encoding in reference.encode_batch(texts)]
        return [i for i, (a, b) in enumerate(zip(_tokenizer_ids(preprocessor, texts), theirs))
                if a != b]

    kinds = {kind: len(differing(samples)) for kind, samples in request["kinds"].items()}
    return {"keras_hub": keras_hub.__version__, "keras": keras.__version__,
            "differing": differing(request["texts"]) if request["texts"] else [],
            "differing_samples": sum(kinds.values()),
            "differing_kinds": [kind for kind, count in kinds.items() if count]}


def _main(request_file: str, result_file: str) -> None:
    with open(request_file, encoding="utf-8") as f:
        request = json.load(f)
    result = _build_in_child(request)
    with open(result_file, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    _main(*sys.argv[1:])
