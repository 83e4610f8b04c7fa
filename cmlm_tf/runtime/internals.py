"""The one module that reads or writes private attributes of TensorFlow, Keras, Orbit and
Model Garden, where their public APIs have no equivalent: small named functions and base
classes with public names that the rest of cmlm_tf calls, the list of what they touch
(`USED`), and a check that the installed versions still have it.

A new release may rename any of these without notice. `missing()` says which are gone, each
with what in cmlm_tf needs it; `tests/runtime/test_internals.py` runs it, so an upgrade that breaks
one fails there with that message, not deep in a training run.
"""

import ast
import contextlib
import functools
import importlib
import inspect
import textwrap
from typing import Dict, List, NamedTuple, Tuple

import tensorflow as tf
from official.core import train_lib
from orbit import controller
from tensorflow.core.protobuf import config_pb2, meta_graph_pb2
from tensorflow.python.checkpoint import checkpoint_management
from tensorflow.python.framework import convert_to_constants
from tensorflow.python.grappler import tf_optimizer
from tensorflow.python.ops import control_flow_util


class Internal(NamedTuple):
    module: str
    owner: str  # a class of `module`, or "" for the module itself
    names: Tuple[str, ...]
    used_by: str


USED = (
    Internal("orbit.standard_runner", "StandardTrainer", ("_train_loop_fn", "_train_iter"),
             "build_train_loop, run_train_loop (chunked_trainer.ChunkedTrainer: the loop in "
             "chunks) and take_train_input (runner.Runner: the input freed in the "
             "background)"),
    Internal("orbit", "", ("controller",),
             "orbit_log_functions (the module whose log functions it replaces)"),
    Internal("orbit.controller", "", ("_log", "_format_output"),
             "orbit_log_functions (runner.orbit_logs_once: Orbit's metric lines, logged "
             "once, as numbers)"),
    Internal("tensorflow.python.checkpoint.checkpoint_management", "CheckpointManager",
             ("_latest_checkpoint", "_init_fn", "_checkpoint", "_checkpoint_interval",
              "_last_checkpoint_step", "_step_counter", "_checkpoint_prefix",
              "_max_to_keep"),
             "CheckpointManagerBase and max_to_keep (checkpoint_manager.CheckpointManager: "
             "one restore line, saves that defer Ctrl-C)"),
    Internal("official.core.train_lib", "OrbitExperimentRunner",
             ("_maybe_build_checkpoint_manager", "_mode"),
             "RunnerBase (runner.Runner: its checkpoint manager; the --mode it runs)"),
    Internal("tf_keras.src.optimizers.legacy.optimizer_v2", "OptimizerV2",
             ("_create_all_weights",),
             "create_optimizer_slots (chunked_trainer.ChunkedTrainer: the train loop "
             "traced once)"),
    Internal("tf_keras.src.layers.regularization.dropout", "Dropout", ("_random_generator",),
             "random_generator, set_random_generator (seeded_dropout: replayable masks)"),
    Internal("tf_keras.src.layers.attention.multi_head_attention", "MultiHeadAttention",
             ("_dropout", "_key_dim", "_dot_product_equation", "_combine_equation",
              "_masked_softmax", "_dropout_layer", "_compute_attention", "_query_dense",
              "_key_dense", "_value_dense", "_output_dense"),
             "attention_core, replace_compute_attention (recompute: the lean attention "
             "core) and attention_projections (serving_forward: the inference forward)"),
    Internal("official.nlp.modeling.layers.transformer_encoder_block",
             "TransformerEncoderBlock",
             ("_intermediate_activation_layer", "_attention_layer", "_attention_layer_norm",
              "_intermediate_dense", "_output_dense", "_output_layer_norm", "_norm_first"),
             "intermediate_activation_layer (recompute: the lean activation) and "
             "encoder_block_parts (serving_forward: the inference forward)"),
    Internal("official.nlp.modeling.networks.bert_encoder", "BertEncoderV2",
             ("_embedding_projection", "_transformer_layers", "_embedding_layer",
              "_position_embedding_layer", "_type_embedding_layer", "_embedding_norm_layer"),
             "bert_encoder_parts (serving_forward: the inference forward)"),
    Internal("tensorflow.python.grappler.tf_optimizer", "", ("OptimizeGraph",),
             "optimized_op_counts (tests/export/test_serving_forward.py: the fused ops of the "
             "inference forward)"),
    Internal("tensorflow.python.framework.convert_to_constants", "",
             ("convert_variables_to_constants_v2",),
             "optimized_op_counts (the forward's variables frozen, as grappler folds them)"),
    Internal("official.nlp.modeling.layers.position_embedding", "PositionEmbedding",
             ("_position_embeddings",),
             "bert_encoder_parts (serving_forward: the inference forward)"),
    Internal("tensorflow.python.ops.control_flow_util", "", ("GraphOrParentsInXlaContext",),
             "in_xla_context (recompute.compiled: the lean layers act under XLA only)"),
    Internal("tensorflow.python.checkpoint.checkpoint_management", "",
             ("update_checkpoint_state_internal",), "write_checkpoint_state (run_checkpoints)"),
)


# Orbit's trainer, Model Garden's runner and TensorFlow's checkpoint manager.


def create_optimizer_slots(optimizer, variables) -> None:
    """Creates `optimizer`'s slot variables for `variables` now, as its first
    `apply_gradients` would (Keras' legacy optimizers, Model Garden's, in
    `_create_all_weights`; the newer ones in `build`)."""
    if hasattr(optimizer, "_create_all_weights"):
        optimizer._create_all_weights(variables)
    else:
        optimizer.build(variables)


def build_train_loop(trainer, before_first_trace) -> None:
    """Builds what Orbit's `StandardTrainer.train` builds on its first call: the loop
    function (after calling `before_first_trace()`) and the iterators of the training
    input."""
    if trainer._train_loop_fn is None:
        before_first_trace()
        trainer._train_loop_fn = trainer.create_train_loop_fn()
    if trainer._train_iter is None:
        trainer._train_iter = tf.nest.map_structure(iter, trainer.train_dataset)


def run_train_loop(trainer, steps: int) -> None:
    """Runs `steps` steps of the loop `build_train_loop` built, on its input."""
    trainer._train_loop_fn(trainer._train_iter, tf.constant(steps, tf.int32))


def take_train_input(trainer) -> list:
    """A list holding the trainer's training input iterator, which the trainer no longer
    holds (the list is then the only reference), or [] when it has none."""
    if getattr(trainer, "_train_iter", None) is None:
        return []
    box = [trainer._train_iter]
    trainer._train_iter = None
    return box


class CheckpointManagerBase(tf.train.CheckpointManager):
    """`tf.train.CheckpointManager` with public names for what a subclass's own restore and
    save need."""

    @property
    def recorded_latest(self):
        """The latest checkpoint the manager knows of (None before any)."""
        return self._latest_checkpoint

    @property
    def step(self) -> int:
        return int(self._step_counter.numpy())

    @property
    def prefix(self) -> str:
        return self._checkpoint_prefix

    def run_init_fn(self) -> None:
        """The `init_fn` given to the manager, if any (a warm start)."""
        if self._init_fn is not None:
            self._init_fn()

    def restore_checkpoint(self, path: str) -> None:
        """Restores `path` without reporting unused values, and counts the save interval
        from its step, as `restore_or_initialize` does."""
        self._checkpoint.restore(path).expect_partial()
        if self._checkpoint_interval is not None:
            self._last_checkpoint_step = self.step


def max_to_keep(manager) -> int:
    """How many checkpoints a `tf.train.CheckpointManager` keeps."""
    return manager._max_to_keep


def write_checkpoint_state(save_dir: str, paths: List[str], timestamps, preserved) -> None:
    """Lists `paths` (the latest last) in `save_dir/checkpoint`, relative, by TensorFlow's
    private `update_checkpoint_state_internal`: its public writer records absolute paths."""
    checkpoint_management.update_checkpoint_state_internal(
        save_dir, paths[-1], paths, save_relative_paths=True,
        all_model_checkpoint_timestamps=timestamps, last_preserved_timestamp=preserved)


class RunnerBase(train_lib.OrbitExperimentRunner):
    """Model Garden's `OrbitExperimentRunner` with public names: `mode` (train, eval or
    train_and_eval) and `replace_checkpoint_manager(manager)`, which a subclass overrides to
    return its own manager in place of the one Model Garden builds (None: none)."""

    def _maybe_build_checkpoint_manager(self):
        return self.replace_checkpoint_manager(super()._maybe_build_checkpoint_manager())

    def replace_checkpoint_manager(self, manager):
        return manager

    @property
    def mode(self) -> str:
        return self._mode


@contextlib.contextmanager
def orbit_log_functions(log, format_output):
    """Inside the block, Orbit's controller logs its lines with `log(message)` and formats
    its metrics with `format_output(output, indent=4)`; what it did before is restored
    after."""
    saved = controller._log, controller._format_output
    controller._log, controller._format_output = log, format_output
    try:
        yield
    finally:
        controller._log, controller._format_output = saved


def _has(internal: Internal, name: str) -> bool:
    module = importlib.import_module(internal.module)
    if not internal.owner:
        return hasattr(module, name) or importlib.util.find_spec(
            f"{internal.module}.{name}") is not None
    owner = getattr(module, internal.owner, None)
    if owner is None:
        return False
    if hasattr(owner, name):
        return True
    # An instance attribute: assigned in the class's own code or a base class's.
    return any(name in _assigned_to_self(cls) for cls in owner.__mro__
               if cls is not object and cls.__module__.split(".")[0] != "builtins")


@functools.cache
def _assigned_to_self(cls) -> frozenset:
    """The names `x` of every `self.x` that `cls`'s own code assigns, augments or annotates,
    also as one of several targets (`self.x, self.y = ...`)."""
    targets = []
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(cls)))):
        if isinstance(node, ast.Assign):
            targets.extend(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets.append(node.target)
    names = set()
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "self":
                names.add(node.attr)
    return frozenset(names)


def missing(used=USED) -> List[str]:
    """One line per private attribute the installed libraries no longer have."""
    lines = []
    for internal in used:
        where = f"{internal.module}.{internal.owner}" if internal.owner else internal.module
        try:
            absent = [name for name in internal.names if not _has(internal, name)]
        except ImportError as error:
            lines.append(f"{internal.module}: cannot import ({error}); used by "
                         f"{internal.used_by}")
            continue
        if absent:
            lines.append(f"{where} no longer has {', '.join(absent)}; used by "
                         f"{internal.used_by}")
    return lines


# Keras and Model Garden layers.


def random_generator(layer):
    """The random source a Keras `Dropout` layer draws its masks from (its `dropout(inputs,
    rate, noise_shape)` makes them), or None where `layer` has none."""
    return getattr(layer, "_random_generator", None)


def set_random_generator(layer, source) -> None:
    """Makes `source` the random source of the Keras `Dropout` layer `layer`, untracked."""
    set_untracked(layer, "_random_generator", source)


def set_untracked(layer, name: str, value) -> None:
    """Sets `layer.name` past Keras' tracking (`object.__setattr__`): checkpoints unchanged."""
    object.__setattr__(layer, name, value)


def sentencepiece_model(tokenizer):
    """The private `_model_serialized_proto` of Model Garden's `SentencepieceTokenizer`, or None."""
    return getattr(tokenizer, "_model_serialized_proto", None)


class AttentionCore(NamedTuple):
    """What a built `tf_keras.layers.MultiHeadAttention` computes its core with (scores,
    masked softmax, attention dropout, weighted sum of the values)."""

    dropout_rate: float
    key_dim: int
    dot_product_equation: str  # einsum of key and query: the scores
    combine_equation: str  # einsum of probabilities and value: the output
    masked_softmax: object  # masked_softmax(scores, attention_mask) -> probabilities
    dropout_layer: object  # the Dropout layer applied to the probabilities


def attention_core(layer) -> AttentionCore:
    """The core of the built `tf_keras.layers.MultiHeadAttention` `layer`."""
    return AttentionCore(float(layer._dropout), int(layer._key_dim),
                         layer._dot_product_equation, layer._combine_equation,
                         layer._masked_softmax, layer._dropout_layer)


def replace_compute_attention(layer, wrap) -> None:
    """`layer` (a `tf_keras.layers.MultiHeadAttention`) computes its core with
    `wrap(original)` from now on, where `original(query, key, value, attention_mask=None,
    training=None)` is its own, returning (output, probabilities); untracked."""
    set_untracked(layer, "_compute_attention", wrap(layer._compute_attention))


class AttentionProjections(NamedTuple):
    """The `EinsumDense` layers of a built `tf_keras.layers.MultiHeadAttention`: kernels
    query/key/value [width, heads, head_dim], output [heads, head_dim, width]."""

    query: object
    key: object
    value: object
    output: object


def attention_projections(layer) -> AttentionProjections:
    return AttentionProjections(layer._query_dense, layer._key_dense, layer._value_dense,
                                layer._output_dense)


def intermediate_activation_layer(block):
    """The `Activation` layer between the feed-forward products of Model Garden's
    `TransformerEncoderBlock` `block`, or None before the block is built."""
    return getattr(block, "_intermediate_activation_layer", None)


class EncoderBlockParts(NamedTuple):
    """The sublayers of a built Model Garden `TransformerEncoderBlock`."""

    attention: object  # tf_keras.layers.MultiHeadAttention
    attention_norm: object  # LayerNormalization after (or before) the attention
    intermediate_dense: object  # EinsumDense, the first feed-forward product
    output_dense: object  # EinsumDense, the second feed-forward product
    output_norm: object  # LayerNormalization after (or before) the feed-forward layer
    norm_first: bool  # pre-norm (True) or post-norm (False)


def encoder_block_parts(block) -> EncoderBlockParts:
    return EncoderBlockParts(block._attention_layer, block._attention_layer_norm,
                             block._intermediate_dense, block._output_dense,
                             block._output_layer_norm, block._norm_first)


class BertEncoderParts(NamedTuple):
    """The sublayers of a built Model Garden `BertEncoderV2`."""

    word_embedding: object  # OnDeviceEmbedding: `embeddings` [vocab, width]
    position_embeddings: object  # the variable [max_length, width]
    type_embedding: object  # OnDeviceEmbedding: `embeddings` [types, width]
    embedding_norm: object  # LayerNormalization of the summed embeddings
    embedding_projection: object  # EinsumDense to the hidden size, or None
    transformer_layers: list  # TransformerEncoderBlock, bottom first


def bert_encoder_parts(encoder) -> BertEncoderParts:
    return BertEncoderParts(encoder._embedding_layer,
                            encoder._position_embedding_layer._position_embeddings,
                            encoder._type_embedding_layer, encoder._embedding_norm_layer,
                            encoder._embedding_projection, encoder._transformer_layers)


# TensorFlow's graph: XLA context and grappler, run as the CPU runtime runs it on a function.


def in_xla_context() -> bool:
    """Whether XLA compiles the graph being traced: TF's private `GraphOrParentsInXlaContext`."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


_CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def optimized_op_counts(concrete_function) -> Dict[str, int]:
    """How many ops of each type grappler leaves in `concrete_function`'s graph, optimized
    the way the CPU runtime optimizes a function it runs: variables frozen to constants,
    every node placed on the CPU (grappler's remapper fuses only placed nodes), the default
    optimizers. A fused op is keyed with its fused operations, for example
    `_FusedMatMul[BiasAdd,GeluExact]`. oneDNN's layout rewrite (`_Mkl*` ops) runs later, at
    graph execution, and is not part of these counts."""
    frozen = convert_to_constants.convert_variables_to_constants_v2(concrete_function)
    graph_def = frozen.graph.as_graph_def()
    for node in graph_def.node:
        node.device = _CPU
    meta_graph = tf.compat.v1.train.export_meta_graph(graph_def=graph_def, graph=frozen.graph)
    fetches = meta_graph_pb2.CollectionDef()
    fetches.node_list.value.extend(tensor.name for tensor in frozen.outputs)
    meta_graph.collection_def["train_op"].CopyFrom(fetches)
    counts: Dict[str, int] = {}
    for node in tf_optimizer.OptimizeGraph(config_pb2.ConfigProto(), meta_graph).node:
        key = node.op
        if "fused_ops" in node.attr:
            key += "[" + ",".join(op.decode() for op in node.attr["fused_ops"].list.s) + "]"
        counts[key] = counts.get(key, 0) + 1
    return counts
