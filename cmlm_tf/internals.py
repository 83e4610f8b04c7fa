"""The private attributes of TensorFlow, Keras, Orbit and Model Garden that cmlm_tf uses
where their public APIs have no equivalent, and a check that the installed versions still
have them.

A new release may rename any of these without notice. `missing()` says which are gone, each
with what in cmlm_tf needs it; `tests/test_internals.py` runs it, so an upgrade that breaks
one fails there with that message, not deep in a training run.
"""

import importlib
import inspect
from typing import List, NamedTuple, Tuple


class Internal(NamedTuple):
    module: str
    owner: str  # a class of `module`, or "" for the module itself
    names: Tuple[str, ...]
    used_by: str


USED = (
    Internal("orbit.standard_runner", "StandardTrainer", ("_train_loop_fn", "_train_iter"),
             "runner.ThroughputTrainer.train (the loop in chunks) and "
             "Runner._close_train_input (the input freed in the background)"),
    Internal("orbit", "", ("controller",),
             "runner.orbit_logs_once (the module whose log functions it replaces)"),
    Internal("orbit.controller", "", ("_log", "_format_output"),
             "runner.orbit_logs_once (Orbit's metric lines, logged once, as numbers)"),
    Internal("tensorflow.python.checkpoint.checkpoint_management", "CheckpointManager",
             ("_latest_checkpoint", "_init_fn", "_checkpoint", "_checkpoint_interval",
              "_last_checkpoint_step", "_step_counter", "_checkpoint_prefix",
              "_max_to_keep"),
             "runner.CheckpointManager (one restore line, saves that defer Ctrl-C)"),
    Internal("official.core.train_lib", "OrbitExperimentRunner",
             ("_maybe_build_checkpoint_manager", "_mode"),
             "runner.Runner (its checkpoint manager; the --mode it runs)"),
    Internal("tf_keras.src.optimizers.legacy.optimizer_v2", "OptimizerV2",
             ("_create_all_weights",),
             "runner.create_optimizer_slots (the train loop traced once)"),
)


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
    return any(f"self.{name} =" in inspect.getsource(cls) or f"self.{name}=" in
               inspect.getsource(cls) for cls in owner.__mro__
               if cls is not object and cls.__module__.split(".")[0] != "builtins")


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
