"""A TF Hub BERT text encoder (Model Garden's `export_tfhub_lib` layout, as LaBSE v2,
universal-sentence-encoder-cmlm and the BERT encoders of tfhub.dev/Kaggle Models are
published), with its vocabulary (`assets/vocab.txt`) and `do_lower_case`.

The weights are read by Model Garden's variable names and the shape of the network from
them; the activation and LayerNorm epsilon are found by running the encoder and the
converted one on the same ids, and the import is refused if no candidate reproduces it.
"""

import numpy as np
import tensorflow as tf

from cmlm_tf.model_import import hf_folder, pooled_bert

# What a TF Hub encoder may have been built with, tried in this order.
_HUB_ACTIVATIONS = ("gelu_approx", "gelu_exact", "relu")
_HUB_EPSILONS = (1e-12, 1e-6, 1e-5)
_MATCH_TOLERANCE = 1e-4


def read_hub(folder: str):
    """A TF Hub BERT encoder: weights by Model Garden's variable names, the shape of the
    network from the weights, the activation and epsilon from running it."""
    try:
        loaded = tf.saved_model.load(folder)
    except (tf.errors.OpError, ValueError, OSError) as e:
        raise ValueError(f"{folder}: cannot load the SavedModel "
                         f"({str(e).strip().splitlines()[0][:200]})") from None
    named, pooler = pooled_bert.split_pooler(pooled_bert.model_garden_names(loaded.variables))
    if "word_embeddings/embeddings" not in named:
        raise ValueError(f"{folder}: no word_embeddings/embeddings variable: not a Model "
                         "Garden BERT encoder")
    vocab_asset = getattr(loaded, "vocab_file", None)
    if vocab_asset is None:
        raise ValueError(f"{folder}: the encoder has no vocab_file (a SentencePiece or "
                         "preprocessor-only tokenizer is not supported)")
    vocab = hf_folder.read_vocab_file(vocab_asset.asset_path.numpy().decode("utf-8"))
    lower_case = bool(loaded.do_lower_case.numpy()) if hasattr(loaded, "do_lower_case") \
        else pooled_bert.is_uncased(vocab)
    vocab_size, hidden = named["word_embeddings/embeddings"].shape
    num_layers = len({key.split("/")[1] for key in named if key.startswith("transformer/")})
    query = named.get("transformer/layer_0/self_attention/query/kernel")
    intermediate = named.get("transformer/layer_0/intermediate/kernel")
    if query is None or intermediate is None or query.ndim != 3:
        raise ValueError(f"{folder}: no transformer/layer_0 attention and feed-forward "
                         "weights of Model Garden's layout")
    base = dict(vocab_size=int(vocab_size), hidden_size=int(hidden), num_layers=num_layers,
                num_attention_heads=int(query.shape[1]),
                intermediate_size=int(intermediate.shape[1]),
                max_position_embeddings=int(named["position_embedding/embeddings"].shape[0]),
                type_vocab_size=int(named["type_embeddings/embeddings"].shape[0]))
    if len(vocab) != base["vocab_size"]:
        raise ValueError(f"{folder}: the vocabulary has {len(vocab)} tokens, the embeddings "
                         f"{base['vocab_size']}")
    inputs = _probe_inputs(base["vocab_size"], base["type_vocab_size"])
    expected = loaded(inputs, training=False)["pooled_output"].numpy()
    tried = []
    for activation in _HUB_ACTIVATIONS:
        for epsilon in _HUB_EPSILONS:
            fields = pooled_bert.encoder_fields(hidden_activation=activation,
                                                 layer_norm_epsilon=epsilon, **base)
            encoder = pooled_bert.build_pooled_encoder(fields, dict(named), dict(pooler), folder)
            got = encoder(inputs, training=False)["pooled_output"].numpy()
            error = float(np.abs(got - expected).max())
            if error < _MATCH_TOLERANCE:
                return encoder, pooled_bert.import_meta(fields, lower_case=lower_case), vocab
            tried.append(f"{activation}/{epsilon:g}: {error:.2g}")
    raise ValueError(f"{folder}: no activation and LayerNorm epsilon reproduce the encoder's "
                     f"pooled_output (largest difference {'; '.join(tried)})")


def _probe_inputs(vocab_size: int, type_vocab_size: int) -> dict:
    """Two rows of 24 ids (the second padded after 15) covering the vocabulary's range."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab_size, size=(2, 24)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 15:] = 0
    types = np.zeros_like(ids)
    types[0, 12:] = type_vocab_size - 1
    return {"input_word_ids": tf.constant(ids), "input_mask": tf.constant(mask),
            "input_type_ids": tf.constant(types)}
