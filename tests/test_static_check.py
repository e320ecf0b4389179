"""Every Python file of the repository passes pyflakes' checks (ruff's F rules): an unused import, a name
that nothing defines where it is used, a variable nobody reads. Much of the case studies' code runs only on a
GPU, which CI has not: this is where a missing import there is found first."""
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> str:
    beside = Path(sys.executable).parent / "ruff"  # the test extras' ruff, in the interpreter's environment
    found = str(beside) if beside.exists() else shutil.which("ruff")
    assert found, "ruff is not installed: pip install -e '.[test]' (pyproject.toml pins it)"
    return found


def test_every_python_file_passes_the_pyflakes_rules():
    r = subprocess.run([_ruff(), "check", "--select", "F", "--output-format", "concise", "--no-cache", str(ROOT)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
