"""The registered experiments (cmlm_tf/tasks/experiment_registry.py): the table of objectives
is the one place an objective is registered, and the list `--help` shows without TensorFlow is
the one Model Garden's registry holds once the tasks are imported."""

import ast

from official.core import exp_factory

from cmlm_tf.tasks import experiment_registry
from tests.conftest import REPO_DIR, run_child, subprocess_env
from tests.source_tree import PACKAGE


def registered_in_source():
    """{task module: experiment names it registers}, read from the decorators
    `@exp_factory.register_config_factory("name")` of the modules in cmlm_tf/tasks/."""
    found = {}
    for path in sorted((PACKAGE / "tasks").glob("*.py")):
        module = f"cmlm_tf.tasks.{path.stem}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "register_config_factory"):
                found.setdefault(module, set()).add(ast.literal_eval(node.args[0]))
    return found


def test_every_task_module_that_registers_an_experiment_is_in_the_table():
    table = {}
    for objective in experiment_registry.OBJECTIVES:
        table.setdefault(objective.module, set()).add(objective.experiment)
    assert registered_in_source() == table


def test_the_static_experiment_list_is_the_registry():
    experiment_registry.register()
    # Model Garden's registry nests names by their "/" parts.
    registered = {f"cmlm_tf/{name}" for name in exp_factory._REGISTERED_CONFIGS["cmlm_tf"]}
    assert registered == set(experiment_registry.EXPERIMENTS)
    assert list(experiment_registry.EXPERIMENTS) == [
        objective.experiment for objective in experiment_registry.OBJECTIVES]


def test_recipes_exist_and_xla_case_names_are_unique():
    names = [case.name for objective in experiment_registry.OBJECTIVES
             for case in objective.xla_cases]
    assert len(names) == len(set(names)), names
    for objective in experiment_registry.OBJECTIVES:
        assert objective.xla_cases, objective.experiment
        for recipe in (objective.tiny_recipe,) + sum(
                (case.base_recipes for case in objective.xla_cases), ()):
            assert not recipe or (REPO_DIR / "configs" / recipe).is_file(), recipe


def test_the_table_is_read_without_tensorflow():
    """`--help` lists the experiments before TensorFlow loads."""
    result = run_child("imports_tensorflow", "cmlm_tf.tasks.experiment_registry",
                       env=subprocess_env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"
