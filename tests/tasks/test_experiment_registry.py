"""The registered experiments (cmlm_tf/tasks/experiment_registry.py): the list `--help` shows
without TensorFlow is the one Model Garden's registry holds once the tasks are imported."""


def test_the_static_experiment_list_is_the_registry():
    from official.core import exp_factory

    from cmlm_tf.tasks import experiment_registry

    experiment_registry.register()
    # Model Garden's registry nests names by their "/" parts.
    registered = {f"cmlm_tf/{name}" for name in exp_factory._REGISTERED_CONFIGS["cmlm_tf"]}
    assert registered == set(experiment_registry.EXPERIMENTS)
