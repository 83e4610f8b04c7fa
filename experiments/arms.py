"""The runner's arms (`experiments.run`): each stage's config (its recipe, the seed, the
schedule, where it starts from) trained once however many arms share it, then the arm's
export and evaluation, and its result file with the CPU time of every piece."""

import dataclasses
import hashlib
import json
import os
import platform
import shlex
import subprocess
import time
from typing import Dict, List, Optional, Tuple

import yaml

from cmlm_tf.runtime import host
from experiments import processes
from experiments.claim_types import Arm, Claim, Stage
from experiments.prepare import Context, ensure_init, owned_cpu
from experiments.processes import REPO, python_command, read_json, write_json

SCHEMA = 1


def arm_values(seed: int, ctx: Context) -> dict:
    """The placeholders of a seed's stages (`experiments.claims`), but `{previous}` and
    `{best_queue_size}`."""
    return {"data": ctx.data, "shared": ctx.shared, "seed": seed,
            "minilm": os.path.join(ctx.data, "all-MiniLM-L6-v2")}


def schedule(steps: int, warmup_fraction: Optional[float], *, curve: bool = False
             ) -> Dict[str, object]:
    """Trainer fields for a run of `steps`: about 20 summary loops and 4 checkpoints (with
    `curve`, one checkpoint per loop, so a stopped run loses little); with a
    `warmup_fraction`, linear warm-up over that share (at least a step, and shorter than
    the run: none for a run of one step) and linear decay to 0 at the end."""
    loop = max(1, steps // 20)
    fields = {"trainer.train_steps": steps, "trainer.steps_per_loop": loop,
              "trainer.summary_interval": loop,
              "trainer.checkpoint_interval": loop if curve else loop * 5,
              "trainer.validation_interval": steps, "trainer.max_to_keep": 3 if curve else 2}
    if warmup_fraction is not None:
        fields.update({
            "trainer.optimizer_config.learning_rate.polynomial.decay_steps": steps,
            "trainer.optimizer_config.warmup.linear.warmup_steps":
                min(max(1, int(round(steps * warmup_fraction))), steps - 1)})
    return fields


def _nested(fields: Dict[str, object]) -> dict:
    tree: dict = {}
    for dotted, value in fields.items():
        node = tree
        *parents, leaf = dotted.split(".")
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return tree


def write_overrides(path: str, fields: Dict[str, object]) -> str:
    """Writes dotted override fields as the nested YAML a `--config_file` reads."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(_nested(fields), f, sort_keys=True)
    return path


def _fill(value, values: Dict[str, object]):
    if not isinstance(value, str) or "{" not in value:
        return value
    if value.startswith("{") and value.endswith("}") and value[1:-1] in values:
        return values[value[1:-1]]  # keeps the type of e.g. an int queue size
    return value.format(**values)


def best_queue_size(claim: Claim, ctx: Context) -> int:
    """The queue size (`Arm.x`) of the `queue_*` arm with the best mean metric."""
    means = {}
    for arm in claim.arms:
        if not arm.name.startswith("queue_"):
            continue
        values = [read_json(path)["metrics"][claim.metric]
                  for path in (result_path(claim, arm, seed, ctx)
                               for seed in ctx.seeds) if os.path.exists(path)]
        if len(values) < len(ctx.seeds):
            raise RuntimeError(f"{arm.name}: {len(values)} of {len(ctx.seeds)} seeds finished; "
                               "the momentum arm needs every queue arm first")
        means[arm.name] = (sum(values) / len(values), arm.x)
    return int(max(means.values())[1])


def owner_of(claim, arm, seed: int, ctx: Context) -> str:
    """Who a stage or the seed's init belongs to (their CPU time counts in its result)."""
    return f"{claim.name}/{arm.name}/seed{seed}@steps{ctx.steps}"


def result_path(claim, arm, seed: int, ctx: Context) -> str:
    return os.path.join(ctx.results, claim.name, f"steps{ctx.steps}", arm.name,
                        f"seed{seed}.json")


def stage_steps(stage: Stage, ctx: Context) -> int:
    return max(1, int(round(ctx.steps * stage.steps)))


def stage_config(stage: Stage, seed: int, previous: Optional[str], values: dict,
                 *, ctx: Context, init_dir: Optional[str] = None, curve: bool = False
                 ) -> Tuple[List[str], Dict[str, object]]:
    """The stage's config files and override fields: its recipe's overrides with the
    placeholders filled, the seed's data order, the schedule, and where it starts from
    (`init_dir`: the seed's random encoder, for `init` "random")."""
    fields = {key: _fill(value, values) for key, value in stage.overrides.items()}
    fields["task.train_data.seed"] = seed
    fields.update(schedule(stage_steps(stage, ctx), stage.warmup_fraction, curve=curve))
    if stage.init == "random":
        fields["task.init_checkpoint"] = os.path.join(init_dir, "encoder")
    elif stage.init == "previous":
        fields["task.init_checkpoint"] = previous
    elif stage.init == "stack":
        fields["task.init_stack_from"] = previous
    elif stage.init:
        raise ValueError(f"Stage.init: unknown {stage.init!r}")
    return [_fill(path, values) for path in stage.config_files], fields


def run_stage(stage: Stage, seed: int, previous: Optional[str], values: dict,
              *, ctx: Context, owner: str, curve: bool = False, until: Optional[int] = None
              ) -> dict:
    """Trains one stage (or finds it trained); returns its record, `reused` when another arm
    (not `owner`) trained it. `curve`: the checkpoint schedule of a learning curve; `until`:
    stop (with a checkpoint) at that step and return the record of the run so far (its CPU
    and wall time so far, every piece counted): the next call with a later `until` resumes
    it."""
    steps = stage_steps(stage, ctx)
    init_dir = ensure_init(seed, ctx, owner) if stage.init == "random" else None
    config_files, fields = stage_config(stage, seed, previous, values, ctx=ctx, init_dir=init_dir,
                                        curve=curve)
    identity = json.dumps([stage.experiment, config_files, fields, stage.cpu_replicas, seed],
                          sort_keys=True)
    key = hashlib.sha1(identity.encode("utf-8")).hexdigest()[:12]
    directory = os.path.join(ctx.results, "stages", key)
    record_path = os.path.join(directory, "stage.json")
    if os.path.exists(record_path):
        record = read_json(record_path)
        record["reused"] = record.get("owner") != owner
        return record
    overrides_path = write_overrides(os.path.join(directory, "overrides.yaml"), fields)
    model_dir = os.path.join(directory, "run")
    arguments = [f"--experiment={stage.experiment}",
                 *[f"--config_file={path}" for path in config_files],
                 f"--config_file={overrides_path}", f"--model_dir={model_dir}",
                 f"--seed={seed}", f"--cpu_replicas={stage.cpu_replicas}"]
    command = python_command("-m", "experiments.train", *arguments)
    record = {"key": key, "experiment": stage.experiment, "config_files": config_files,
              "arguments": arguments,
              "overrides": fields, "steps": steps, "cpu_replicas": stage.cpu_replicas,
              "model_dir": model_dir, "command": shlex.join(command), "owner": owner}
    if until is not None and until < steps:
        # The same run, stopped early: the schedule (decay to 0 at `steps`) is unchanged.
        cpu, wall = processes.run_counted(
            command + [f"--params_override=trainer.train_steps={until}"],
            os.path.join(directory, "train.log"), model_dir)
        record.update(cpu_seconds=cpu, wall_seconds=wall, reused=False)
        return record
    cpu, wall = processes.run_counted(command, os.path.join(directory, "train.log"), model_dir)
    record.update(cpu_seconds=cpu, wall_seconds=wall)
    write_json(record_path, record)
    record["reused"] = False
    return record


def run_arm(claim: Claim, arm: Arm, seed: int, ctx: Context) -> str:
    path = result_path(claim, arm, seed, ctx)
    if os.path.exists(path):
        print(f"{claim.name}/{arm.name}/seed{seed}: done ({path})", flush=True)
        return path
    print(f"{claim.name}/{arm.name}/seed{seed}: running", flush=True)
    arm_dir = path[:-len(".json")]
    values = arm_values(seed, ctx)
    if any("{best_queue_size}" in str(v) for s in arm.stages for v in s.overrides.values()):
        values["best_queue_size"] = best_queue_size(claim, ctx)
    owner = owner_of(claim, arm, seed, ctx)
    stages, previous = [], None
    for stage in arm.stages:
        record = run_stage(stage, seed, previous, values, ctx=ctx, owner=owner)
        stages.append(record)
        previous = record["model_dir"]
    cpu: Dict[str, float] = {}
    wall: Dict[str, float] = {}
    export_dir = os.path.join(arm_dir, "export")
    export = python_command("-m", "cmlm_tf.export", f"--export_dir={export_dir}",
                            "--overwrite", f"--seq_length={claim.export_seq_length}")
    if arm.stages:
        export.append(f"--model_dir={previous}")
    elif arm.export_from == "minilm":
        export.append(f"--model_dir={values['minilm']}")
    elif arm.export_from == "random":
        init_dir = ensure_init(seed, ctx, owner)
        export += [f"--model_dir={init_dir}", f"--checkpoint={os.path.join(init_dir, 'encoder')}"]
    else:
        raise ValueError(f"arm {arm.name}: no stages and no export_from")
    cpu["export"], wall["export"] = processes.run_counted(
        export, os.path.join(arm_dir, "export.log"))
    if any(e.kind == "validation" for e in claim.evaluations):
        validate = python_command("-m", "experiments.train", *stages[-1]["arguments"],
                                  "--mode=eval")
        cpu["validate"], wall["validate"] = processes.run_counted(
            validate, os.path.join(arm_dir, "validate.log"))
    spec_path = os.path.join(arm_dir, "evaluate_spec.json")
    write_json(spec_path, {"evaluations": [dataclasses.asdict(e) for e in claim.evaluations],
                            "data": ctx.data, "shared": ctx.shared,
                            "train_dirs": [s["model_dir"] for s in stages]})
    metrics_path = os.path.join(arm_dir, "evaluate.json")
    evaluate = python_command("-m", "experiments.evaluate", f"--model={export_dir}",
                              f"--spec={spec_path}", f"--output={metrics_path}")
    cpu["evaluate"], wall["evaluate"] = processes.run_counted(
        evaluate, os.path.join(arm_dir, "evaluate.log"))
    return write_result(path, claim, arm, seed, ctx=ctx, stages=stages, cpu=cpu, wall=wall,
                        evaluated=read_json(metrics_path), export_command=shlex.join(export),
                        evaluate_command=shlex.join(evaluate))


def write_result(path: str, claim: Claim, arm: Arm, seed: int,
                 *, ctx: Context, stages: List[dict], cpu: Dict[str, float],
                 wall: Dict[str, float], evaluated: dict, **extra) -> str:
    """Writes the arm's result file: the evaluation's metrics, the stages, the CPU and wall
    time of every piece (the stages this arm trained, and the seed's init if it wrote it)
    and `extra` fields; prints the claim's metric."""
    cpu, wall = dict(cpu), dict(wall)
    owner = owner_of(claim, arm, seed, ctx)
    for i, record in enumerate(stages):
        if not record["reused"]:
            cpu[f"train_stage{i + 1}"] = record["cpu_seconds"]
            wall[f"train_stage{i + 1}"] = record["wall_seconds"]
    init_cpu, init_wall = owned_cpu(os.path.join(ctx.data, "init", f"seed{seed}"), owner)
    if init_cpu:
        cpu["init"], wall["init"] = init_cpu, init_wall
    result = {
        "schema": SCHEMA, "claim": claim.name, "arm": arm.name, "seed": seed,
        "steps": ctx.steps, "command": ctx.command,
        "metrics": evaluated["metrics"], "train_curves": evaluated["train_curves"],
        "stages": stages,
        "cpu_seconds": {**cpu, "total": sum(cpu.values())},
        "cpu_seconds_with_reused_stages": sum(cpu.values()) + sum(
            r["cpu_seconds"] for r in stages if r["reused"]),
        "wall_seconds": {**wall, "total": sum(wall.values())},
        **extra,
        "machine": {"cpu": host.cpu_model() or platform.processor(), "cores": os.cpu_count(),
                    "flags": host.speed_flags(), "tf_threads": processes.tf_threads(),
                    "python": platform.python_version()},
        "git_commit": git_commit(),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    write_json(path, result)
    print(f"{claim.name}/{arm.name}/seed{seed}: {claim.metric} = "
          f"{result['metrics'][claim.metric]:.4f}, CPU {result['cpu_seconds']['total']:.0f} s",
          flush=True)
    return path


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
