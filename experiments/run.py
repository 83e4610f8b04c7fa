r"""Runs one claim end to end: train every arm for every seed, export, evaluate.

    python -m experiments.run --claim NAME [--seeds 3 | --seed K ...] [--steps S] \
        [--arms a,b] [--results runs/experiments] [--shared_data ../shared/data]
    python -m experiments.run --list
    python -m experiments.run --check [--claim a,b] [--results runs/experiments]

Each (claim, arm, seed) ends in `RESULTS/NAME/steps<S>/<arm>/seed<k>.json`: the metrics of
`experiments.evaluate`, the training curves, the stages with their commands, and the CPU time
(user + system of the child processes) of each piece: writing the shared random
initialisation, training, export, evaluation. A finished arm is skipped, and an interrupted
training resumes from its last checkpoint, so a claim can run in pieces; a stage that two
arms (or two claims) share is trained once (`RESULTS/stages/`). Seeds run in order, all
arms of seed 1 first; `--seed K` runs seed K alone, so the seeds of a claim can run on
different machines (`experiments.report` adds each machine's results to the committed
summary), and runners of one seed with different `--arms` can run side by side (the shared
initialisation and data are written once, the others wait). Run it niced on a shared
machine: `nice -n 19 python -m experiments.run ...`. `python -m experiments.report` turns
the JSON into docs/claims.md.

A claim with `eval_points` (learning curves) runs point by point: every trained arm of the
seed is trained up to the first point (a fraction of its steps, the learning-rate schedule
that of the whole run), its checkpoint exported and evaluated into
`<arm>/seed<k>/points/step<N>.json` with the training CPU time so far, then all arms to the
next point, and so on; the arm's `seed<k>.json` (the last point's metrics and the curve)
comes after its last point. An evaluated point is never evaluated again.

`--check` tries every claim (or `--claim`'s, comma-separated) in a few minutes before the
CPU hours: the claim's data are prepared, every stage of every arm builds a strict config,
and the claim's smallest arm (the fewest training steps; for learning curves, the smallest
trained arm, at two points) runs end to end at 2 steps (or `--steps`), seed 1, into
`RESULTS/check/`. Every piece runs in this one process, so TensorFlow starts once; a stage
on several logical CPU devices still runs as a process. One line per claim says `ok` or the
first error; the exit status is 1 if a claim failed.

Its parts: `processes.py` runs each piece and counts its CPU time, `prepare.py` writes the
data and the seeds' initialisations, `arms.py` trains, exports and evaluates an arm,
`curves.py` does so point by point; this module is `--check`, `--list` and the command line.
"""

import argparse
import os
import signal
import sys
from typing import List, Tuple

from experiments import claims as claims_lib
from experiments import processes
from experiments.arms import (
    arm_values,
    result_path,
    run_arm,
    stage_config,
    stage_steps,
    write_overrides,
)
from experiments.claim_types import Arm, Claim
from experiments.curves import run_curves
from experiments.prepare import Context, prepare
from experiments.processes import REPO, THREAD_VARIABLES, Stopped, read_json

# ---------------------------------------------------------------------------------------
# --check


def smallest_arm(claim: Claim) -> Arm:
    """The arm with the fewest training steps (an untrained arm has none; a learning-curve
    claim's smallest trained arm, its curve), the first of equals; not one that waits for
    the others (`after_best`)."""
    return min((arm for arm in claim.arms if not arm.after_best
                and (arm.stages or not claim.eval_points)),
               key=lambda arm: sum(stage.steps for stage in arm.stages))


def check_configs(claim: Claim, ctx: Context) -> int:
    """Builds the config of every stage of every arm of `claim` as the runner writes it,
    strictly (an unknown or mistyped field fails, as in the driver); returns how many.
    Raises ValueError naming the arm and stage. The claim's data must be prepared (the
    MiniLM warm start)."""
    from cmlm_tf.driver import train_lib

    values = {**arm_values(1, ctx), "best_queue_size": 1024}
    folder = os.path.join(ctx.results, "configs", claim.name)
    init_dir = os.path.join(ctx.data, "init", "seed1")
    built = 0
    for arm in claim.arms:
        previous = None
        for index, stage in enumerate(arm.stages, 1):
            where = f"{claim.name}/{arm.name} stage {index}"
            config_files, fields = stage_config(stage, 1, previous, values, ctx=ctx,
                                                init_dir=init_dir)
            overrides = write_overrides(os.path.join(folder, arm.name, f"stage{index}.yaml"),
                                        fields)
            try:
                params = train_lib.build_params(stage.experiment, [
                    *(os.path.join(REPO, path) for path in config_files), overrides])
            except (ValueError, FileNotFoundError) as e:
                raise ValueError(f"{where}: {e}") from None
            if params.trainer.train_steps != stage_steps(stage, ctx):
                raise ValueError(f"{where}: trainer.train_steps {params.trainer.train_steps}, "
                                 f"not {stage_steps(stage, ctx)}")
            if params.task.train_data.seed != 1:
                raise ValueError(f"{where}: task.train_data.seed is not the run's seed")
            previous = os.path.join(folder, arm.name, f"stage{index}")
            built += 1
    return built


def check_claim(claim: Claim, ctx: Context) -> str:
    """`--check` for one claim: its data, every stage's config, its smallest arm end to end
    (seed 1). Returns the `ok` line; raises on the first error."""
    prepare(claim.needs, ctx)
    built = check_configs(claim, ctx)
    arm = smallest_arm(claim)
    if claim.eval_points:
        run_curves(claim, [arm], 1, ctx)
    else:
        run_arm(claim, arm, 1, ctx)
    result = read_json(result_path(claim, arm, 1, ctx))
    return (f"{claim.name}: ok ({built} stage configs; {arm.name} at {ctx.steps} steps: "
            f"{claim.metric} = {result['metrics'][claim.metric]:.4f}, "
            f"CPU {result['cpu_seconds']['total']:.0f} s)")


def run_check(names: List[str], ctx: Context) -> int:
    """`--check` for the claims `names`, each in turn (a failed one does not stop the
    others); 0 if all are ok, else 1."""
    os.environ.update(processes.PIECE_ENV)  # before this process first imports TensorFlow
    failed = []
    with processes.in_process():
        for name in names:
            claim = claims_lib.CLAIMS[name]
            if claim.results_from:
                print(f"check {claim.name}: runs as {claim.results_from}", flush=True)
                continue
            try:
                line = check_claim(claim, ctx)
            except (FileNotFoundError, RuntimeError, ValueError) as e:
                failed.append(claim.name)
                line = f"{claim.name}: FAILED: {str(e).splitlines()[0]}"
            print(f"check {line}", flush=True)
    checked = sum(1 for name in names if not claims_lib.CLAIMS[name].results_from)
    if failed:
        print(f"check: {len(failed)} of {checked} claims failed ({', '.join(failed)}); "
              f"logs under {ctx.results}", file=sys.stderr)
        return 1
    print(f"check: {checked} claims ok ({ctx.results})", flush=True)
    return 0


def measured_cpu_minutes(claim: Claim, results: str) -> Tuple[float, int]:
    """CPU minutes and result files found under RESULTS for the claim (any steps)."""
    total, count = 0.0, 0
    for root, _, files in os.walk(os.path.join(results, claim.name)):
        for name in files:
            if name.startswith("seed") and name.endswith(".json"):
                total += read_json(os.path.join(root, name))["cpu_seconds"]["total"]
                count += 1
    return total / 60, count


def list_claims(results: str) -> None:
    print(f"{'claim':<13}{'arms':>5}{'steps':>7}  {'est. CPU, 3 seeds':>18}  "
          f"{'measured so far':>16}  title")
    for claim in claims_lib.CLAIMS.values():
        if claim.results_from:
            print(f"{claim.name:<13}{'':>5}{'':>7}  {'in ' + claim.results_from:>18}  "
                  f"{'':>16}  {claim.title}")
            continue
        measured, count = measured_cpu_minutes(claim, results)
        done = f"{measured:.0f} min ({count})" if count else "-"
        print(f"{claim.name:<13}{len(claim.arms):>5}{claim.steps:>7}  "
              f"{claim.estimated_cpu_minutes(3):>14.0f} min  {done:>16}  {claim.title}")
    for name, why in claims_lib.NOT_RUN.items():
        print(f"{name:<13}{'':>5}{'':>7}  {'not in the runner':>18}  {'':>16}  {why}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.run",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--claim", help=f"one of {', '.join(claims_lib.CLAIMS)} (with "
                                         "--check: comma-separated, default all)")
    parser.add_argument("--list", action="store_true", help="the claims and their CPU time")
    parser.add_argument("--check", action="store_true",
                        help="prepare every claim's data, build every stage's config and "
                             "run each claim's smallest arm at 2 steps, in one process "
                             "(RESULTS/check)")
    parser.add_argument("--seeds", type=int, default=3, help="run seeds 1 to SEEDS")
    parser.add_argument("--seed", type=int, action="append", metavar="K",
                        help="run only seed K (repeatable), e.g. the seeds another machine "
                             "has not run; their results join the committed summary")
    parser.add_argument("--steps", type=int, help="the claim's step count (default: its own)")
    parser.add_argument("--threads", type=int,
                        help="TensorFlow threads of every training, export and evaluation "
                             "process (default: TensorFlow's, one per core); with 1, two "
                             "runners share 2 cores (docs/results.md)")
    parser.add_argument("--arms", help="comma-separated arms (default: all)")
    parser.add_argument("--results", default=os.path.join(REPO, "runs", "experiments"))
    parser.add_argument("--shared_data", default=os.path.join(REPO, "..", "shared", "data"))
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    results = os.path.abspath(args.results)
    if args.list:
        list_claims(results)
        return 0
    names = args.claim.split(",") if args.claim else []
    unknown = [name for name in names if name not in claims_lib.CLAIMS]
    if unknown:
        parser.error(f"--claim {unknown[0]}: unknown claim (have "
                     f"{', '.join(claims_lib.CLAIMS)})")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads {args.threads}: give 1 or more")
        for name in THREAD_VARIABLES:
            os.environ[name] = str(args.threads)
    if args.check:
        if args.arms or args.seed:
            parser.error("--check runs each claim's smallest arm, seed 1: no --arms or --seed")
        command = "python -m experiments.run --check" + (
            f" --claim {args.claim}" if args.claim else "") + (
            f" --threads {args.threads}" if args.threads is not None else "")
        ctx = Context(results=os.path.join(results, "check"),
                      shared=os.path.abspath(args.shared_data), seeds=[1],
                      steps=args.steps or 2, command=command)
        signal.signal(signal.SIGTERM, processes.raise_stopped)
        try:
            return run_check(names or list(claims_lib.CLAIMS), ctx)
        except Stopped as e:
            print(f"stopped ({e}); rerun the same command to continue", file=sys.stderr)
            return 130
    if len(names) != 1:
        parser.error("give --claim NAME, one claim (or --check, or --list)")
    claim = claims_lib.CLAIMS[names[0]]
    if claim.results_from:
        print(f"{claim.name}: evaluated by the runs of {claim.results_from}; running that")
        claim = claims_lib.CLAIMS[claim.results_from]
    steps = args.steps or claim.steps
    if args.seed and min(args.seed) < 1:
        parser.error(f"--seed {min(args.seed)}: seeds start at 1")
    seeds = sorted(set(args.seed)) if args.seed else list(range(1, args.seeds + 1))
    command = f"python -m experiments.run --claim {claim.name} " + (
        " ".join(f"--seed {seed}" for seed in seeds) if args.seed else f"--seeds {args.seeds}")
    if args.threads is not None:
        command += f" --threads {args.threads}"
    if args.steps:
        command += f" --steps {args.steps}"
    ctx = Context(results=results, shared=os.path.abspath(args.shared_data),
                  seeds=seeds, steps=steps, command=command)
    try:
        arms = [claim.arm(name) for name in args.arms.split(",")] if args.arms else claim.arms
    except KeyError as e:
        parser.error(f"--arms: {e.args[0]}")
    signal.signal(signal.SIGTERM, processes.raise_stopped)
    try:
        prepare(claim.needs, ctx)
        if claim.eval_points:
            for seed in seeds:
                run_curves(claim, arms, seed, ctx)
            return 0
        for after_best in (False, True):
            for seed in seeds:
                for arm in arms:
                    if arm.after_best != after_best or (arm.deterministic and seed > 1):
                        continue
                    run_arm(claim, arm, seed, ctx)
    except Stopped as e:
        print(f"stopped ({e}); rerun the same command to continue", file=sys.stderr)
        return 130
    except (FileNotFoundError, RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
