"""`python -m cmlm_tf.evaluate` and `python -m cmlm_tf.mine` in a fresh process: `--help` and the
exit code of a missing model. (In this process: tests/commands/test_evaluate.py.)"""

import os
import subprocess
import sys

from tests.conftest import REPO_DIR, write_byte_lines


def test_command_line_exit_codes_in_a_fresh_process(tmp_path, tiny_export):
    env = dict(os.environ, PYTHONPATH=str(REPO_DIR), TF_CPP_MIN_LOG_LEVEL="2")
    usage = subprocess.run([sys.executable, "-m", "cmlm_tf.evaluate", "--help"], cwd=REPO_DIR,
                           capture_output=True, text=True, env=env, timeout=3600)
    assert usage.returncode == 0 and "sts" in usage.stdout and "mining" in usage.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "cmlm_tf.mine", "--model", str(tmp_path / "nothing"), "--src",
         write_byte_lines(tmp_path / "a.txt", [b"x"]), "--tgt", str(tmp_path / "a.txt"), "--output",
         str(tmp_path / "out.tsv")],
        cwd=REPO_DIR, capture_output=True, text=True, env=env, timeout=3600)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1] == (
        f"python -m cmlm_tf.mine: error: argument --model: {tmp_path / 'nothing'}: not found")
