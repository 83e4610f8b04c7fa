"""Config files read into an experiment config: YAML recipes and `--params_override`.

`load_experiment_config` applies YAML files (paths, or packaged recipes by name:
`resolve_recipe`) and then a `--params_override` string (`parse_override`) to an experiment
config (`configs.SentenceExperimentConfig` unless given), strictly: an unknown key gets
"did you mean" (`override_error`), a value of the wrong type an error naming its field
(`check_types`). Relative paths to a model's own files are read beside the YAML file that
names them (`resolve_relative`), `cmlm_tf/...` paths from the installed package
(`resolve_bundled_paths`, undone by `bundled_paths_as_given` when a run records its
config), and learning-rate decays of 0 steps follow `trainer.train_steps`
(`follow_train_steps`). YAML is read with the safe loader.
"""

import dataclasses
import glob
import os
import typing
from typing import List, Optional

import tensorflow as tf
import yaml
from official.modeling import hyperparams
from official.modeling.hyperparams import params_dict

from cmlm_tf import configs, did_you_mean, packaged_recipes


def resolve_recipe(name_or_path: str) -> str:
    """A `--config_file` value as a file: an existing path as it is; otherwise a packaged
    recipe by name (`cmlm_tiny`, `cmlm_tiny.yaml` or `configs/cmlm_tiny.yaml`), so recipes
    work from any directory once cmlm_tf is installed. A typo of a recipe's name gets
    "did you mean"."""
    if tf.io.gfile.exists(name_or_path):
        return name_or_path
    recipe = packaged_recipes.packaged_recipe(name_or_path)
    if recipe is None:
        raise FileNotFoundError(packaged_recipes.unknown_recipe_message(name_or_path))
    return recipe


def read_yaml_mapping(path: str, what: str = "config file") -> dict:
    """A YAML file's top-level mapping, read with the safe loader (no Python tags)."""
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            data = yaml.safe_load(f.read())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or _first_line(e)
        raise ValueError(f"{path}:{where}: malformed YAML {what} ({problem})") from None
    except (tf.errors.OpError, OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read the {what} ({_first_line(e)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the {what} must be a mapping of keys, got "
                         f"{type(data).__name__}")
    return data


def parse_override(text: str) -> dict:
    """`--params_override` as a dict: `a.b=1,c.d=x` pairs, a YAML/JSON mapping, or the path
    of a YAML file. Parsed with the safe YAML loader."""
    try:
        text = params_dict.nested_csv_str_to_json_str(text)
    except ValueError:
        pass
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"--params_override: cannot parse {text[:80]!r} "
                         f"({getattr(e, 'problem', None) or _first_line(e)})") from None
    if isinstance(data, dict):
        return data
    if isinstance(data, str) and tf.io.gfile.exists(data):
        return read_yaml_mapping(data, "--params_override file")
    raise ValueError(f"--params_override: expected key=value pairs (a.b=1,c=2), a YAML "
                     f"mapping or a YAML file, got {text[:80]!r}")


def load_experiment_config(
    config_files: Optional[List[str]] = None,
    params_override: str = "",
    base: Optional[hyperparams.Config] = None,
) -> hyperparams.Config:
    """Applies YAML files (paths or packaged recipe names) then a `a.b=1,c=2` override string,
    strictly, to `base`; then checks every field's type, points bundled-data paths at the
    installed package, and makes learning-rate decays of 0 steps follow
    `trainer.train_steps` (`follow_train_steps`).

    A relative `task.init_checkpoint`, `vocab_file` or `sp_model_file` that names a file
    beside the YAML file is read from there (`resolve_relative`: an import folder's
    `warm_start.yaml`, moved or not). YAML is read with the safe loader. An unknown key, a
    wrong type or an unreadable file raises ValueError (FileNotFoundError for a missing one)
    naming it.
    """
    params = base if base is not None else configs.SentenceExperimentConfig()
    for name in config_files or []:
        path = resolve_recipe(name)
        mapping = resolve_relative(read_yaml_mapping(path), os.path.dirname(path))
        check_blocks(params, mapping, path)
        try:
            params.override(mapping, is_strict=True)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}: {override_error(params, mapping, e)}") from None
        _check_types(params, path)
    if params_override:
        mapping = parse_override(params_override)
        check_blocks(params, mapping, "--params_override")
        try:
            params.override(mapping, is_strict=True)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"--params_override: {override_error(params, mapping, e)}") \
                from None
        _check_types(params, "--params_override")
    resolve_bundled_paths(params)
    follow_train_steps(params)
    return params


# The fields of a config file read relative to the file's folder when they name a file
# there: the model's own files.
RELATIVE_FIELDS = (("task", "init_checkpoint"), ("task", "model", "tokenizer", "vocab_file"),
                   ("task", "model", "tokenizer", "sp_model_file"))


def resolve_relative(mapping: dict, folder: str) -> dict:
    """`mapping` (a config file's content) with each RELATIVE_FIELDS path that is relative
    and names a file in `folder` (a checkpoint: its `.index`) joined to `folder`; the
    caller's mapping is left as it was."""
    resolved = dict(mapping)
    for keys in RELATIVE_FIELDS:
        node = resolved
        for key in keys[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        value = node.get(keys[-1])
        if not isinstance(value, str) or not value or os.path.isabs(value) or "://" in value:
            continue
        candidate = os.path.join(folder, value)
        if not (os.path.exists(candidate) or os.path.exists(candidate + ".index")):
            continue
        node = resolved  # copied down to the field
        for key in keys[:-1]:
            node[key] = dict(node[key])
            node = node[key]
        node[keys[-1]] = candidate
    return resolved


def override_error(params: hyperparams.Config, mapping: dict, error: Exception) -> str:
    """The line that reports a failed strict override: for a key `params` does not have,
    `unknown key a.b; did you mean a.c?` (the closest keys beside it, else the closest keys of
    that name elsewhere), else the error's own first line."""
    known = params.as_dict()
    found = _unknown_key(known, mapping)
    if found is None:
        return _first_line(error)
    path, siblings = found
    prefix, _, key = path.rpartition(".")
    close = [f"{prefix}.{name}" if prefix else name for name in did_you_mean.closest(key, siblings)]
    if not close:
        # A key in the wrong place (trainer.seq_length): the paths that end in a close name.
        elsewhere = {}
        for dotted in _dotted_keys(known):
            elsewhere.setdefault(dotted.rpartition(".")[2], []).append(dotted)
        close = [dotted for name in did_you_mean.closest(key, list(elsewhere))
                 for dotted in elsewhere[name]][:3]
    if close:
        return f"unknown key {path}; did you mean {' or '.join(close)}?"
    where = f"under {prefix}" if prefix else "at the top level"
    return f"unknown key {path}; the keys {where} are {', '.join(sorted(siblings))}"


def check_blocks(params: hyperparams.Config, mapping: dict, where: str) -> None:
    """Refuses a value given to a block of settings (`task.model.encoder=5`), which a strict
    override would store in its place; `where` names the file or flag."""
    found = _value_over_block(params.as_dict(), mapping)
    if found is not None:
        path, value, fields = found
        raise ValueError(f"{where}: {path} is a block of settings, not a value (got "
                         f"{value!r}); set its fields instead, e.g. {path}.{fields[0]}=..."
                         f" (its fields: {', '.join(fields)})")


def _value_over_block(known: dict, mapping: dict, prefix: str = ""):
    """(dotted path, value, the block's fields) of the first non-mapping value of `mapping`
    that would replace a block (a nested dict of `known`, as `Config.as_dict()`), or None."""
    for key, value in mapping.items():
        block = known.get(key)
        if not isinstance(block, dict) or value is None:
            continue
        if not isinstance(value, dict):
            return f"{prefix}{key}", value, sorted(block)
        found = _value_over_block(block, value, f"{prefix}{key}.")
        if found is not None:
            return found
    return None


def _unknown_key(known: dict, mapping: dict, prefix: str = ""):
    """(dotted path, keys beside it) of the first key of `mapping` missing from `known`
    (nested dicts, as `Config.as_dict()`), or None."""
    for key, value in mapping.items():
        if key not in known:
            return f"{prefix}{key}", list(known)
        if isinstance(value, dict) and isinstance(known[key], dict):
            found = _unknown_key(known[key], value, f"{prefix}{key}.")
            if found is not None:
                return found
    return None


def _dotted_keys(known: dict, prefix: str = ""):
    for key, value in known.items():
        yield f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _dotted_keys(value, f"{prefix}{key}.")


def read_float_strings(config: hyperparams.Config) -> None:
    """Turns strings that spell a number in float fields into floats: YAML 1.1 (what recipes
    and `--params_override` are parsed with) reads `1e-12` or `5e-5`, without a dot, as a
    string."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name, None)
        if isinstance(value, hyperparams.Config):
            read_float_strings(value)
            continue
        allowed = typing.get_args(field.type) if typing.get_origin(field.type) is \
            typing.Union else (field.type,)
        if float in allowed and isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                continue  # check_types names the field
            setattr(config, field.name, number)


def _check_types(params: hyperparams.Config, source: str) -> None:
    read_float_strings(params)
    try:
        check_types(params)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


def check_types(config: hyperparams.Config, prefix: str = "") -> None:
    """Raises ValueError naming the first field whose value does not have its declared type
    (an int field given "abc", a list given a number, ...)."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name, None)
        name = prefix + field.name
        if isinstance(value, hyperparams.Config):
            check_types(value, name + ".")
            continue
        expected = field.type
        origin = typing.get_origin(expected)
        allowed = typing.get_args(expected) if origin is typing.Union else (expected,)
        if value is None and type(None) in allowed:
            continue
        kinds = {typing.get_origin(t) or t for t in allowed if t is not type(None)}
        if kinds <= {bool} and not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")
        if kinds <= {int} and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name} must be an integer, got {value!r}")
        if kinds <= {float, int} and float in kinds and (
                isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{name} must be a number, got {value!r}")
        if kinds <= {str} and not isinstance(value, str):
            raise ValueError(f"{name} must be a string, got {value!r}")
        if kinds and kinds <= {list, tuple, typing.List, typing.Tuple} and \
                not isinstance(value, (list, tuple)):
            raise ValueError(f"{name} must be a list, got {value!r}")


# Paths in recipes that name files shipped inside the package (`cmlm_tf/data/corpus/...`).
BUNDLED_PREFIX = "cmlm_tf/"


def resolve_bundled_paths(config: hyperparams.Config) -> None:
    """Rewrites `cmlm_tf/...` paths (or comma-separated lists of them) that do not exist
    from the working directory into the installed package's files, so recipes that name
    bundled data run from anywhere."""
    package_parent = _package_parent()

    def resolve(text: str) -> str:
        parts = text.split(",")
        if not any(part.strip().startswith(BUNDLED_PREFIX) for part in parts):
            return text
        resolved = []
        for part in parts:
            path = part.strip()
            if path.startswith(BUNDLED_PREFIX) and not _matches(path):
                candidate = os.path.join(package_parent, path)
                if _matches(candidate):
                    path = candidate
            resolved.append(path)
        return ",".join(resolved)

    _rewrite_strings(config, resolve)


def bundled_paths_as_given(config: hyperparams.Config) -> None:
    """The inverse of `resolve_bundled_paths`: paths into the installed package's files
    become `cmlm_tf/...` again, so a run's `params.yaml` names no local installation and
    the run folder can move to another machine (readers resolve them again)."""
    installed = os.path.join(_package_parent(), BUNDLED_PREFIX)

    def as_given(text: str) -> str:
        if installed not in text:
            return text
        return ",".join(BUNDLED_PREFIX + part.strip()[len(installed):]
                        if part.strip().startswith(installed) else part
                        for part in text.split(","))

    _rewrite_strings(config, as_given)


def _package_parent() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rewrite_strings(config: hyperparams.Config, rewrite) -> None:
    """Applies `rewrite(str) -> str` to every string field (and list of strings), in place."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name, None)
        if isinstance(value, hyperparams.Config):
            _rewrite_strings(value, rewrite)
        elif isinstance(value, str) and value:
            new = rewrite(value)
            if new != value:
                config.override({field.name: new}, is_strict=True)
        elif isinstance(value, (list, tuple)) and any(isinstance(v, str) for v in value):
            new = [rewrite(v) if isinstance(v, str) else v for v in value]
            if new != list(value):
                config.override({field.name: new}, is_strict=True)


def _matches(pattern: str) -> bool:
    return bool(glob.glob(pattern))


def follow_train_steps(params: hyperparams.Config) -> None:
    """A polynomial or cosine learning-rate decay of 0 steps (the experiments' default)
    decays over `trainer.train_steps`, so raising `trainer.train_steps` on a finished run
    continues training instead of training at learning rate 0."""
    trainer = getattr(params, "trainer", None)
    learning_rate = getattr(getattr(trainer, "optimizer_config", None), "learning_rate", None)
    if learning_rate is None:
        return
    schedule = learning_rate.get()
    if schedule is not None and getattr(schedule, "decay_steps", None) == 0:
        schedule.decay_steps = trainer.train_steps


def _first_line(error: Exception) -> str:
    text = str(error.args[0] if error.args else error).strip()
    return text.splitlines()[0] if text else type(error).__name__
