"""examples/component-template: its component builds with `pipelink build` and passes `pipelink
check`, and its CI workflow and pre-commit configuration run that check. No GPU needed."""
import re
from pathlib import Path

from pipelink.cli import main

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "examples" / "component-template"


def test_the_template_component_builds_and_checks(tmp_path, capsys):
    obj = tmp_path / "saxpy.o"
    contract = TEMPLATE / "contracts" / "saxpy.json"
    assert main(["build", str(TEMPLATE / "src" / "saxpy.cu"), "--contract", str(contract), "-o", str(obj)]) == 0
    capsys.readouterr()
    assert main(["check", "--werror", str(contract), str(obj)]) == 0, capsys.readouterr()


def test_the_workflow_builds_then_checks():
    steps = [line.split("run:", 1)[1].strip() for line in
             (TEMPLATE / ".github" / "workflows" / "pipelink.yml").read_text().splitlines() if "run:" in line]
    build = next(i for i, s in enumerate(steps) if "pipelink build src/saxpy.cu --contract contracts/saxpy.json" in s)
    check = next(i for i, s in enumerate(steps) if s.startswith("pipelink check") and "build/saxpy.o" in s)
    assert build < check


def test_the_pre_commit_hook_is_pipelinks_and_picks_the_contract():
    config = (TEMPLATE / ".pre-commit-config.yaml").read_text()
    hooks = (REPO / ".pre-commit-hooks.yaml").read_text()
    used = re.findall(r"- id: (\S+)", config)
    assert used == ["pipelink-check"] and re.search(r"^- id: pipelink-check$", hooks, re.M)
    files = re.search(r"^\s*files: '(.+)'$", hooks, re.M).group(1)
    assert re.search(files, "contracts/saxpy.json") and not re.search(files, "src/saxpy.cu")
