"""Apache Beam pipeline options on the command lines of `embed_corpus` and `mine`.

A command parses its own flags and hands the rest to Beam (`--runner=DataflowRunner
--project=...`). A flag that neither the command nor any of Beam's option groups knows is an
error naming it, as a misspelt flag of the command is: it is never passed on silently.
Without `--runner`, the DirectRunner's batch engine (`FnApiRunner`) runs the pipeline here,
in one worker process per core (`--direct_running_mode=multi_processing
--direct_num_workers=<cores>`). `--runner=DirectRunner` itself would first try Beam's Prism
runner, which downloads a binary and runs Python workers in one process.
"""

import argparse
import contextlib
import functools
import logging
import os
from typing import Iterator, List, Optional, Sequence, Tuple


@contextlib.contextmanager
def quiet_beam_import() -> Iterator[None]:
    """Hides the warnings Beam logs while it is imported about optional cloud clients (GCS,
    BigQuery) that a local run never uses; other warnings show again afterwards."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def _pipeline_options():
    with quiet_beam_import():
        from apache_beam.options import pipeline_options
    return pipeline_options


@functools.cache
def beam_flags() -> frozenset:
    """Every flag of every registered Beam `PipelineOptions` group."""
    PipelineOptions = _pipeline_options().PipelineOptions  # noqa: N806

    parser = argparse.ArgumentParser(add_help=False, conflict_handler="resolve")
    groups, seen = list(PipelineOptions.__subclasses__()), set()
    while groups:
        group = groups.pop()
        if group in seen:
            continue
        seen.add(group)
        groups += group.__subclasses__()
        try:
            group._add_argparse_args(parser)
        except (argparse.ArgumentError, TypeError):
            continue
    return frozenset(flag for action in parser._actions for flag in action.option_strings)


_LOCAL_RUNNERS = ("fnapirunner", "directrunner", "direct", "switchingdirectrunner",
                  "bundlebaseddirectrunner", "prismrunner", "prism")


def split_arguments(parser, argv: Optional[Sequence[str]] = None
                    ) -> Tuple[argparse.Namespace, List[str]]:
    """The command's arguments and the Beam options among the rest.

    An unknown option that is not a Beam option either is reported by `parser` (one line,
    with the closest flag of the command), exit 2. Beam is imported only when there are
    options to check.
    """
    args, rest = parser.parse_known_args(argv)
    if not rest:
        return args, []
    try:
        known = beam_flags()
    except ImportError:
        parser.error(f"{' '.join(rest)}: not recognised (Beam options need apache-beam: "
                     "pip install -e \".[scale]\")")
    unknown = [token for token in rest if token.startswith("--")
               and token.split("=", 1)[0] not in known]
    positional = [token for token in rest if not token.startswith("-")
                  and not _follows_a_flag(rest, token)]
    if unknown or positional:
        parser.parse_args(unknown + positional)  # reports them (exits 2)
    return args, rest


def _follows_a_flag(tokens: Sequence[str], token: str) -> bool:
    index = tokens.index(token)
    return index > 0 and tokens[index - 1].startswith("--") and "=" not in tokens[index - 1]


def given_flags(beam_args: Sequence[str]) -> set:
    """The flag names in `beam_args` (`--runner=X` and `--runner X` both give `--runner`)."""
    return {arg.split("=", 1)[0] for arg in beam_args if arg.startswith("--")}


def make_options(beam_args: Sequence[str] = (),
                 cpu_count: Optional[int] = None):
    """Beam's options from the command's unknown arguments.

    Without `--runner`: the local batch engine (`FnApiRunner`) in `multi_processing` mode
    with `cpu_count` (default: this machine's cores) worker processes, whose logs show
    cmlm_tf's warnings and nothing of Beam's; the user's `--direct_running_mode`,
    `--direct_num_workers`, `--default_sdk_harness_log_level` and
    `--sdk_harness_log_level_overrides` win.
    """
    pipeline_options = _pipeline_options()
    given = given_flags(beam_args)
    if "--runner" in given:
        return pipeline_options.PipelineOptions(list(beam_args))
    defaults = {
        "--runner": "FnApiRunner",
        "--direct_running_mode": "multi_processing",
        "--direct_num_workers": str(cpu_count or os.cpu_count() or 1),
        # The workers' Beam chatter (INFO per bundle, WARN about options they do not know)
        # would drown the progress lines, and a worker's error reaches the command anyway, as
        # the pipeline's exception; cmlm_tf's own warnings still show.
        "--default_sdk_harness_log_level": "CRITICAL",
        "--sdk_harness_log_level_overrides": '{"cmlm_tf": "WARNING"}',
    }
    flags = [f"{flag}={value}" for flag, value in defaults.items() if flag not in given]
    return pipeline_options.PipelineOptions(flags + list(beam_args))


def runs_here(options) -> bool:
    """Whether the workers run on this machine (a local runner)."""
    runner = options.view_as(_pipeline_options().StandardOptions).runner
    name = runner if isinstance(runner, str) else type(runner).__name__ if runner else ""
    return name.rsplit(".", 1)[-1].lower() in _LOCAL_RUNNERS or not name


def worker_threads(options,
                   cpu_count: Optional[int] = None) -> Tuple[Optional[int], Optional[int]]:
    """(intra_op_threads, inter_op_threads) for each worker's TensorFlow.

    W local worker processes on C cores get max(1, C // W) intra-op threads each, so that
    together they use the cores without oversubscribing them; a worker with one core gets
    one inter-op thread, a worker with more keeps TensorFlow's default (one inter-op thread
    cost a single worker on 2 cores 15 % of its speed: docs/results.md, "Mining at corpus
    scale"). Elsewhere (threads in one process, remote workers): None, TensorFlow's defaults.
    """
    direct = options.view_as(_pipeline_options().DirectOptions)
    if not runs_here(options) or direct.direct_running_mode != "multi_processing":
        return None, None
    cores = cpu_count or os.cpu_count() or 1
    workers = direct.direct_num_workers or cores
    intra = max(1, cores // workers)
    return intra, 1 if intra == 1 else None


def make_runner(options):
    """The runner for `options`: the DirectRunner's batch engine, built as the DirectRunner
    builds it (the pipeline options passed on to the workers), for `--runner=FnApiRunner`;
    None (Beam picks from the options) otherwise. Written against Beam 2.77."""
    runner = options.view_as(_pipeline_options().StandardOptions).runner
    if not isinstance(runner, str) or runner.lower() != "fnapirunner":
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))
