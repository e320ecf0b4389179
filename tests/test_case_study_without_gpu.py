"""The case studies' GPU scripts, where torch is missing: a sentence saying what they need and exit code 2, no
traceback (the builds run without torch: build.py, and the Llama decode run.py links instead)."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["case_studies/qwen3_32b_mlp/run.py", "case_studies/qwen3_32b_mlp/smoke.py",
           "case_studies/qwen3_32b_mlp/sanitize.py", "case_studies/tp_gemm_rs/run.py"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed: the scripts would run")
@pytest.mark.parametrize("script", SCRIPTS)
def test_a_gpu_script_without_torch_says_what_it_needs(script):
    done = subprocess.run([sys.executable, str(ROOT / script)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{Path(script).name} runs the kernels" in done.stderr and "build.py" in done.stderr
