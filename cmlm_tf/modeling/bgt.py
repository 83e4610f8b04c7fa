"""BGT, the Bilingual Generative Transformer (Wieting et al., 2020), and its equations.

A translation pair (x_src, x_tgt) is generated from three latents, each N(0, I) a priori:
z_sem (what the pair means) and one language latent per side (z_src, z_tgt). Inference
networks map sentences to diagonal Gaussian posteriors q = N(mean, exp(log_variance)):

- the semantic encoder, shared by both languages, reads one sentence of the pair;
- one language encoder per side reads that side's sentence.

Each is a `SentenceEncoder` (masked mean pooling, then a linear map to the mean) plus a
linear map from the same pooled vector to the log-variance. The semantic encoder with its
mean head is `checkpoint_items["encoder"]`: exported, its `pooled_output` is the posterior
mean and `default` that mean L2-normalised.

Decoders are one Transformer layer with causal self-attention and no cross-attention. The
latent enters twice, as in the paper's best variant ("Attention + Logit"): concatenated to
the hidden state after self-attention, then a linear layer, residual and LayerNorm; and
concatenated to the final hidden state before the vocabulary projection.

- Reconstruction: x_src is decoded from [z_src ; z_sem], x_tgt from [z_tgt ; z_sem]
  (z_sem alone without language variables). z_sem is inferred from the source sentence in
  even rows of the batch and from the target sentence in odd rows, so the semantic encoder
  sees both languages in every batch (the pipeline shuffles pairs, so which sentence a pair
  contributes alternates from epoch to epoch).
- BILINGUALTRANS: x_tgt is decoded from the source's semantic latent alone, and x_src from the
  target's, by two more decoders.

In training the latents are sampled by reparameterisation (with `stochastic`); otherwise they
are the posterior means, so inference is deterministic.
"""

from typing import Dict

import tensorflow as tf
import tf_keras

from cmlm_tf import configs
from cmlm_tf.losses.gaussian_kl import gaussian_kl
from cmlm_tf.modeling import layers
from cmlm_tf.modeling.sentence_encoder import SentenceEncoder

SIDES = ("source", "target")
RECONSTRUCTION_DECODERS = ("source_reconstruction", "target_reconstruction")
TRANSLATION_DECODERS = ("source_to_target", "target_to_source")


def active_units(means: tf.Tensor, threshold: float = 0.01) -> tf.Tensor:
    """How many latent dimensions have a posterior-mean variance >= `threshold` over the batch.

    Args:
        means: float [batch, latent_dim] posterior means.

    Returns:
        float scalar count.
    """
    variance = tf.math.reduce_variance(means, axis=0)
    return tf.reduce_sum(tf.cast(variance >= threshold, tf.float32))


class GaussianPosterior(tf_keras.Model):
    """An inference network: a `SentenceEncoder` whose projection is the posterior mean.

    Call args:
        inputs: TF Hub input dict (int32 [batch, seq] each).

    Returns:
        dict of float [batch, latent_dim] `mean` and `log_variance`.
    """

    def __init__(self, encoder_config: configs.EncoderConfig, **kwargs):
        super().__init__(**kwargs)
        self.encoder = SentenceEncoder(encoder_config, name="encoder").build_variables()
        self.pooler = layers.SequencePooling("mean", name="pooling")
        self.log_variance = tf_keras.layers.Dense(
            encoder_config.projection_size, name="log_variance",
            kernel_initializer=tf_keras.initializers.TruncatedNormal(
                stddev=encoder_config.initializer_range))

    def call(self, inputs, training=None):
        outputs = self.encoder(inputs, training=training)
        # The encoder returns only the projected mean; the log-variance head reads the same
        # masked mean of the token vectors.
        pooled = self.pooler(outputs["sequence_output"], inputs["input_mask"])
        return {"mean": outputs["pooled_output"], "log_variance": self.log_variance(pooled)}


@tf_keras.utils.register_keras_serializable(package="cmlm_tf")
class LatentDecoder(tf_keras.layers.Layer):
    """One Transformer decoder layer conditioned on a latent vector ("Attention + Logit").

    embeddings -> causal self-attention (+ residual, LayerNorm) -> [h ; z] -> linear
    (+ residual, LayerNorm) -> feed-forward (+ residual, LayerNorm) -> [h ; z] -> logits.

    Args:
        vocab_size, hidden_size, num_attention_heads, intermediate_size: layer sizes.
        max_length: number of position embeddings.
        dropout_rate: dropout on embeddings, attention weights and every residual branch.
        activation: feed-forward activation name (`cmlm_tf.modeling.layers.get_activation`).
        initializer_range: stddev of the truncated-normal initialisers.

    Call args:
        token_ids: int32 [batch, length], the decoder input (the target shifted right).
        mask: int32 [batch, length]; 1 for real tokens.
        latent: float [batch, latent_dim].

    Returns:
        float [batch, length, vocab_size] next-token logits.
    """

    def __init__(self, vocab_size: int, hidden_size: int, num_attention_heads: int,
                 intermediate_size: int, *, max_length: int, dropout_rate: float = 0.1,
                 activation: str = "gelu_exact", initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self._config = dict(vocab_size=vocab_size, hidden_size=hidden_size,
                            num_attention_heads=num_attention_heads,
                            intermediate_size=intermediate_size, max_length=max_length,
                            dropout_rate=dropout_rate, activation=activation,
                            initializer_range=initializer_range)

        def init():
            return tf_keras.initializers.TruncatedNormal(stddev=initializer_range)

        self.word_embeddings = tf_keras.layers.Embedding(
            vocab_size, hidden_size, embeddings_initializer=init(), name="word_embeddings")
        self.position_embeddings = tf_keras.layers.Embedding(
            max_length, hidden_size, embeddings_initializer=init(),
            name="position_embeddings")
        self.embedding_norm = tf_keras.layers.LayerNormalization(
            epsilon=1e-12, name="embedding_norm")
        self.self_attention = tf_keras.layers.MultiHeadAttention(
            num_attention_heads, hidden_size // num_attention_heads, dropout=dropout_rate,
            kernel_initializer=init(), name="self_attention")
        self.attention_norm = tf_keras.layers.LayerNormalization(
            epsilon=1e-12, name="attention_norm")
        self.latent_projection = tf_keras.layers.Dense(
            hidden_size, kernel_initializer=init(), name="latent_projection")
        self.latent_norm = tf_keras.layers.LayerNormalization(epsilon=1e-12, name="latent_norm")
        self.intermediate = tf_keras.layers.Dense(
            intermediate_size, activation=layers.get_activation(activation),
            kernel_initializer=init(), name="intermediate")
        self.feed_forward_output = tf_keras.layers.Dense(
            hidden_size, kernel_initializer=init(), name="feed_forward_output")
        self.feed_forward_norm = tf_keras.layers.LayerNormalization(
            epsilon=1e-12, name="feed_forward_norm")
        self.dropout = tf_keras.layers.Dropout(dropout_rate)
        self.logits = tf_keras.layers.Dense(vocab_size, kernel_initializer=init(),
                                            name="logits")

    def get_config(self):
        return {**super().get_config(), **self._config}

    def call(self, token_ids, mask, latent, training=None):
        length = tf.shape(token_ids)[1]
        hidden = self.word_embeddings(token_ids) + self.position_embeddings(tf.range(length))
        hidden = self.embedding_norm(self.dropout(hidden, training=training))
        causal = tf.linalg.band_part(tf.ones([length, length], tf.bool), -1, 0)
        keys = tf.cast(mask, tf.bool)[:, tf.newaxis, :]
        attended = self.self_attention(hidden, hidden, attention_mask=causal & keys,
                                       training=training)
        hidden = self.attention_norm(hidden + self.dropout(attended, training=training))
        latent = tf.tile(latent[:, tf.newaxis, :], [1, length, 1])
        context = self.latent_projection(tf.concat([hidden, latent], axis=-1))
        hidden = self.latent_norm(hidden + self.dropout(context, training=training))
        inner = self.feed_forward_output(self.intermediate(hidden))
        hidden = self.feed_forward_norm(hidden + self.dropout(inner, training=training))
        return self.logits(tf.concat([hidden, latent], axis=-1))


class BilingualGenerativeTransformer(tf_keras.Model):
    """BGT: inference networks, latent-conditioned decoders, and what the losses need.

    Args:
        encoder_config: every encoder's shape; `projection_size` is the latent size and
            `pooling` must be `mean`. Decoders use its hidden size, heads, feed-forward
            size, activation, dropout and `max_position_embeddings`.
        language_variables: infer z_src, z_tgt and decode reconstructions from
            [z_lang ; z_sem]; without, from z_sem alone.
        reconstruction: decode each sentence from its latents (the generative model).
        translation: the BILINGUALTRANS decoders (each side's translation from that side's
            semantic latent alone).
        stochastic: sample latents by reparameterisation in training; without (the
            no-prior ablation), latents are always the posterior means.

    Call args:
        inputs: dict from `cmlm_tf.data.bitext.BitextFeaturizer`: `source` and `target` TF
            Hub input dicts (int32 [batch, seq], `[CLS] pieces [SEP]` padded).
        training: dropout and sampling on or off.

    Returns:
        dict with
        - `semantic`: {`source`, `target`} -> {`mean`, `log_variance`} float [batch, latent];
        - `language`: the same for the language posteriors (with language variables);
        - `semantic_from_source`: bool [batch], which sentence z_sem was inferred from for
          the reconstructions;
        - `kl`: float [batch] per posterior that produced a latent a decoder used, KL to
          N(0, I) (`semantic_source`, `semantic_target`, `language_source`, ...);
        - `decoders`: name -> {`logits` float [batch, seq-1, vocab], `targets` int32
          [batch, seq-1], `weights` float [batch, seq-1]}; names in
          `RECONSTRUCTION_DECODERS` and `TRANSLATION_DECODERS`. A decoder's targets are its
          own language's sentence: `source_*`/`*_to_source` predict `inputs["source"]`.
    """

    def __init__(self, encoder_config: configs.EncoderConfig, *, language_variables: bool = True,
                 reconstruction: bool = True, translation: bool = True,
                 stochastic: bool = True, **kwargs):
        super().__init__(**kwargs)
        if encoder_config.pooling != "mean" or encoder_config.projection_size <= 0:
            raise ValueError(
                "BGT needs task.model.encoder.pooling: mean and task.model.encoder."
                "projection_size > 0 (the latent size), got "
                f"{encoder_config.pooling!r} and {encoder_config.projection_size}")
        if not (reconstruction or translation):
            raise ValueError("BGT needs reconstruction, translation or both")
        self.encoder_config = encoder_config
        self.language_variables = language_variables and reconstruction
        self.reconstruction = reconstruction
        self.translation = translation
        self.stochastic = stochastic
        self.semantic = GaussianPosterior(encoder_config, name="semantic")
        self.languages = {}
        if self.language_variables:
            self.languages = {side: GaussianPosterior(encoder_config, name=f"{side}_language")
                              for side in SIDES}
        names = (RECONSTRUCTION_DECODERS if reconstruction else ()) + (
            TRANSLATION_DECODERS if translation else ())
        self.decoders = {name: LatentDecoder(
            vocab_size=encoder_config.vocab_size, hidden_size=encoder_config.hidden_size,
            num_attention_heads=encoder_config.num_attention_heads,
            intermediate_size=encoder_config.intermediate_size,
            max_length=encoder_config.max_position_embeddings,
            dropout_rate=encoder_config.dropout_rate,
            activation=encoder_config.hidden_activation,
            initializer_range=encoder_config.initializer_range, name=name)
            for name in names}

    @property
    def checkpoint_items(self) -> Dict[str, tf.Module]:
        items = {"encoder": self.semantic.encoder,
                 "semantic_log_variance": self.semantic.log_variance}
        for side, posterior in self.languages.items():
            items[f"{side}_language"] = posterior
        for name, decoder in self.decoders.items():
            items[f"{name}_decoder"] = decoder
        return items

    def _latent(self, posterior: Dict[str, tf.Tensor], training) -> tf.Tensor:
        mean = posterior["mean"]
        if not (training and self.stochastic):
            return mean
        noise = tf.random.normal(tf.shape(mean), dtype=mean.dtype)
        return mean + tf.exp(0.5 * posterior["log_variance"]) * noise

    def _decode(self, name: str, sentence: Dict[str, tf.Tensor], latent: tf.Tensor,
                training) -> Dict[str, tf.Tensor]:
        """Teacher forcing: reads `[CLS] x_1..x_n`, predicts `x_1..x_n [SEP]`."""
        ids, mask = sentence["input_word_ids"], sentence["input_mask"]
        logits = self.decoders[name](ids[:, :-1], mask[:, :-1], latent, training=training)
        return {"logits": logits, "targets": ids[:, 1:],
                "weights": tf.cast(mask[:, 1:], logits.dtype)}

    def call(self, inputs, training=None):
        source, target = inputs["source"], inputs["target"]
        batch_size = tf.shape(source["input_word_ids"])[0]
        both = {key: tf.concat([source[key], target[key]], axis=0) for key in source}
        halves = {key: tf.split(value, 2, axis=0)
                  for key, value in self.semantic(both, training=training).items()}
        semantic = {side: {key: parts[index] for key, parts in halves.items()}
                    for index, side in enumerate(SIDES)}
        semantic_latents = {side: self._latent(semantic[side], training) for side in SIDES}
        semantic_from_source = tf.equal(tf.range(batch_size) % 2, 0)
        kl_used = {"source": tf.zeros([batch_size], tf.bool),
                   "target": tf.zeros([batch_size], tf.bool)}
        outputs = {"semantic": semantic, "semantic_from_source": semantic_from_source,
                   "decoders": {}, "kl": {}}
        sentences = {"source": source, "target": target}

        if self.reconstruction:
            z_semantic = tf.where(semantic_from_source[:, tf.newaxis],
                                  semantic_latents["source"], semantic_latents["target"])
            kl_used = {"source": semantic_from_source,
                       "target": tf.logical_not(semantic_from_source)}
            if self.language_variables:
                outputs["language"] = {}
            for side, name in zip(SIDES, RECONSTRUCTION_DECODERS):
                latent = z_semantic
                if self.language_variables:
                    posterior = self.languages[side](sentences[side], training=training)
                    outputs["language"][side] = posterior
                    outputs["kl"][f"language_{side}"] = gaussian_kl(**posterior)
                    latent = tf.concat([self._latent(posterior, training), z_semantic], -1)
                outputs["decoders"][name] = self._decode(name, sentences[side], latent,
                                                         training)
        if self.translation:
            kl_used = {side: tf.ones([batch_size], tf.bool) for side in SIDES}
            for (origin, destination), name in zip((SIDES, SIDES[::-1]),
                                                   TRANSLATION_DECODERS):
                outputs["decoders"][name] = self._decode(
                    name, sentences[destination], semantic_latents[origin], training)
        for side in SIDES:
            outputs["kl"][f"semantic_{side}"] = gaussian_kl(**semantic[side]) * tf.cast(
                kl_used[side], tf.float32)
        return outputs

    def encode(self, inputs: Dict[str, tf.Tensor]) -> tf.Tensor:
        """The sentence embedding: the semantic posterior mean, float [batch, latent_dim]."""
        return self.semantic.encoder(inputs, training=False)["pooled_output"]


def build_bgt(encoder_config: configs.EncoderConfig, **kwargs) -> BilingualGenerativeTransformer:
    """Builds BGT and creates its variables with one tiny batch."""
    configs.validate_model_config(configs.SentenceModelConfig(encoder=encoder_config))
    model = BilingualGenerativeTransformer(encoder_config, **kwargs)
    ones = tf.ones([2, 3], tf.int32)
    sentence = {"input_word_ids": ones, "input_mask": ones, "input_type_ids": ones * 0}
    model({"source": sentence, "target": sentence}, training=False)
    return model
