"""The token embedding (case_studies/llama32_1b_decode/embedding: embed), on the CPU: the contract and object
check, it links alone, and the link map says what the contract asks for. The GPU side is
tests/test_gpu_decode_embed.py."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipelink.cli import main

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_parts  # noqa: E402


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    return decode_parts.build_embedding(tmp_path_factory.mktemp("embedding"))


def test_the_contract_checks(capsys):
    assert main(["check", str(decode_parts.EMBED_PARTS[0].contract)]) == 0, capsys.readouterr().err


def test_the_object_checks(objects, capsys):
    assert main(["check", str(objects["embed"])]) == 0, capsys.readouterr().err


def test_the_contract_agrees_with_the_helpers():
    c = json.loads((CASE / "embedding" / "embed.json").read_text())
    assert c["owner"] == "embedding-team"
    assert c["geometry"]["provides"]["EMBED_COLS"] == decode_parts.EMBED_COLS == 256 * 8
    params = {p["name"]: p for p in c["entry"]["params"]}
    assert params["table"]["shape"] == ["V", "H"] and params["table"]["const"]
    assert params["token"]["dtype"] == "i32" and params["token"]["shape"] == ["B"]
    assert params["x"]["shape"] == ["B", "H"] and not params["x"].get("const", False)


def test_it_links_alone(objects):
    linked = decode_parts.link_alone(objects["embed"])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    assert not [d for d in linked.diagnostics if d.severity == "warning"], [d.render() for d in linked.diagnostics]
    m = linked.manifest
    assert m.block_threads == 256 and m.resources.frame_bytes == 0 and m.resources.registers <= 64
    assert [p.name for p in m.user_params] == ["table", "token", "x", "B", "V", "H"]
    assert m.geometry == {"EMBED_COLS": 2048}
    assert "grid [B, ceil_div(H, 2048)]" in linked.link_map
    assert "subroutines none" in linked.link_map
    assert m.dynamic_smem == 0


def test_the_team_build_script_builds(tmp_path):
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run(["bash", str(CASE / "embedding" / "build.sh"), str(tmp_path)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in tmp_path.glob("*.o")] == ["embed.o"]
