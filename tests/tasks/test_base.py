"""The task contract (`cmlm_tf.tasks.base`): the one train step over the default hooks, losses
as a dict that the metrics read, and the state a task carries for the driver."""

import numpy as np
import tensorflow as tf
import tf_keras

from cmlm_tf import configs
from cmlm_tf.tasks import base


class _Squares(base.SentenceTask):
    """loss = mean((x·w)²): a model of one Dense layer without bias."""

    metric_sources = {"mean_square": "loss"}

    def build_model(self):
        model = tf_keras.Sequential([tf_keras.layers.Dense(1, use_bias=False)])
        model.build([None, 2])
        return model

    def build_inputs(self, params, input_context=None):
        return tf.data.Dataset.from_tensors(tf.ones([2, 2]))

    def compute_losses(self, inputs, outputs):
        loss = tf.reduce_mean(tf.square(outputs))
        return {"loss": loss, "largest": tf.reduce_max(tf.abs(outputs))}

    def build_metrics(self, training=None):
        return [tf_keras.metrics.Mean(name="mean_square"), tf_keras.metrics.Mean(name="largest"),
                tf_keras.metrics.Mean(name="not_a_loss")]


def _task(**kwargs):
    return _Squares(configs.SentenceTaskConfig(), **kwargs)


def test_the_default_hooks_give_the_plain_gradient_step():
    task = _task()
    model = task.build_model()
    weights = np.array([[0.5], [-1.0]], np.float32)
    model.set_weights([weights])
    x = np.array([[1.0, 2.0], [3.0, 1.0]], np.float32)
    metrics = task.build_metrics(training=True)
    logs = task.train_step(tf.constant(x), model, tf_keras.optimizers.SGD(0.1), metrics)
    y = x @ weights
    np.testing.assert_allclose(float(logs[task.loss]), np.mean(y ** 2), rtol=1e-6)
    gradient = x.T @ (2 * y / len(y))  # d mean((x·w)²) / dw
    np.testing.assert_allclose(model.get_weights()[0], weights - 0.1 * gradient, rtol=1e-6)
    by_name = {m.name: float(m.result()) for m in metrics}
    assert by_name["mean_square"] == float(logs[task.loss])  # via metric_sources
    np.testing.assert_allclose(by_name["largest"], np.abs(y).max(), rtol=1e-6)
    assert by_name["not_a_loss"] == 0.0  # no entry of its name: left alone


def test_weight_penalties_of_the_model_join_the_loss_but_not_the_metrics():
    task = _task()
    model = task.build_model()
    model.set_weights([np.zeros([2, 1], np.float32)])
    model.add_loss(lambda: 2.0 + 0.0 * tf.reduce_sum(model.weights[0]))
    logs = task.train_step(tf.ones([2, 2]), model, tf_keras.optimizers.SGD(0.1))
    assert float(logs[task.loss]) == 2.0
    assert float(task.build_losses(None, tf.ones([2, 1]), aux_losses=[tf.constant(3.0)])) == 4.0


def test_the_validation_step_does_not_train():
    task = _task()
    model = task.build_model()
    before = model.get_weights()[0].copy()
    logs = task.validation_step(tf.ones([2, 2]), model)
    np.testing.assert_array_equal(model.get_weights()[0], before)
    np.testing.assert_allclose(float(logs[task.loss]),
                               np.mean((np.ones([2, 2]) @ before) ** 2), rtol=1e-6)


def test_a_task_carries_its_resume_step_and_its_own_malformed_reports():
    first, second = _task(resume_step=12), _task()
    assert (first.resume_step, second.resume_step) == (12, 0)
    first.malformed_reports.append("report")
    assert second.malformed_reports == []


def test_data_field_names_the_split_in_errors():
    assert base.data_field(configs.TextDataConfig(is_training=True)) == "task.train_data"
    assert base.data_field(configs.TextDataConfig(is_training=False)) == \
        "task.validation_data"
