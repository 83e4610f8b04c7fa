"""Learning curves (`experiments.run`, a claim with `eval_points`): every trained arm of a
seed is trained to the first point, its checkpoint exported and evaluated, then all arms
to the next point; an evaluated point is kept and never evaluated again."""

import dataclasses
import os
import shlex
import shutil
import time
from typing import List, Optional

from experiments import processes
from experiments.arms import (
    SCHEMA,
    arm_values,
    owner_of,
    result_path,
    run_arm,
    run_stage,
    stage_steps,
    write_result,
)
from experiments.claim_types import Arm, Claim
from experiments.prepare import Context
from experiments.processes import python_command, read_json, write_json


def curve_steps(claim: Claim, arm: Arm, ctx: Context) -> List[int]:
    """The checkpoint steps of the arm's last stage at the claim's `eval_points` (a short
    run can round two fractions to one step)."""
    steps = stage_steps(arm.stages[-1], ctx)
    return sorted({max(1, int(round(steps * fraction))) for fraction in claim.eval_points})


def _train_to(claim, arm, seed: int, until: int, *, ctx: Context) -> List[dict]:
    """Trains the arm's earlier stages in full and its last stage up to step `until`."""
    values = arm_values(seed, ctx)
    owner = owner_of(claim, arm, seed, ctx)
    stages, previous = [], None
    for index, stage in enumerate(arm.stages):
        last = index == len(arm.stages) - 1
        record = run_stage(stage, seed, previous, values, ctx=ctx, owner=owner, curve=last,
                           until=until if last else None)
        stages.append(record)
        previous = record["model_dir"]
    return stages


def run_curve_point(claim: Claim, arm: Arm, seed: int, step: int,
                    *, ctx: Context) -> Optional[str]:
    """Trains the arm to `step` (resuming its run), exports that checkpoint and evaluates it
    into `<arm>/seed<k>/points/step<N>.json`; an evaluated point is not evaluated again."""
    arm_dir = result_path(claim, arm, seed, ctx)[:-len(".json")]
    path = os.path.join(arm_dir, "points", f"step{step}.json")
    if os.path.exists(path) or os.path.exists(arm_dir + ".json"):
        return path
    print(f"{claim.name}/{arm.name}/seed{seed}: step {step}", flush=True)
    stages = _train_to(claim, arm, seed, step, ctx=ctx)
    model_dir = stages[-1]["model_dir"]
    checkpoint = os.path.join(model_dir, f"ckpt-{step}")
    if not os.path.exists(checkpoint + ".index"):
        raise RuntimeError(f"{checkpoint}: not found (the run is past step {step} without "
                           "its point; remove the run folder to train it again)")
    prefix = os.path.join(arm_dir, "points", f"step{step}")
    spec_path = prefix + ".evaluate_spec.json"
    write_json(spec_path, {"evaluations": [dataclasses.asdict(e) for e in claim.evaluations],
                            "data": ctx.data, "shared": ctx.shared,
                            "train_dirs": [s["model_dir"] for s in stages]})
    # One process exports the checkpoint and evaluates the export.
    evaluate = python_command("-m", "experiments.evaluate", f"--model={prefix}_export",
                              f"--spec={spec_path}", f"--output={prefix}.evaluate.json",
                              f"--export_checkpoint={checkpoint}",
                              f"--export_seq_length={claim.export_seq_length}")
    cpu, wall = {}, {}
    cpu["export_and_evaluate"], wall["export_and_evaluate"] = processes.run_counted(
        evaluate, prefix + ".evaluate.log")
    evaluated = read_json(prefix + ".evaluate.json")
    steps = stages[-1]["steps"]
    point = {"schema": SCHEMA, "claim": claim.name, "arm": arm.name, "seed": seed,
             "step": step, "steps": steps, "fraction": step / steps,
             # user + system time of every training process of the arm up to this
             # checkpoint (each stop and restart included; interrupted pieces too)
             "train_cpu_seconds": sum(s["cpu_seconds"] for s in stages),
             "train_wall_seconds": sum(s["wall_seconds"] for s in stages),
             "cpu_seconds": cpu, "wall_seconds": wall, "checkpoint": checkpoint,
             "metrics": evaluated["metrics"], "evaluate_command": shlex.join(evaluate),
             "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    write_json(path, point)
    if step < steps:  # the last export stays, as a finished arm's does
        shutil.rmtree(prefix + "_export", ignore_errors=True)
    print(f"{claim.name}/{arm.name}/seed{seed}: step {step}: {claim.metric} = "
          f"{point['metrics'][claim.metric]:.4f}, training CPU "
          f"{point['train_cpu_seconds']:.0f} s", flush=True)
    return path


def finish_curve(claim: Claim, arm: Arm, seed: int,
                 ctx: Context) -> str:
    """The arm's result file once every point is evaluated: the last point's metrics, the
    whole curve, and the CPU time of every piece."""
    path = result_path(claim, arm, seed, ctx)
    if os.path.exists(path):
        return path
    arm_dir = path[:-len(".json")]
    steps = curve_steps(claim, arm, ctx)
    points = [read_json(os.path.join(arm_dir, "points", f"step{step}.json"))
              for step in steps]
    stages = _train_to(claim, arm, seed, steps[-1], ctx=ctx)  # finished: read, not trained
    last = os.path.join(arm_dir, "points", f"step{steps[-1]}")
    evaluated = read_json(last + ".evaluate.json")
    cpu = {"export_and_evaluate": sum(p["cpu_seconds"]["export_and_evaluate"]
                                      for p in points)}
    wall = {"export_and_evaluate": sum(p["wall_seconds"]["export_and_evaluate"]
                                       for p in points)}
    curve = [{key: p[key] for key in ("step", "steps", "fraction", "train_cpu_seconds",
                                      "metrics")} for p in points]
    return write_result(path, claim, arm, seed, ctx=ctx, stages=stages, cpu=cpu, wall=wall,
                        evaluated=evaluated,
                        curve=curve, evaluate_command=points[-1]["evaluate_command"])


def run_curves(claim: Claim, arms, seed: int, ctx: Context) -> None:
    """One seed of a learning-curve claim, point by point across the arms (all arms to the
    first point, then all to the second, ...), so a claim stopped part-way has comparable
    points; untrained arms (no stages) are evaluated once."""
    for arm in arms:
        if not arm.stages and not (arm.deterministic and seed > 1):
            run_arm(claim, arm, seed, ctx)
    trained = [arm for arm in arms if arm.stages]
    for fraction in claim.eval_points:
        for arm in trained:
            steps = stage_steps(arm.stages[-1], ctx)
            run_curve_point(claim, arm, seed, max(1, int(round(steps * fraction))), ctx=ctx)
    for arm in trained:
        finish_curve(claim, arm, seed, ctx)
