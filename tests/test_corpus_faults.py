"""The fault script of the corpus, mining and precision surfaces
(benchmarks/corpus_faults.py): how a run is classified, and the cases that need no model,
each refused in one line naming the flag or field at fault."""

from tests.conftest import load_script


def test_a_run_is_classified_by_its_exit_code_and_its_one_error_line():
    faults = load_script("benchmarks/fault_runs.py")
    assert faults.outcome(2, "error: --threshold must be a finite number\n",
                          "--threshold") == "clear"
    assert faults.outcome(2, "mine: reading\nerror: bad\n", "--threshold") == "unnamed"
    assert faults.outcome(0, "1 pairs written\n", "--threshold") == "silent wrong"
    assert faults.outcome(1, "Traceback (most recent call last):\nKeyError: nan\n",
                          "--threshold") == "traceback"
    assert faults.outcome(0, "", "ok") == "ok"
    # A failure while running, reported in one line: clear; killed or aborted: not.
    assert faults.outcome(1, "error: the pipeline failed: W/export: cannot load\n",
                          "W/export") == "clear"
    assert faults.outcome(134, "error: the pipeline failed: W/export: cannot load\n",
                          "W/export") == "traceback"


def test_the_cases_without_a_model_are_refused_in_one_line(tmp_path):
    faults = load_script("benchmarks/corpus_faults.py")
    names = ["mine --threshold nan", "mine --index ann without faiss",
             "train --params_override=task.model.encoder=5"]
    results = faults.run_cases(faults.prepare(tmp_path), names)
    assert [name for name, _, _ in results] == names
    assert all(outcome == "clear" for _, outcome, _ in results), results
