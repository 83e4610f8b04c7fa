"""Without the `mteb` extra: `python -m cmlm_tf.evaluate mteb` says in one line how to
install it (exit code 2), and a loaded model has no MTEB metadata but encodes as before.
(With the extra: tests/mteb_extra.)"""

import sys

import pytest

from cmlm_tf import evaluate


def test_mteb_command_without_mteb_names_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "mteb", None)  # `import mteb` raises ImportError
    assert evaluate.main(["mteb", "--model", str(tmp_path), "--tasks", "STSBenchmark"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: python -m cmlm_tf.evaluate mteb needs MTEB, which is not installed: "
        "pip install 'cmlm_tf[mteb]'"]


def test_loaded_model_without_mteb(monkeypatch, tiny_export):
    import numpy as np

    import cmlm_tf

    model = cmlm_tf.load(str(tiny_export))
    monkeypatch.setitem(sys.modules, "mteb", None)
    assert not hasattr(model, "mteb_model_meta")
    with pytest.raises(AttributeError, match=r"pip install 'cmlm_tf\[mteb\]'"):
        model.mteb_model_meta  # noqa: B018
    vectors = model.encode(["the dog", "a cat", "the dog"])
    np.testing.assert_allclose(model.similarity_pairwise(vectors[:2], vectors[[2, 1]]),
                               [1.0, 1.0], atol=1e-5)
    # Keywords are checked as before: only an MTEB call (a loader, or MTEB's keywords) takes
    # the extra ones.
    with pytest.raises(TypeError, match="unexpected keyword arguments: normalise"):
        model.encode(["the dog"], normalise=True)
