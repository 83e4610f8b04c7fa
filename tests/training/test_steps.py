"""The train and validation steps (`cmlm_tf.training.steps`): embedding gradients made
dense, and which steps the driver compiles with XLA."""

import inspect

import numpy as np
import tensorflow as tf
from official.core import base_trainer, config_definitions

from cmlm_tf.training import steps


def test_dense_gradient_sums_the_rows_of_repeated_ids_and_leaves_dense_ones():
    slices = tf.IndexedSlices(values=tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
                              indices=tf.constant([0, 2, 0]), dense_shape=tf.constant([3, 2]))
    np.testing.assert_array_equal(steps.dense_gradient(slices),
                                  [[6.0, 8.0], [0.0, 0.0], [3.0, 4.0]])
    dense = tf.ones([2, 2])
    assert steps.dense_gradient(dense) is dense


def test_train_step_is_compiled_once_on_gpus():
    """With `runtime.enable_xla` and GPUs, Model Garden's trainer wraps the train step in
    `jit_compile` itself: the driver then compiles only the validation step, so the train
    step is not wrapped twice. Without GPUs the driver compiles both."""
    source = inspect.getsource(base_trainer.Trainer.train_step)
    assert "enable_xla" in source and "num_gpus > 0" in source and "jit_compile=True" in source

    class Steps:
        def train_step(self, inputs, model, optimizer, metrics=None):
            return {}

        def validation_step(self, inputs, model, metrics=None):
            return {}

    for num_gpus, train_compiled in ((1, False), (0, True)):
        task = Steps()
        runtime = config_definitions.RuntimeConfig(enable_xla=True, num_gpus=num_gpus)
        steps.compile_steps(task, runtime)
        assert steps.trainer_compiles_train_step(runtime) is not train_compiled
        assert isinstance(task.train_step, tf.types.experimental.GenericFunction) \
            is train_compiled, num_gpus
        assert isinstance(task.validation_step, tf.types.experimental.GenericFunction)
