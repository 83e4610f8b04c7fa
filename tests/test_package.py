"""The installed wheel works outside the repository: packaged recipes, bundled data, console
scripts; and it installs no generic top-level `export` package."""

import os
import re
import subprocess
import sys
import zipfile
from importlib import metadata

import pytest
from packaging.requirements import Requirement

from tests.conftest import REPO_DIR, TINY_CMLM_OVERRIDES


def _run(command, cwd, env, timeout=3600):
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, (command, result.stdout[-1500:], result.stderr[-3000:])
    return result


def test_wheel_runs_the_main_job_from_another_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
          str(REPO_DIR)], cwd=tmp_path, env=env)
    wheel = next((tmp_path / "dist").glob("cmlm_tf-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "cmlm_tf/recipes/cmlm_tiny.yaml" in names
    assert "cmlm_tf/data/corpus/persuasion.txt" in names
    assert [n for n in names if n.startswith("cmlm_tf/data/normalizer/bert_uncased-")]
    assert not [n for n in names if n.startswith(("export/", "configs/", "tests/"))]

    # A fresh venv with the wheel, borrowing the test environment's dependencies through a
    # .pth line (its other .pth files, the editable install's among them, are not run).
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    bin_dir = venv / "bin"
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" \
        / "site-packages"
    assert site.is_dir(), os.listdir(venv / "lib")
    dependencies = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    with open(os.path.join(site, "test_dependencies.pth"), "w", encoding="utf-8") as f:
        f.write("\n".join(dependencies) + "\n")
    _run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
          str(wheel)], tmp_path, env)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = dict(env, PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    # pydoc imports the package and names the file it came from.
    where = _run([str(bin_dir / "python"), "-m", "pydoc", "cmlm_tf"], work, env).stdout
    assert str(venv) in where, where[-2000:]
    missing = subprocess.run([str(bin_dir / "python"), "-m", "export.export_tfhub", "--help"],
                             cwd=work, env=env, capture_output=True, text=True)
    assert missing.returncode != 0 and "No module named 'export'" in missing.stderr

    # As a user runs them: TensorFlow's C++ log level left to its default.
    env = {k: v for k, v in env.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    _run([str(bin_dir / "cmlm-tf-train"), "--experiment=cmlm_tf/cmlm", "--config_file=cmlm_tiny",
          "--mode=train", "--model_dir=run",
          f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=10"], work, env)
    exported = _run([str(bin_dir / "cmlm-tf-export"), "--model_dir=run",
                     "--export_dir=exported"], work, env)
    # The export's log is quiet too: no CUDA or other ERROR line, no Keras metrics warning.
    assert not [line for line in exported.stderr.splitlines()
                if line.startswith("E") or "ERROR" in line], exported.stderr[-3000:]
    assert "compiled metrics" not in exported.stderr
    out = _run([str(bin_dir / "cmlm-tf-similarity"), "--model", "exported", "Anne was happy.",
                "She felt joy."], work, env).stdout
    assert "nearest to [0]: [1]" in out
    for recorded in ("README.md", "cmlm_tf_export.json"):  # no local paths
        text = (work / "exported" / recorded).read_text()
        assert str(work) not in text and str(tmp_path) not in text, recorded


def _import_in_fresh_process(**env):
    base = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return _run([sys.executable, "-m", "tests.driver.children", "import_then_tensorflow"],
                REPO_DIR,
                dict(base, PYTHONPATH=str(REPO_DIR), **env))


def test_import_quiets_tensorflow_start_up_lines():
    """`import cmlm_tf` before TensorFlow, log level unset: TensorFlow starts and runs an
    int64 op without its C++ lines (cuInit, oneDNN, CPU features) on stderr."""
    result = _import_in_fresh_process()
    noise = [line for line in result.stderr.splitlines()
             if "cuInit" in line or line.startswith(("E0000", "I0000", "W0000"))
             or "tensorflow/core/" in line or "xla/" in line]
    assert not noise, result.stderr[-2000:]
    assert result.stdout.split() in (["3", "3"], ["3", "2"])


def test_import_leaves_a_log_level_the_user_set():
    result = _import_in_fresh_process(TF_CPP_MIN_LOG_LEVEL="0")
    assert result.stdout.split() == ["3", "0"]
    # Level 0 shows TensorFlow's INFO lines, each naming its C++ source file.
    assert "tensorflow/" in result.stderr or "xla/" in result.stderr, result.stderr[-2000:]


def test_scale_doc_names_the_protobuf_and_pyarrow_bounds_of_apache_beam():
    """docs/scale.md says why the scale extra downgrades protobuf and pyarrow: the bounds it
    names are those of the installed apache-beam (its wheel's metadata), the Beam line is
    setup.py's, and the base install pins neither."""
    try:
        beam_requires = metadata.requires("apache-beam")
    except metadata.PackageNotFoundError:
        pytest.skip("the scale extra (pip install -e '.[scale]')")
    doc = (REPO_DIR / "docs" / "scale.md").read_text(encoding="utf-8")
    setup_py = (REPO_DIR / "setup.py").read_text(encoding="utf-8")
    beam_line = re.search(r'"apache-beam~=([\d.]+)"', setup_py).group(1)
    assert f"apache-beam {beam_line} (the extra's `apache-beam~={beam_line}`)" in doc
    base = setup_py[setup_py.index("install_requires"):setup_py.index("extras_require")]
    named = re.search(r"requires\s+`protobuf<(\d+)`\s+and\s+`pyarrow<(\d+)`", doc)
    assert named, "docs/scale.md: no 'requires `protobuf<N>` and `pyarrow<M>`'"
    bounds = {"protobuf": int(named[1]), "pyarrow": int(named[2])}
    for requirement in map(Requirement, beam_requires):
        if requirement.name in bounds and requirement.marker is None:
            bound = bounds.pop(requirement.name)
            assert not requirement.specifier.contains(f"{bound}.0.0", prereleases=True)
            assert requirement.specifier.contains(f"{bound - 1}.999"), requirement
            assert f'"{requirement.name}' not in base
    assert not bounds, f"apache-beam does not bound {sorted(bounds)}"
