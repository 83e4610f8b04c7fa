"""NLI pair classification on the shared sentence encoder.

Premise and hypothesis are embedded independently by the same encoder (u and v, the encoder's
`pooled_output`), and a head classifies the feature vector [u, v, |u − v|, u ∗ v] into
entailment / neutral / contradiction. The CMLM paper (§4.3) uses a linear classifier; dual
momentum contrast (appendix B) a 2-layer MLP (256 hidden, ReLU, dropout 0.1). The encoder is
trained through the head.
"""

import dataclasses
from typing import Dict, List, Sequence

import tensorflow as tf
import tf_keras
from official.modeling import hyperparams

from cmlm_tf import configs
from cmlm_tf.modeling import dual_encoder
from cmlm_tf.modeling.sentence_encoder import SentenceEncoder

NLI_LABELS = ("entailment", "neutral", "contradiction")
PAIR_SIDES = ("premise", "hypothesis")


def pair_features(u: tf.Tensor, v: tf.Tensor) -> tf.Tensor:
    """[u, v, |u − v|, u ∗ v]: float [batch, 4 · dim] from two float [batch, dim]."""
    return tf.concat([u, v, tf.abs(u - v), u * v], axis=-1)


@tf_keras.utils.register_keras_serializable(package="cmlm_tf")
class PairClassifierHead(tf_keras.layers.Layer):
    """Classifies a sentence pair from its two embeddings.

    Args:
        num_classes: output classes (3 for NLI, in the order of `NLI_LABELS`).
        hidden_sizes: widths of the hidden layers before the output layer; empty for a
            linear classifier (CMLM), `[256]` for dual momentum contrast's MLP.
        activation: activation of the hidden layers.
        dropout_rate: dropout after each hidden layer (training only).

    Call args:
        u, v: float [batch, dim], the premise and hypothesis embeddings.

    Returns:
        float32 logits [batch, num_classes].
    """

    def __init__(self, *, num_classes: int = 3, hidden_sizes: Sequence[int] = (),
                 activation: str = "relu", dropout_rate: float = 0.1,
                 initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        if num_classes < 2:
            raise ValueError(f"num_classes must be at least 2, got {num_classes}")
        if any(size <= 0 for size in hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive, got {list(hidden_sizes)}")
        self.num_classes = num_classes
        self.hidden_sizes = [int(size) for size in hidden_sizes]
        self.activation = activation
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        def initializer():
            return tf_keras.initializers.TruncatedNormal(stddev=initializer_range)

        self.hidden_layers = [
            tf_keras.layers.Dense(size, activation=activation,
                                  kernel_initializer=initializer(), name=f"hidden_{index}")
            for index, size in enumerate(self.hidden_sizes)]
        self.dropout = tf_keras.layers.Dropout(dropout_rate)
        self.output_layer = tf_keras.layers.Dense(num_classes, kernel_initializer=initializer(),
                                                  dtype=tf.float32, name="logits")

    def call(self, u, v, training=None):
        features = pair_features(u, v)
        for layer in self.hidden_layers:
            features = self.dropout(layer(features), training=training)
        return self.output_layer(features)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes,
                "hidden_sizes": self.hidden_sizes, "activation": self.activation,
                "dropout_rate": self.dropout_rate,
                "initializer_range": self.initializer_range}


@dataclasses.dataclass
class NLIHeadConfig(hyperparams.Config):
    """The pair head on [u, v, |u − v|, u ∗ v].

    `hidden_sizes`: hidden layer widths; empty for a linear classifier (CMLM), `[256]` for the
        MLP of dual momentum contrast.
    """

    hidden_sizes: List[int] = dataclasses.field(default_factory=list)
    activation: str = "relu"
    dropout_rate: float = 0.1


def build_head(config: NLIHeadConfig, initializer_range: float = 0.02,
               field: str = "task.nli_head") -> PairClassifierHead:
    """The NLI head of `config` (at `field` in the experiment), checked first."""
    if any(size <= 0 for size in config.hidden_sizes):
        raise ValueError(f"{field}.hidden_sizes must be positive, got "
                         f"{list(config.hidden_sizes)}")
    if not 0.0 <= config.dropout_rate < 1.0:
        raise ValueError(f"{field}.dropout_rate must be in [0, 1), got {config.dropout_rate}")
    return PairClassifierHead(
        num_classes=len(NLI_LABELS), hidden_sizes=config.hidden_sizes,
        activation=config.activation, dropout_rate=config.dropout_rate,
        initializer_range=initializer_range, name="nli_head")


def classify_pairs(encoder: tf_keras.Model, head: PairClassifierHead, features: Dict,
                   training=None) -> tf.Tensor:
    """Logits [batch, classes] for `features["premise"]` / `features["hypothesis"]`.

    Both sides go through `encoder` in one call (`dual_encoder.encode_pairs`).
    """
    pooled = dual_encoder.encode_pairs(encoder, features, training=training, keys=PAIR_SIDES)
    return head(pooled["premise"], pooled["hypothesis"], training=training)


class PairClassifier(tf_keras.Model):
    """A sentence encoder with a pair-classification head (the `cmlm_tf/nli` model).

    Call args:
        inputs: dict from `cmlm_tf.data.nli.NLIFeaturizer`: `premise`, `hypothesis` (TF Hub
            input dicts, int32 [batch, seq]); other keys are ignored.

    Returns:
        dict with `logits`: float32 [batch, num_classes].
    """

    def __init__(self, encoder_config: configs.EncoderConfig, head: PairClassifierHead,
                 **kwargs):
        super().__init__(**kwargs)
        self.encoder = SentenceEncoder(encoder_config).build_variables()
        self.nli_head = head

    @property
    def checkpoint_items(self):
        return {"encoder": self.encoder, "nli_head": self.nli_head}

    def call(self, inputs, training=None):
        return {"logits": classify_pairs(self.encoder, self.nli_head, inputs, training)}
