"""Beam options on the command lines (`cmlm_tf.scale.options`): Beam's flags pass through, a
flag nobody knows is an error naming it, and the DirectRunner gets a process per core."""

import pytest

pytest.importorskip("apache_beam", reason="the scale extra (pip install -e '.[scale]')")

from cmlm_tf.commands import common  # noqa: E402
from cmlm_tf.scale import options as beam_options  # noqa: E402


def _parser():
    parser = common.ArgumentParser(prog="cmd")
    parser.add_argument("--output", required=True)
    parser.add_argument("--k", type=int, default=4)
    return parser


def test_beam_flags_are_handed_on_and_the_command_keeps_its_own():
    args, beam_args = beam_options.split_arguments(_parser(), [
        "--output", "out", "--runner=DataflowRunner", "--project", "p", "--region=r",
        "--temp_location", "gs://b/tmp", "--k", "7"])
    assert (args.output, args.k) == ("out", 7)
    assert beam_args == ["--runner=DataflowRunner", "--project", "p", "--region=r",
                         "--temp_location", "gs://b/tmp"]
    assert beam_options.split_arguments(_parser(), ["--output", "o"])[1] == []


def test_a_flag_neither_knows_is_an_error_naming_it(capsys):
    with pytest.raises(SystemExit) as exit_info:
        beam_options.split_arguments(_parser(), ["--output", "o", "--runer=DirectRunner"])
    assert exit_info.value.code == 2
    assert "--runer" in capsys.readouterr().err


def test_options_default_to_local_worker_processes_and_yield_to_the_users():
    options = beam_options.make_options([], cpu_count=8).get_all_options()
    assert (options["runner"], options["direct_running_mode"], options["direct_num_workers"]
            ) == ("FnApiRunner", "multi_processing", 8)
    options = beam_options.make_options(["--direct_num_workers=3", "--direct_running_mode",
                                         "multi_threading"], cpu_count=8).get_all_options()
    assert (options["direct_running_mode"], options["direct_num_workers"]) == (
        "multi_threading", 3)
    remote = beam_options.make_options(["--runner=DataflowRunner"]).get_all_options()
    assert remote["runner"] == "DataflowRunner" and remote["direct_num_workers"] == 1
    assert not beam_options.runs_here(beam_options.make_options(["--runner=DataflowRunner"]))
    # The default runs here, in the DirectRunner's batch engine (no Prism download).
    local = beam_options.make_options([], cpu_count=2)
    assert beam_options.runs_here(local)
    assert type(beam_options.make_runner(local)).__name__ == "FnApiRunner"
    assert beam_options.make_runner(beam_options.make_options(["--runner=FlinkRunner"])) is None


def test_worker_threads_split_the_cores():
    def threads(flags, cpu_count=None):
        return beam_options.worker_threads(beam_options.make_options(flags, cpu_count=cpu_count),
                                           cpu_count=cpu_count)

    assert threads(["--direct_num_workers=3"], 8) == (2, None)
    assert threads(["--direct_num_workers=1"], 2) == (2, None)
    assert threads([], 2) == (1, 1)
    assert threads(["--direct_num_workers=16"], 8) == (1, 1)
    assert threads(["--direct_running_mode=multi_threading"]) == (None, None)
    assert threads(["--runner=FlinkRunner"]) == (None, None)
